"""`output.trace` / `batchsim run --trace`: each arm's timeline in the Chrome Trace Event Format
(docs/reference/outputs.md, "traces/<arm>.json"), checked against the run's own records."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from itertools import pairwise
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from typer.testing import CliRunner

from batchsim.apps.cli import app
from batchsim.experiment.outputs import trace_path, write_results
from batchsim.sim import engine
from batchsim.sim.recorder import RunRecord
from tests.validation.experiment_builder import base_experiment, run_dict

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "experiments" / "quickstart.yaml"
SHORT = ["--set", "workload.duration_s=8", "--set", "warmup_s=0"]
runner = CliRunner()


def _run(args: list[str]) -> None:
    result = runner.invoke(app, ["run", *args])
    assert result.exit_code == 0, result.output


def _steps(trace: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in trace["traceEvents"] if e.get("cat") == "step"]


def _spans(trace: dict[str, Any]) -> dict[int, list[dict[str, Any]]]:
    """Each request's events, by request id (the thread of the requests process)."""
    spans: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for event in trace["traceEvents"]:
        if event.get("cat") == "request":
            spans[event["tid"]].append(event)
    return spans


def _busy_by_track(trace: dict[str, Any]) -> dict[tuple[int, int], float]:
    busy: dict[tuple[int, int], float] = defaultdict(float)
    for event in _steps(trace):
        busy[(event["pid"], event["tid"])] += event["dur"] / 1e6
    return busy


@pytest.fixture(scope="module")
def quickstart_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A shortened quickstart run without and with `--trace` (each run draws its report)."""
    folder = tmp_path_factory.mktemp("quickstart")
    plain, traced = folder / "plain", folder / "traced"
    _run([str(QUICKSTART), "--out", str(plain), *SHORT])
    _run([str(QUICKSTART), "--out", str(traced), "--trace", *SHORT])
    return plain, traced


def test_run_trace_writes_a_valid_timeline_per_arm_that_matches_the_run(
        quickstart_runs: tuple[Path, Path]) -> None:
    out = quickstart_runs[1]
    summary = json.loads((out / "summary.json").read_text("utf-8"))
    requests = pd.read_parquet(out / "requests.parquet")
    for row in summary["rows"]:
        arm, metrics = row["arm"], row["metrics"]
        trace = json.loads((out / "traces" / f"{arm}.json").read_text("utf-8"))
        for event in trace["traceEvents"]:
            assert {"ph", "ts", "pid", "tid", "name"} <= event.keys(), event
            if event["ph"] == "X":
                assert event["dur"] >= 0, event
        # One replica: its steps' durations sum to its busy time over the window (warm-up 0,
        # the window ends at the last finish, so it holds every step).
        busy = metrics["gpu_busy_fraction"] * metrics["window_s"]
        assert sum(_busy_by_track(trace).values()) == pytest.approx(busy, rel=1e-9)
        table = requests[requests["arm"] == arm].set_index("request_id")
        spans = _spans(trace)
        assert len(spans) == len(table) == trace["otherData"]["requests"]["kept"]
        for request_id, events in spans.items():
            by_name = {e["name"]: e for e in events}
            request = table.loc[request_id]
            assert by_name["queued"]["ts"] == pytest.approx(request["arrival_s"] * 1e6)
            prefill = by_name["prefill"]
            assert prefill["ts"] + prefill["dur"] == pytest.approx(request["first_token_s"] * 1e6)
            last = by_name.get("decode", prefill)
            assert last["ts"] + last["dur"] == pytest.approx(request["finish_s"] * 1e6)
            assert by_name["queued"]["ts"] + by_name["queued"]["dur"] == \
                pytest.approx(request["first_scheduled_s"] * 1e6)


def test_trace_off_leaves_the_outputs_as_they_were(quickstart_runs: tuple[Path, Path]) -> None:
    """The timeline only observes: the other files are the same with and without it (but for
    the recorded config's `output.trace`), and without it no traces folder is written."""
    plain, traced = quickstart_runs
    assert not (plain / "traces").exists()
    for name in ("requests.parquet", "timeseries.parquet"):
        assert (plain / name).read_bytes() == (traced / name).read_bytes(), name
    plain_summary = json.loads((plain / "summary.json").read_text("utf-8"))
    traced_summary = json.loads((traced / "summary.json").read_text("utf-8"))
    assert traced_summary["config"]["output"].pop("trace") is True
    assert plain_summary["config"]["output"].pop("trace") is False
    assert plain_summary == traced_summary


def _capturing_records(monkeypatch: pytest.MonkeyPatch) -> list[RunRecord]:
    """Every arm's run record, as the simulation returns it."""
    records: list[RunRecord] = []
    run = engine.Simulation.run

    def keep(self: engine.Simulation) -> RunRecord:
        record = run(self)
        records.append(record)
        return record
    monkeypatch.setattr(engine.Simulation, "run", keep)
    return records


def _preempting(**overrides: Any) -> dict[str, Any]:
    """Two replicas whose small KV caches preempt; a colocated and a disaggregated arm."""
    exp = base_experiment(
        replicas=2, router="least_outstanding", kv_cache={"num_blocks": 120},
        workload={"arrivals": {"kind": "poisson", "rate": 8.0},
                  "prompt_tokens": {"kind": "uniform", "low": 100, "high": 600},
                  "output_tokens": {"kind": "uniform", "low": 20, "high": 300},
                  "num_requests": 80},
        policies=[{"name": "chunked", "kind": "chunked_prefill", "token_budget": 256},
                  {"name": "disagg", "kind": "disaggregated", "prefill_replicas": 1,
                   "decode_replicas": 2}],
        output={"trace": True})
    exp.update(overrides)
    return exp


def test_every_replica_and_pool_has_its_busy_time_and_requests_their_preemptions(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    records = _capturing_records(monkeypatch)
    result = run_dict(tmp_path, _preempting())
    for arm, record in zip(result.arms, records, strict=True):
        trace = arm.trace
        assert trace is not None
        end = float(arm.requests["finish_s"].max())
        busy = _busy_by_track(trace)
        tracks = sorted(busy)  # (pool, replica in pool), in the record's replica order
        assert len(tracks) == record.num_replicas, arm.name
        for replica, track in enumerate(tracks):
            expected = record.steps.window_sums(0.0, end, range(replica, replica + 1)).busy_s
            assert busy[track] == pytest.approx(expected, rel=1e-9), (arm.name, track)
        spans = _spans(trace)
        preempted = sum(e["name"] == "preempted" for events in spans.values() for e in events)
        assert preempted == arm.metrics["preemptions"], arm.name
        assert preempted > 0, arm.name
        table = arm.requests.set_index("request_id")
        for request_id, events in spans.items():
            request = table.loc[request_id]
            assert isinstance(request, pd.Series)
            _check_request_spans(arm.name, request, events)


def _check_request_spans(arm: str, request: pd.Series, events: list[dict[str, Any]]) -> None:
    """Phases one after another from arrival to finish; preemptions inside them."""
    phases = [e for e in events if e["name"] != "preempted"]
    names = [e["name"] for e in phases]
    if arm == "disagg":
        assert names == ["queued", "prefill", "waiting_for_decode", "transferred", "decode"]
        transferred = phases[3]
        assert transferred["ts"] + transferred["dur"] == \
            pytest.approx(request["kv_arrival_s"] * 1e6)
    else:
        assert names == ["queued", "prefill", "decode"]
    assert phases[0]["ts"] == pytest.approx(request["arrival_s"] * 1e6)
    for before, after in pairwise(phases):
        assert before["ts"] + before["dur"] == pytest.approx(after["ts"])
    finish = request["finish_s"] * 1e6
    assert phases[-1]["ts"] + phases[-1]["dur"] == pytest.approx(finish)
    for event in events:
        if event["name"] == "preempted":
            assert request["first_scheduled_s"] * 1e6 <= event["ts"]
            assert event["ts"] + event["dur"] <= finish * (1 + 1e-12)


def test_the_fast_path_trace_has_every_step_of_stepping_one_by_one(tmp_path: Path) -> None:
    exp = base_experiment(
        workload={"arrivals": {"kind": "poisson", "rate": 2.0},
                  "prompt_tokens": {"kind": "uniform", "low": 50, "high": 400},
                  "output_tokens": {"kind": "uniform", "low": 50, "high": 300},
                  "num_requests": 40},
        output={"trace": True})
    fast = run_dict(tmp_path, exp).arms[0].trace
    slow = run_dict(tmp_path, {**exp, "simulation": {"fast_path": False}}).arms[0].trace
    assert fast is not None and slow is not None
    fast_steps, slow_steps = _steps(fast), _steps(slow)
    assert len(fast_steps) == len(slow_steps) > 40 * 50
    order = ("ts", "pid", "tid")
    for a, b in zip(sorted(fast_steps, key=lambda e: [e[k] for k in order]),
                    sorted(slow_steps, key=lambda e: [e[k] for k in order]), strict=True):
        assert (a["name"], a["args"]) == (b["name"], b["args"])
        assert a["ts"] == pytest.approx(b["ts"], rel=1e-9)
        assert a["dur"] == pytest.approx(b["dur"], rel=1e-9)


def test_bounds_keep_the_window_and_the_limits_and_say_so(tmp_path: Path) -> None:
    exp = _preempting(output={"trace": {"window_s": [2.0, 6.0], "max_requests": 10,
                                        "max_steps": 200}},
                      policies=[{"name": "chunked", "kind": "chunked_prefill",
                                 "token_budget": 256}])
    arm = run_dict(tmp_path, exp).arms[0]
    trace = arm.trace
    assert trace is not None
    kept = trace["otherData"]
    steps = _steps(trace)
    assert len(steps) == kept["steps"]["kept"] == 200
    assert kept["steps"]["dropped"] > 0
    complete_until = kept["steps"]["complete_until_s"]
    assert 2.0 < complete_until < 6.0
    for step in steps:  # overlapping the window
        assert step["ts"] + step["dur"] >= 2.0e6 and step["ts"] <= 6.0e6
    arrivals = arm.requests["arrival_s"]
    in_window = arm.requests[(arrivals >= 2.0) & (arrivals <= 6.0)]
    assert kept["requests"] == {"in_window": len(in_window), "kept": 10, "max_requests": 10}
    first_ten = set(in_window.sort_values("arrival_s")["request_id"].head(10))
    assert set(_spans(trace)) == first_ten
    assert kept["window_s"] == [2.0, 6.0]
    assert not math.isnan(complete_until)


@pytest.mark.parametrize(("trace", "message"), [
    ({"window_s": [5, 1]}, "output.trace.window_s: expected [start, end] with start < end"),
    ({"max_steps": 0}, "output.trace.max_steps: expected a value >= 1"),
    (7, "output.trace: expected true, false or a mapping"),
])
def test_validate_refuses_a_bad_trace_in_one_line(tmp_path: Path, trace: object,
                                                  message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(json.dumps(base_experiment(output={"trace": trace})), encoding="utf-8")
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    assert message in result.output and len(result.output.strip().splitlines()) == 1


def test_an_arm_name_that_is_no_file_name_is_refused_with_the_trace_on(tmp_path: Path) -> None:
    exp = base_experiment(policies=[{"name": "a/b", "kind": "continuous"}])
    path = tmp_path / "slash.yaml"
    path.write_text(json.dumps(exp), encoding="utf-8")
    assert runner.invoke(app, ["validate", str(path)]).exit_code == 0
    result = runner.invoke(app, ["validate", str(path), "--set", "output.trace=true"])
    assert result.exit_code == 2
    assert "policies.0.name: with output.trace on, an arm name must be a file name" in \
        result.output


def test_same_seed_gives_the_same_trace_bytes(tmp_path: Path) -> None:
    texts = []
    for name in ("a", "b"):
        result = run_dict(tmp_path, _preempting())
        write_results(result, tmp_path / name)
        texts.append([trace_path(tmp_path / name, arm.name).read_bytes()
                      for arm in result.arms])
    assert texts[0] == texts[1]
