"""`kv_cache.tiers` and an arm's `kv_tiers`: refused in one line naming the key where no arm
could use them (by `validate` as by `run`, since the file's schema refuses them)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from batchsim.experiment.loader import ConfigError, load_experiment

CPU = {"kind": "cpu", "capacity_gb": 8, "bandwidth_gb_s": 25}


@pytest.mark.parametrize(("kv_cache", "arm", "key", "words"), [
    ({"tiers": [CPU]}, {"name": "c", "kind": "continuous"},
     "kv_cache.tiers", "no arm caches prefixes"),
    ({}, {"name": "c", "kind": "continuous", "kv_tiers": [CPU]},
     "policies.0.kv_tiers", "this arm caches no prefixes"),
    ({"prefix_caching": True, "tiers": [CPU, {**CPU, "capacity_gb": 2}]},
     {"name": "c", "kind": "continuous"}, "kv_cache.tiers", "the tier kind 'cpu' appears 2"),
    ({"prefix_caching": True, "tiers": [{"kind": "cpu", "capacity_gb": 1,
                                         "bandwidth_gb_s": 0}]},
     {"name": "c", "kind": "continuous"}, "kv_cache.tiers.0.bandwidth_gb_s",
     "expected a value > 0"),
    ({"prefix_caching": True, "tiers": [{"kind": "tape", "capacity_gb": 1}]},
     {"name": "c", "kind": "continuous"}, "kv_cache.tiers.0.kind",
     "expected one of: cpu, disk, remote"),
])
def test_tiers_no_arm_can_use_are_refused_naming_the_key(
        minimal_data: dict[str, Any], write_yaml: Callable[[dict[str, Any]], Path],
        kv_cache: dict[str, Any], arm: dict[str, Any], key: str, words: str) -> None:
    minimal_data["kv_cache"] = kv_cache
    minimal_data["policies"] = [arm]
    with pytest.raises(ConfigError) as refused:
        load_experiment(write_yaml(minimal_data))
    line = str(refused.value)
    assert "\n" not in line and key in line and words in line, line


def test_an_arm_without_prefix_caching_ignores_the_experiments_tiers(
        minimal_data: dict[str, Any], write_yaml: Callable[[dict[str, Any]], Path]) -> None:
    minimal_data["kv_cache"] = {"tiers": [CPU]}
    minimal_data["policies"] = [{"name": "c", "kind": "continuous", "prefix_caching": True},
                                {"name": "plain", "kind": "continuous"}]
    exp, _ = load_experiment(write_yaml(minimal_data))
    assert exp.kv_cache.tiers[0].capacity_gb == 8
