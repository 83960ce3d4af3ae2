"""Contiguous KV allocation end to end: the fast path agrees with stepping one by one, and on
the same memory and traffic contiguous regions keep fewer sequences in flight than paged
blocks, with the fragmentation metric saying why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.validation.experiment_builder import base_experiment, run_dict
from tests.validation.test_fast_path_equivalence import _assert_paths_agree


def _experiment(arms: list[dict[str, Any]], **overrides: Any) -> dict[str, Any]:
    return base_experiment(
        max_model_len=2048,
        kv_cache={"num_blocks": 400},
        workload={
            "arrivals": {"kind": "closed_loop", "concurrency": 48},
            "prompt_tokens": {"kind": "lognormal", "mean": 300, "cv": 1.0},
            "output_tokens": {"kind": "lognormal", "mean": 200, "cv": 1.0},
            "num_requests": 150,
        },
        policies=arms,
        **overrides,
    )


@pytest.mark.parametrize("arm", [
    {"name": "c", "kind": "continuous", "kv_allocation": "contiguous"},
    {"name": "c", "kind": "chunked_prefill", "token_budget": 256, "kv_allocation": "contiguous",
     "preemption": "swap"},
    {"name": "c", "kind": "continuous", "kv_allocation": "contiguous",
     "admission_reserve": {"assumed_max_new_tokens": 256}},
])
def test_the_fast_path_matches_stepping_one_by_one(tmp_path: Path, arm: dict[str, Any]) -> None:
    _assert_paths_agree(tmp_path, _experiment([arm], replicas=2, router="least_kv"))


def test_contiguous_sustains_fewer_sequences_on_the_same_memory(tmp_path: Path) -> None:
    result = run_dict(tmp_path, _experiment([
        {"name": "paged", "kind": "continuous"},
        {"name": "contiguous", "kind": "continuous", "kv_allocation": "contiguous"},
    ]))
    paged, contiguous = (arm.metrics for arm in result.arms)
    paged_kv, contiguous_kv = paged["kv_fragmentation"], contiguous["kv_fragmentation"]
    assert contiguous_kv["mean_sequences"] < 0.85 * paged_kv["mean_sequences"]
    assert contiguous["output_throughput_tps"] < paged["output_throughput_tps"]
    assert paged_kv["external_share_mean"] == 0.0
    assert paged_kv["requests_refused_by_fragmentation"] == 0
    assert contiguous_kv["internal_share_mean"] > 5 * paged_kv["internal_share_mean"]
    assert contiguous_kv["external_share_mean"] > 0.0
    assert contiguous_kv["requests_refused_by_fragmentation"] > 0
    assert contiguous["preemptions"] == 0  # a region holds its sequence's whole life
