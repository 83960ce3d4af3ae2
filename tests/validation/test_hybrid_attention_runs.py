"""Hybrid-attention models end to end: the fast path agrees with stepping one by one, and
what the hybrid pool cannot count is refused before anything runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from batchsim.gpu.model_spec import ModelError
from tests.validation.experiment_builder import base_experiment, run_dict
from tests.validation.test_fast_path_equivalence import _assert_paths_agree


def _experiment(model: str, arm: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    return base_experiment(
        model=model, hardware="h200-sxm", dtype={"weights": "fp8", "kv_cache": "bf16"},
        tensor_parallel=2, max_model_len=4096,
        # Few blocks: sequences preempt each other, and the window's blocks count.
        kv_cache={"num_blocks": 600},
        workload={
            "arrivals": {"kind": "closed_loop", "concurrency": 24},
            "prompt_tokens": {"kind": "lognormal", "mean": 400, "cv": 1.0},
            "output_tokens": {"kind": "lognormal", "mean": 250, "cv": 1.0},
            "num_requests": 60,
        },
        policies=[arm], **overrides,
    )


@pytest.mark.parametrize(("model", "arm"), [
    ("gpt-oss-20b", {"name": "a", "kind": "chunked_prefill", "token_budget": 512}),
    ("qwen3-next-80b-a3b", {"name": "a", "kind": "continuous", "max_num_seqs": 16}),
])
def test_the_fast_path_matches_stepping_one_by_one(tmp_path: Path, model: str,
                                                   arm: dict[str, Any]) -> None:
    result = _assert_paths_agree(tmp_path, _experiment(model, arm, replicas=2,
                                                       router="least_kv"))
    preemptions = result.arms[0].metrics["preemptions"]
    assert isinstance(preemptions, int) and preemptions > 0  # the small pool was felt


@pytest.mark.parametrize(("arm", "key"), [
    ({"name": "a", "kind": "continuous", "prefix_caching": True}, "policies[0].prefix_caching"),
    ({"name": "a", "kind": "continuous", "preemption": "swap"}, "policies[0].preemption"),
    ({"name": "a", "kind": "static", "max_batch_size": 8}, "policies[0].kind"),
    ({"name": "a", "kind": "continuous", "kv_allocation": "contiguous"},
     "policies[0].kv_allocation"),
])
def test_what_the_hybrid_pool_cannot_count_is_refused(tmp_path: Path, arm: dict[str, Any],
                                                      key: str) -> None:
    with pytest.raises(ModelError, match=rf"^{key.replace('[', '.').replace(']', '.')}") as err:
        run_dict(tmp_path, _experiment("gemma-3-27b", arm))
    assert "\n" not in str(err.value)
