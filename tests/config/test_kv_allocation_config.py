"""`kv_cache.allocation` and an arm's `kv_allocation`: what they build, and the combinations
contiguous regions cannot run, refused in one line naming the key (by `validate` as by `run`,
since the file's schema refuses them)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from batchsim.apps.cli import app
from batchsim.experiment.loader import ConfigError, load_experiment
from batchsim.experiment.policy_factory import build_pool
from batchsim.sim.kv_contiguous import ContiguousKVPool


def _continuous(**keys: Any) -> dict[str, Any]:
    return {"name": "c", "kind": "continuous", **keys}


@pytest.mark.parametrize(("kv_cache", "arm", "key", "words"), [
    ({"allocation": "contiguous"}, {"name": "s", "kind": "static"},
     "kv_cache.allocation", "contiguous applies to continuous and chunked_prefill arms"),
    ({}, _continuous(kv_allocation="contiguous", prefix_caching=True),
     "policies.0.prefix_caching", "prefix caching shares blocks"),
    ({"allocation": "contiguous", "prefix_caching": True}, _continuous(),
     "kv_cache.prefix_caching", "prefix caching shares blocks"),
    ({}, _continuous(kv_allocation="contiguous",
                     speculative={"draft_model": "llama-3.2-1b",
                                  "acceptance": {"kind": "constant", "rate": 0.7}}),
     "policies.0.speculative", "speculative decoding is not modelled"),
])
def test_combinations_contiguous_cannot_run_are_refused_naming_the_key(
        minimal_data: dict[str, Any], write_yaml: Callable[[dict[str, Any]], Path],
        kv_cache: dict[str, Any], arm: dict[str, Any], key: str, words: str) -> None:
    minimal_data["kv_cache"] = kv_cache
    minimal_data["policies"] = [arm]
    with pytest.raises(ConfigError) as refused:
        load_experiment(write_yaml(minimal_data))
    line = str(refused.value)
    assert "\n" not in line and f"{key}: " in line and words in line


def test_validate_refuses_it_in_one_line(minimal_data: dict[str, Any],
                                         write_yaml: Callable[[dict[str, Any]], Path]) -> None:
    minimal_data["kv_cache"] = {"allocation": "contiguous"}
    done = CliRunner().invoke(app, ["validate", str(write_yaml(minimal_data))])
    assert done.exit_code == 2, done.output
    assert "kv_cache.allocation: contiguous applies" in done.output
    assert "Traceback" not in done.output


def test_an_arm_overrides_the_experiment_allocation(
        minimal_data: dict[str, Any], write_yaml: Callable[[dict[str, Any]], Path]) -> None:
    minimal_data["kv_cache"] = {"allocation": "contiguous", "contiguous_reserve": "max_model_len"}
    minimal_data["policies"] = [_continuous(), _continuous(name="p", kv_allocation="paged")]
    exp, _ = load_experiment(write_yaml(minimal_data))
    contiguous, paged = (build_pool(arm, 100, 16, 4096, kv_cache=exp.kv_cache)
                         for arm in exp.policies)
    assert isinstance(contiguous, ContiguousKVPool) and contiguous.reserve == "max_model_len"
    assert not isinstance(paged, ContiguousKVPool) and paged.allocation == "paged"
