"""Replaying benchmark clients' JSON results: vLLM's `--save-result`, SGLang's JSON lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from batchsim.apps.api import run
from batchsim.apps.cli import app
from batchsim.apps.replay.bench_results import read_bench_results
from batchsim.apps.replay.client_figures import FIGURES
from batchsim.apps.replay.deployment import (
    REPLAY_ARM,
    BenchmarkClient,
    case_experiment,
    lengths_csv,
)
from batchsim.apps.replay.measured import MeasuredCase, ReplayError
from batchsim.apps.replay.score import case_table
from batchsim.apps.replay.simulate import EngineChoice, replay_cases
from batchsim.apps.replay.vllm_export import vllm_bench_result
from batchsim.experiment.engine_profile import load_engine_profile
from batchsim.experiment.runner import ArmResult

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
USERS = 6


def _lengths(seed: int = 1, count: int = 40) -> tuple[tuple[int, int], ...]:
    rng = np.random.default_rng(seed)
    return tuple((int(p), int(o)) for p, o in zip(rng.integers(50, 900, count),
                                                  rng.integers(5, 120, count), strict=True))


def _simulated_arm(tmp_path: Path, engine: str = "vllm") -> ArmResult:
    """A simulation of varied requests in a closed loop, as a replay would run it."""
    case = MeasuredCase("truth", "x", engine, MODEL, "h100_sxm", "", 1, 1, 0, 0, USERS, 1.0,
                        1.0, request_lengths=_lengths())
    lengths = tmp_path / "truth-lengths.csv"
    lengths.write_text(lengths_csv(case), encoding="utf-8")
    experiment = case_experiment(case, BenchmarkClient(), load_engine_profile(engine), lengths)
    assert isinstance(experiment, dict)
    results = run(experiment, keep_token_gaps=True)
    [arm] = [a for a in results.result.arms if a.name == REPLAY_ARM]
    return arm


@pytest.fixture(scope="module")
def simulated_arm(tmp_path_factory: pytest.TempPathFactory) -> ArmResult:
    return _simulated_arm(tmp_path_factory.mktemp("truth"))


@pytest.fixture(scope="module")
def simulated(simulated_arm: ArmResult) -> dict[str, Any]:
    """The simulation as a vLLM result file."""
    return vllm_bench_result(simulated_arm, model_id=MODEL, max_concurrency=USERS,
                             metadata={"gpu": "h100_sxm", "tensor_parallel": "1"})


def _write(tmp_path: Path, record: dict[str, Any], name: str = "bench.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(record), encoding="utf-8")
    return path


def test_a_replay_of_a_simulation_written_as_vllm_json_recovers_every_figure(
        simulated: dict[str, Any], tmp_path: Path) -> None:
    """The round trip: per-request lengths in send order, the client's pacing and the
    deployment keys come back, so every figure's error is zero (to rounding)."""
    cases, skipped = read_bench_results(_write(tmp_path, simulated))
    assert not skipped
    [case] = cases
    assert case.request_lengths == _lengths() and case.concurrency == USERS
    replayed, failed = replay_cases(cases, BenchmarkClient(), EngineChoice().for_case)
    assert not failed
    table = case_table(replayed)
    errors = table[["ttft_error", "tpot_error"]
                   + [f"{f}_error" for f in FIGURES if f not in ("ttft_mean", "tpot_mean")]]
    assert errors.shape[1] == len(FIGURES)
    assert np.abs(errors.to_numpy()).max() < 1e-12


def test_the_exported_gaps_of_each_request_add_up_to_its_decode_time(
        simulated: dict[str, Any]) -> None:
    ttfts, itls, outputs = simulated["ttfts"], simulated["itls"], simulated["output_lens"]
    mean_e2e = simulated["mean_e2el_ms"] / 1000
    e2e = [ttft + sum(gaps) for ttft, gaps in zip(ttfts, itls, strict=True)]
    assert [len(gaps) for gaps in itls] == [o - 1 for o in outputs]
    assert np.mean(e2e) == pytest.approx(mean_e2e, rel=1e-12)


def test_a_changed_measurement_shows_as_error(simulated: dict[str, Any],
                                              tmp_path: Path) -> None:
    record = {**simulated, "mean_ttft_ms": simulated["mean_ttft_ms"] * 2,
              "p99_itl_ms": simulated["p99_itl_ms"] / 2}
    cases, _ = read_bench_results(_write(tmp_path, record))
    replayed, _ = replay_cases(cases, BenchmarkClient(), EngineChoice().for_case)
    table = case_table(replayed)
    assert table.loc[0, "ttft_error"] == pytest.approx(-0.5)
    assert table.loc[0, "itl_p99_error"] == pytest.approx(1.0)


def _sglang_record() -> dict[str, Any]:
    """The shape SGLang's bench_serving appends per run (random dataset, fixed lengths)."""
    return {"backend": "sglang", "dataset_name": "random", "request_rate": "inf",
            "max_concurrency": 4, "random_input_len": 256, "random_output_len": 32,
            "random_range_ratio": 1.0, "duration": 3.0, "completed": 24,
            "mean_ttft_ms": 40.0, "median_ttft_ms": 38.0, "p99_ttft_ms": 60.0,
            "mean_tpot_ms": 7.0, "median_tpot_ms": 7.0, "p99_tpot_ms": 8.0,
            "mean_itl_ms": 7.0, "median_itl_ms": 6.9, "p99_itl_ms": 9.0,
            "mean_e2e_latency_ms": 260.0, "median_e2e_latency_ms": 255.0,
            "p99_e2e_latency_ms": 300.0, "output_throughput": 500.0}


def test_sglang_json_lines_are_read_one_run_per_line(tmp_path: Path) -> None:
    path = tmp_path / "sglang.jsonl"
    second = {**_sglang_record(), "max_concurrency": 8}
    path.write_text(f"{json.dumps(_sglang_record())}\n\n{json.dumps(second)}\n",
                    encoding="utf-8")
    cases, skipped = read_bench_results(path, {"gpu": "h100_sxm", "model": MODEL})
    assert not skipped
    assert [(c.source, c.engine, c.concurrency) for c in cases] == [
        ("sglang.jsonl:1", "sglang", 4), ("sglang.jsonl:3", "sglang", 8)]
    assert cases[0].request_lengths == ((256, 32),) * 24
    assert cases[0].measured["e2e_p99"] == pytest.approx(0.3)
    assert "request_throughput" not in cases[0].measured  # not in the file: not scored


@pytest.mark.parametrize(("changes", "reason"), [
    ({"input_lens": None}, "no per-request lengths (input_lens, output_lens)"),
    ({"errors": ["", "timeout"] + [""] * 38}, "1 of 40 requests failed in the benchmark"),
    ({"request_rate": 5.0}, "the client's own queue"),
    ({"gpu": None}, "no gpu in the file: add it when benchmarking (--metadata gpu=...)"),
    ({"model_id": "acme/Unknown-7B"}, "model 'acme/Unknown-7B' is not in the model library"),
    ({"tensor_parallel": "two"}, "tensor_parallel: expected a whole number >= 1"),
    ({"mean_tpot_ms": None}, "no tpot mean in the file (expected mean_tpot_ms)"),
    ({"output_lens": [0] * 40}, "request 0: expected whole token counts >= 1"),
])
def test_a_run_that_cannot_be_replayed_says_why(simulated: dict[str, Any], tmp_path: Path,
                                                changes: dict[str, Any], reason: str) -> None:
    record = {**simulated, **changes}
    cases, skipped = read_bench_results(_write(tmp_path, record))
    _, failed = replay_cases(cases, BenchmarkClient(), EngineChoice().for_case)
    [not_run] = skipped + failed
    assert reason in not_run.reason and not_run.source == "bench.json:1"


def test_an_open_loop_run_is_replayed_at_its_rate(simulated: dict[str, Any],
                                                  tmp_path: Path) -> None:
    record = {**simulated, "request_rate": 4.0, "burstiness": 0.5, "max_concurrency": None}
    [case], _ = read_bench_results(_write(tmp_path, record))
    assert (case.request_rate, case.burstiness) == (4.0, 0.5)
    experiment = case_experiment(case, BenchmarkClient(), load_engine_profile("vllm"),
                                 tmp_path / "l.csv")
    assert isinstance(experiment, dict)
    assert experiment["workload"]["arrivals"] == {"kind": "gamma", "rate": 4.0,
                                                  "cv": pytest.approx(2 ** 0.5)}


def test_a_line_that_is_not_json_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "runs.jsonl"
    path.write_text(json.dumps(_sglang_record()) + "\n{oops\n", encoding="utf-8")
    with pytest.raises(ReplayError, match=r"runs\.jsonl:2: not a JSON object"):
        read_bench_results(path)


def test_the_command_replays_a_json_result_with_metadata(simulated: dict[str, Any],
                                                         tmp_path: Path) -> None:
    record = {key: value for key, value in simulated.items() if key != "gpu"}
    path = _write(tmp_path, record)
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["replay", str(path), "--out", str(out),
                                      "--metadata", "gpu=h100_sxm"])
    assert result.exit_code == 0, result.output
    assert "itl_p99" in result.output and "every figure the results report" in result.output
    written = json.loads((out / "replay.json").read_text(encoding="utf-8"))
    assert written["metadata"] == {"gpu": "h100_sxm"}
    assert {row["figure"] for row in written["figures"]} >= {"itl_p99", "e2e_mean"}
    assert "Every figure the results report" in (out / "report.html").read_text("utf-8")
    assert (out / "plots" / "replay_figures.png").stat().st_size > 0
    bad = CliRunner().invoke(app, ["replay", str(path), "--out", str(out),
                                   "--metadata", "colour=blue"])
    assert bad.exit_code == 2 and "unknown key 'colour'" in bad.output


def _aiperf_records(arm: ArmResult) -> list[dict[str, Any]]:
    """The simulation as AIPerf's per-request records (times in ns and ms)."""
    assert arm.token_gaps is not None
    gaps = arm.token_gaps.gaps_by_request(len(arm.requests))
    records = []
    for row in arm.requests.itertuples():
        start = round(row.arrival_s * 1e9)
        records.append({
            "metadata": {"request_start_ns": start, "benchmark_phase": "profiling",
                         "request_end_ns": start + round(row.e2e_s * 1e9)},
            "metrics": {
                "input_sequence_length": {"value": row.prompt_tokens, "unit": "tokens"},
                "output_sequence_length": {"value": row.output_tokens, "unit": "tokens"},
                "time_to_first_token": {"value": row.ttft_s * 1e3, "unit": "ms"},
                "request_latency": {"value": row.e2e_s * 1e3, "unit": "ms"},
                "inter_chunk_latency": {"value": [g * 1e3 for g in gaps[row.request_id]],
                                        "unit": "ms"}},
            "error": None})
    return records


def test_aiperf_records_replay_with_every_figure_recovered(simulated_arm: ArmResult,
                                                          tmp_path: Path) -> None:
    path = tmp_path / "profile_export.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _aiperf_records(simulated_arm)),
                    encoding="utf-8")
    summary = {"input_config": {"endpoint": {"model_names": [MODEL]},
                                "loadgen": {"concurrency": USERS}}}
    (tmp_path / "profile_export_aiperf.json").write_text(json.dumps(summary), encoding="utf-8")
    metadata = {"gpu": "h100_sxm", "engine": "vllm"}
    [case], skipped = read_bench_results(path, metadata)
    assert not skipped and case.concurrency == USERS and case.model == MODEL
    assert case.request_lengths == _lengths()
    replayed, failed = replay_cases([case], BenchmarkClient(), EngineChoice().for_case)
    assert not failed
    table = case_table(replayed)
    errors = table[[c for c in table.columns if c.endswith("_error")]]
    assert errors.shape[1] == len(FIGURES)
    assert np.abs(errors.to_numpy()).max() < 1e-6  # ns and ms rounding only
    unknown, [no_engine] = read_bench_results(path, {"gpu": "h100_sxm"})
    assert not unknown and "no engine: AIPerf does not record" in no_engine.reason
