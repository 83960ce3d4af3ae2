"""The experiment file's real-traffic keys, end to end: schema rules, trace transforms, the
shaped arrival kinds and corpus lengths, as `build_traffic` turns them into requests."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from batchsim.experiment.loader import ConfigError, validate_experiment
from batchsim.experiment.schema import WorkloadConfig
from batchsim.experiment.traffic import BuiltTraffic, build_traffic
from batchsim.sim.traffic import ClosedLoopTraffic, OpenLoopTraffic
from batchsim.workloads import WorkloadError, load_trace, resolve_trace_path
from batchsim.workloads.corpus import load_length_corpus
from batchsim.workloads.traces.transforms import mean_rate

DATA = Path(__file__).parent / "data"
CORPUS = {"kind": "corpus", "path": "sharegpt-lengths"}


def _workload(**workload: Any) -> WorkloadConfig:
    return WorkloadConfig.model_validate(workload)


def _build(seed: int = 3, max_model_len: int = 1 << 20, **workload: Any) -> BuiltTraffic:
    return build_traffic(_workload(**workload), seed=seed, base_dir=DATA,
                         max_model_len=max_model_len)


def _open(built: BuiltTraffic) -> OpenLoopTraffic:
    assert isinstance(built.traffic, OpenLoopTraffic)
    return built.traffic


def _problem(workload: dict[str, Any]) -> str:
    data = {"name": "x", "model": "llama-3.1-8b", "hardware": "h100-sxm",
            "workload": workload, "policies": [{"name": "v", "kind": "continuous"}]}
    with pytest.raises(ConfigError) as info:
        validate_experiment(data, source="exp.yaml")
    return str(info.value)


# --- schema rules ----------------------------------------------------------------------------


@pytest.mark.parametrize(("arrivals", "expected"), [
    ({"kind": "trace", "path": "t.csv", "format": "csv"},
     "workload.arrivals.columns: required with format csv"),
    ({"kind": "trace", "path": "t.csv", "columns": {"arrival_time": "t", "prompt_tokens": "p",
                                                    "output_tokens": "o"}},
     "workload.arrivals.columns: only for formats csv and parquet"),
    ({"kind": "trace", "path": "t.csv", "failed_rows": "drop"},
     "workload.arrivals.failed_rows: only for format burstgpt"),
    ({"kind": "trace", "path": "t.csv", "time_scale": 0.5, "target_rate": 3},
     "workload.arrivals.target_rate: give time_scale or target_rate, not both"),
    ({"kind": "trace", "path": "t.csv", "window_s": [60, 10]},
     "workload.arrivals.window_s: end must be > start"),
    ({"kind": "trace", "path": "t.csv", "filter": {"min_output_tokens": 9,
                                                   "max_output_tokens": 3}},
     "workload.arrivals.filter.max_output_tokens: must be >= min_output_tokens (got 3 < 9)"),
    ({"kind": "trace", "path": "t.csv", "format": "sharegpt"},
     "workload.arrivals.format: expected one of: azure2023, azure2024, mooncake, burstgpt, "
     "csv, parquet (got 'sharegpt')"),
])
def test_trace_option_rules_name_the_key(arrivals: dict[str, Any], expected: str) -> None:
    assert expected in _problem({"arrivals": arrivals})


@pytest.mark.parametrize(("arrivals", "expected"), [
    ({"kind": "rate_curve"}, "workload.arrivals: give exactly one of points or path"),
    ({"kind": "rate_curve", "path": "c.csv"}, "workload.arrivals.rate_column: required with"),
    ({"kind": "rate_curve", "points": [[0, 1], [10, 2], [10, 3]]},
     "workload.arrivals.points: times must increase"),
    ({"kind": "rate_curve", "points": [[0, 0]]}, "workload.arrivals.points: every rate is 0"),
    ({"kind": "rate_curve", "points": [[0, 1, 2]]}, "workload.arrivals.points.0: expected at "
                                                    "most 2 item"),
    ({"kind": "rate_curve", "points": [[0, 1]], "rate_scale": 2, "mean_rate": 1},
     "workload.arrivals.mean_rate: give rate_scale or mean_rate, not both"),
    ({"kind": "diurnal", "mean_rate": 1, "amplitude": 1.5},
     "workload.arrivals.amplitude: expected a value <= 1"),
    ({"kind": "weibull", "rate": 1, "cv": 0}, "workload.arrivals.cv: expected a value >= 0.001"),
])
def test_shaped_arrival_rules_name_the_key(arrivals: dict[str, Any], expected: str) -> None:
    workload = {"arrivals": arrivals, "lengths": CORPUS, "duration_s": 10}
    assert expected in _problem(workload)


def test_corpus_lengths_exclude_the_length_distributions_and_traces() -> None:
    fixed = {"kind": "fixed", "value": 4}
    poisson = {"kind": "poisson", "rate": 1}
    assert "workload.prompt_tokens: not allowed with lengths, the corpus gives both" in _problem(
        {"arrivals": poisson, "lengths": CORPUS, "prompt_tokens": fixed, "num_requests": 5})
    assert "workload.lengths: not allowed with trace arrivals" in _problem(
        {"arrivals": {"kind": "trace", "path": "t.csv"}, "lengths": CORPUS})


# --- traces ----------------------------------------------------------------------------------


def test_trace_transforms_apply_in_order_and_are_described() -> None:
    arrivals = {"kind": "trace", "path": "mooncake-conversation", "format": "mooncake",
                "window_s": [0, 120], "filter": {"max_prompt_tokens": 32000},
                "sample_fraction": 0.5, "target_rate": 2.0}
    built = _build(arrivals=arrivals)
    traffic = _open(built)
    assert mean_rate(traffic.arrival_s) == pytest.approx(2.0)
    assert traffic.prompt_tokens.max() <= 32000
    assert "window [0, 120) s: 339 of 918; length filter: 307 of 339; sample_fraction 0.5: " \
           in built.source and "target_rate 2/s: time_scale " in built.source
    again = _open(_build(arrivals=arrivals))
    np.testing.assert_array_equal(traffic.arrival_s, again.arrival_s)  # seeded sampling
    other = _open(_build(seed=4, arrivals=arrivals))
    assert not np.array_equal(traffic.prompt_tokens, other.prompt_tokens)


def test_burstgpt_dropped_rows_reach_the_summary_and_console() -> None:
    built = _build(arrivals={"kind": "trace", "path": "burstgpt_sample.csv",
                             "format": "burstgpt", "failed_rows": "drop"})
    assert _open(built).prompt_tokens.tolist() == [472, 1087, 417, 861]
    [note] = built.notes
    assert "dropped 3 of 7 rows (failed_rows: drop)" in note and note in built.source


def test_burstgpt_failed_rows_stop_the_run_by_default() -> None:
    with pytest.raises(WorkloadError, match=r"burstgpt_sample\.csv:5: Response tokens is 0"):
        _build(arrivals={"kind": "trace", "path": "burstgpt_sample.csv", "format": "burstgpt"})


def test_a_shipped_trace_read_in_the_wrong_format_is_named() -> None:
    with pytest.raises(WorkloadError, match="'mooncake-conversation' is format 'mooncake' "
                                            r"\(got format 'azure2023'\)"):
        _build(arrivals={"kind": "trace", "path": "mooncake-conversation"})
    with pytest.raises(WorkloadError, match="'sharegpt-lengths' is not a trace with arrival"):
        _build(arrivals={"kind": "trace", "path": "sharegpt-lengths", "format": "csv",
                         "columns": {"arrival_time": "t", "prompt_tokens": "p",
                                     "output_tokens": "o"}})


def test_azure2024_fixture_replays_through_the_schema() -> None:
    traffic = _open(_build(arrivals={"kind": "trace", "path": "azure2024_sample.csv",
                                     "format": "azure2024", "time_scale": 2.0}))
    expected = load_trace(DATA / "azure2024_sample.csv", "azure2024").arrival_s * 2
    np.testing.assert_allclose(traffic.arrival_s, expected)


# --- shaped arrivals and corpus lengths ------------------------------------------------------


def _corpus_pairs() -> set[tuple[int, int]]:
    corpus = load_length_corpus(resolve_trace_path("sharegpt-lengths", Path(".")),
                                "num_prefill_tokens", "num_decode_tokens")
    return set(zip(corpus.prompt.values.tolist(), corpus.output.values.tolist(), strict=True))


def test_corpus_lengths_keep_each_requests_prompt_and_output_together() -> None:
    traffic = _open(_build(arrivals={"kind": "poisson", "rate": 5}, lengths=CORPUS,
                           num_requests=400))
    pairs = set(zip(traffic.prompt_tokens.tolist(), traffic.output_tokens.tolist(),
                    strict=True))
    assert pairs <= _corpus_pairs() and len(pairs) > 300


def test_closed_loop_corpus_lengths_are_paired_too() -> None:
    built = _build(arrivals={"kind": "closed_loop", "concurrency": 4}, lengths=CORPUS,
                   num_requests=50)
    assert isinstance(built.traffic, ClosedLoopTraffic)
    drawn = list(itertools.islice(built.traffic.lengths(), 300))
    assert set(drawn) <= _corpus_pairs()


def _corpus_rows() -> list[tuple[int, int]]:
    corpus = load_length_corpus(resolve_trace_path("sharegpt-lengths", Path(".")),
                                "num_prefill_tokens", "num_decode_tokens")
    return list(zip(corpus.prompt.values.tolist(), corpus.output.values.tolist(), strict=True))


def test_corpus_rows_in_order_are_taken_row_by_row_open_and_closed() -> None:
    rows = _corpus_rows()
    in_order = {**CORPUS, "order": "in_order"}
    traffic = _open(_build(arrivals={"kind": "poisson", "rate": 5}, lengths=in_order,
                           num_requests=300))
    assert list(zip(traffic.prompt_tokens.tolist(), traffic.output_tokens.tolist(),
                    strict=True)) == rows[:300]
    closed = _build(arrivals={"kind": "closed_loop", "concurrency": 4}, lengths=in_order,
                    num_requests=50).traffic
    assert isinstance(closed, ClosedLoopTraffic)
    # Past the last row (and across the sampler's chunks) the rows start again; every call
    # (one per arm) starts from the first row.
    for _ in range(2):
        drawn = list(itertools.islice(closed.lengths(), len(rows) + 10))
        assert drawn == rows + rows[:10]


def test_in_order_corpus_rows_are_refused_for_sessions() -> None:
    problem = _problem({"arrivals": {"kind": "sessions", "num_sessions": 3, "session_rate": 1,
                                     "turns": {"kind": "fixed", "value": 2}},
                        "lengths": {**CORPUS, "order": "in_order"}, "num_requests": 5})
    assert "workload.lengths.order: in_order is not available with sessions" in problem


@pytest.mark.parametrize("arrivals", [
    {"kind": "weibull", "rate": 4, "cv": 2.5},
    {"kind": "rate_curve", "points": [[0, 2], [30, 8], [60, 1]]},
    {"kind": "rate_curve", "path": "servegen-rate", "rate_column": "m-large",
     "time_scale": 0.002, "mean_rate": 4},
    {"kind": "diurnal", "mean_rate": 4, "amplitude": 0.8, "period_s": 60,
     "bursts": [{"start_s": 20, "duration_s": 5, "factor": 4}]},
])
def test_shaped_arrivals_build_seeded_streams(arrivals: dict[str, Any]) -> None:
    first = _open(_build(arrivals=arrivals, lengths=CORPUS, duration_s=90))
    again = _open(_build(arrivals=arrivals, lengths=CORPUS, duration_s=90))
    np.testing.assert_array_equal(first.arrival_s, again.arrival_s)
    assert first.arrival_s.size > 100 and first.arrival_s[-1] < 90
    assert np.all(np.diff(first.arrival_s) >= 0)
    counted = _open(_build(arrivals=arrivals, lengths=CORPUS, num_requests=123))
    assert counted.arrival_s.size == 123


def test_rate_curve_mean_rate_sets_the_expected_count() -> None:
    arrivals = {"kind": "rate_curve", "path": "servegen-rate", "rate_column": "m-mid",
                "time_scale": 0.01, "mean_rate": 3.0}
    counts = [_open(_build(seed=s, arrivals=arrivals, lengths=CORPUS, duration_s=864))
              .arrival_s.size for s in range(5)]
    expected = 3.0 * 864
    assert abs(np.mean(counts) - expected) < 4.5 * np.sqrt(expected / 5)
