"""Prefix caching on the shipped Mooncake slice: with an unbounded cache the block hit rate is
the trace's share of repeated blocks (counted here from the trace alone); a bounded cache hits
less, and less as it shrinks."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import pytest

import batchsim.workloads as wl
from batchsim.experiment.runner import ExperimentResult
from tests.validation.experiment_builder import base_experiment, run_dict

POOL_BLOCK = 16
MOONCAKE_BLOCK = 512


def _repeated_block_share() -> float:
    """Requests served one at a time: each finds the leading Mooncake blocks that any earlier
    request had, counted in pool blocks; at least one prompt token is always computed."""
    trace = wl.load_trace(wl.resolve_trace_path("mooncake-conversation", Path(".")), "mooncake")
    assert trace.prefix_blocks is not None
    seen: set[int] = set()
    repeated = full = 0
    for index, prompt in enumerate(trace.prompt_tokens.tolist()):
        ids = trace.prefix_blocks.blocks_of(index).tolist()
        leading = next((k for k, block in enumerate(ids) if block not in seen), len(ids))
        per_block = MOONCAKE_BLOCK // POOL_BLOCK
        repeated += min(leading * per_block, (prompt - 1) // POOL_BLOCK)
        full += prompt // POOL_BLOCK
        seen.update(ids)
    return repeated / full


def _serve_one_at_a_time(tmp_path: Path, num_blocks: int) -> ExperimentResult:
    exp = base_experiment(
        max_model_len=131072, kv_cache={"num_blocks": num_blocks, "block_size": POOL_BLOCK,
                                        "prefix_caching": True},
        workload={"arrivals": {"kind": "trace", "path": "mooncake-conversation",
                               "format": "mooncake"}},
        policies=[{"name": "one", "kind": "chunked_prefill", "token_budget": 8192,
                   "max_num_seqs": 1}],
    )
    return run_dict(tmp_path, exp)


def _hit_rate(result: ExperimentResult) -> float:
    cache = result.arms[0].metrics["prefix_cache"]
    assert isinstance(cache, dict)
    return float(cache["hit_rate_blocks"])


def test_an_unbounded_cache_hits_every_repeated_block(tmp_path: Path) -> None:
    # 1M blocks hold every prompt of the slice (12.4M tokens) with room to spare.
    result = _serve_one_at_a_time(tmp_path, 1_000_000)
    assert _hit_rate(result) == pytest.approx(_repeated_block_share(), rel=1e-12)
    requests = result.arms[0].requests
    assert (requests["cached_tokens"] < requests["prompt_tokens"]).all()


# Six whole runs of the trace; the unbounded cache's exact hit rate is checked by default.
@pytest.mark.slow
def test_a_bounded_cache_hits_less_as_it_shrinks(tmp_path: Path) -> None:
    rates = [_hit_rate(_serve_one_at_a_time(tmp_path, blocks))
             for blocks in (200_000, 50_000, 10_000)]
    assert _repeated_block_share() > rates[0], rates
    assert all(a > b for a, b in pairwise(rates)), rates
