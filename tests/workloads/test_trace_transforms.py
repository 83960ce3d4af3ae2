"""Trace transforms: window, length filter, seeded sampling, rescaling to a target rate, and
splicing several traces into one stream with a tenant per trace."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from batchsim.workloads import TraceRequests, WorkloadError, load_trace, resolve_trace_path
from batchsim.workloads.arrivals import gamma_arrivals
from batchsim.workloads.traces.transforms import (
    filter_lengths,
    mean_rate,
    sample_fraction,
    scale_to_rate,
    select,
    splice_tenants,
    window,
)


def _cv(times: np.ndarray) -> float:
    gaps = np.diff(times)
    return float(gaps.std() / gaps.mean())


@pytest.fixture(scope="module")
def code() -> TraceRequests:
    return load_trace(resolve_trace_path("azure2023-code", Path(".")))


@pytest.fixture(scope="module")
def mooncake() -> TraceRequests:
    return load_trace(resolve_trace_path("mooncake-conversation", Path(".")), "mooncake")


def _synthetic(n: int = 6) -> TraceRequests:
    times = np.arange(n, dtype=np.float64) * 10.0
    return TraceRequests(times, np.arange(1, n + 1) * 100, np.arange(1, n + 1), "synthetic")


@pytest.mark.parametrize("target", [0.5, 2.0, 40.0])
def test_target_rate_is_hit_and_burstiness_kept_on_the_bursty_azure_code_trace(
        code: TraceRequests, target: float) -> None:
    scaled, factor = scale_to_rate(code, target)
    assert mean_rate(scaled.arrival_s) == pytest.approx(target, rel=1e-12)
    # One common factor: the inter-arrival CV (~13 on this trace) is unchanged exactly.
    assert _cv(code.arrival_s) == pytest.approx(13.15, abs=0.01)
    assert _cv(scaled.arrival_s) == pytest.approx(_cv(code.arrival_s), rel=1e-9)
    assert factor == pytest.approx(mean_rate(code.arrival_s) / target)
    np.testing.assert_array_equal(scaled.prompt_tokens, code.prompt_tokens)


def test_scaling_a_gamma_stream_keeps_its_cv_to_sampling_error() -> None:
    """A stream drawn with cv 3 at 1/s, rescaled to 25/s, still has cv 3 (within the sample
    cv's error) and the target rate."""
    times = gamma_arrivals(np.random.default_rng(7), 1.0, 3.0, num_requests=50_000)
    trace = TraceRequests(times, np.ones(times.size, np.int64), np.ones(times.size, np.int64),
                          "gamma")
    scaled, _ = scale_to_rate(trace, 25.0)
    assert mean_rate(scaled.arrival_s) == pytest.approx(25.0)
    assert _cv(scaled.arrival_s) == pytest.approx(3.0, rel=0.05)


def test_window_keeps_the_lull_before_its_first_request() -> None:
    cut = window(_synthetic(), 15.0, 45.0)
    assert cut.arrival_s.tolist() == [5.0, 15.0, 25.0]
    assert cut.prompt_tokens.tolist() == [300, 400, 500]


def test_window_with_no_requests_is_an_error() -> None:
    with pytest.raises(WorkloadError, match=r"no requests in window \[51, 59\) s"):
        window(_synthetic(), 51.0, 59.0)


def test_filter_bounds_are_inclusive() -> None:
    kept = filter_lengths(_synthetic(), min_prompt=200, max_prompt=500, max_output=4)
    assert kept.prompt_tokens.tolist() == [200, 300, 400]
    assert kept.arrival_s.tolist() == [10.0, 20.0, 30.0]  # times are not shifted
    with pytest.raises(WorkloadError, match="leaves no requests"):
        filter_lengths(_synthetic(), min_output=100)


def test_sampling_is_seeded_and_keeps_the_fraction(code: TraceRequests) -> None:
    first = sample_fraction(code, 0.25, np.random.default_rng(3))
    again = sample_fraction(code, 0.25, np.random.default_rng(3))
    np.testing.assert_array_equal(first.arrival_s, again.arrival_s)
    expected = 0.25 * len(code)
    assert abs(len(first) - expected) < 4 * np.sqrt(expected * 0.75)
    assert np.all(np.isin(first.arrival_s, code.arrival_s))


def test_prefix_blocks_follow_their_requests_through_the_transforms(
        mooncake: TraceRequests) -> None:
    blocks = mooncake.prefix_blocks
    assert blocks is not None
    by_prompt = {int(p): blocks.blocks_of(i).tolist()
                 for i, p in enumerate(mooncake.prompt_tokens)}
    thinned = sample_fraction(filter_lengths(window(mooncake, 60, 240), max_prompt=20_000),
                              0.5, np.random.default_rng(1))
    assert thinned.prefix_blocks is not None and len(thinned.prefix_blocks) == len(thinned)
    for i, prompt in enumerate(thinned.prompt_tokens):
        assert thinned.prefix_blocks.blocks_of(i).size == -(-prompt // 512)
        if list(mooncake.prompt_tokens).count(prompt) == 1:  # unambiguous: check the ids
            assert thinned.prefix_blocks.blocks_of(i).tolist() == by_prompt[int(prompt)]


def test_mean_rate_needs_two_distinct_times() -> None:
    with pytest.raises(WorkloadError, match="at least two requests"):
        scale_to_rate(select(_synthetic(), np.array([0])), 1.0)


def test_splice_merges_by_time_and_labels_each_tenant(mooncake: TraceRequests) -> None:
    a = _synthetic(3)  # 0, 10, 20
    b = select(a, np.arange(3), a.arrival_s + 5.0)
    merged, tenant = splice_tenants([a, b])
    assert merged.arrival_s.tolist() == [0.0, 5.0, 10.0, 15.0, 20.0, 25.0]
    assert tenant.tolist() == [0, 1, 0, 1, 0, 1]
    assert merged.prefix_blocks is None  # the synthetic traces have none


def test_splice_renumbers_block_ids_so_tenants_share_no_prefix(
        mooncake: TraceRequests) -> None:
    first = window(mooncake, 0, 30)
    merged, tenant = splice_tenants([first, first])
    blocks = merged.prefix_blocks
    assert blocks is not None and len(blocks) == 2 * len(first)
    ids_of = [set(blocks.ids[blocks.offsets[i]:blocks.offsets[i + 1]].tolist())
              for i in range(len(merged))]
    zero = set().union(*(ids for ids, t in zip(ids_of, tenant, strict=True) if t == 0))
    one = set().union(*(ids for ids, t in zip(ids_of, tenant, strict=True) if t == 1))
    assert zero and one and not zero & one
