"""Input that would hang, crash or exhaust memory is refused up front, in one line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from batchsim.apps.cli import app
from batchsim.metrics.timeseries import MAX_BINS


def _validate(tmp_path: Path, text: str) -> str:
    path = tmp_path / "e.yaml"
    path.write_text(text, encoding="utf-8")
    done = CliRunner().invoke(app, ["validate", str(path)])
    assert done.exit_code == 2, done.output
    assert "Traceback" not in done.output and len(done.output.strip().splitlines()) == 1
    return done.output


def test_an_alias_bomb_is_refused_before_it_expands(tmp_path: Path) -> None:
    lines = ["a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 13)]
    output = _validate(tmp_path, "\n".join(lines) + "\nname: e\n")
    assert "108 YAML aliases" in output and "at most 100" in output


def test_deep_nesting_is_one_line(tmp_path: Path) -> None:
    output = _validate(tmp_path, "name: " + "[" * 300 + "]" * 300 + "\n")
    assert "nested too deeply" in output


def test_a_few_aliases_are_fine(tmp_path: Path) -> None:
    text = ("name: e\nmodel: llama-3.1-8b\nhardware: h100-sxm\n"
            "workload: {arrivals: {kind: poisson, rate: 1}, num_requests: 5,\n"
            "  prompt_tokens: &len {kind: fixed, value: 8}, output_tokens: *len}\n"
            "policies: [{name: a, kind: continuous}]\n")
    path = tmp_path / "ok.yaml"
    path.write_text(text, encoding="utf-8")
    assert CliRunner().invoke(app, ["validate", str(path)]).exit_code == 0


def _workload_file(tmp_path: Path, workload: str, extra: str = "") -> str:
    return ("name: e\nmodel: llama-3.1-8b\nhardware: h100-sxm\n"
            f"workload: {{arrivals: {{kind: poisson, rate: 1}}, {workload},\n"
            "  prompt_tokens: {kind: fixed, value: 8}, output_tokens: {kind: fixed, value: 4}}\n"
            f"policies: [{{name: a, kind: continuous}}]\n{extra}")


def test_a_request_count_beyond_memory_is_refused_up_front(tmp_path: Path) -> None:
    output = _validate(tmp_path, _workload_file(tmp_path, "num_requests: 1000000000000"))
    assert "workload.num_requests: expected a value <= 1e+07" in output


def test_microsecond_time_series_bins_are_refused(tmp_path: Path) -> None:
    output = _validate(tmp_path, _workload_file(tmp_path, "num_requests: 10",
                                                "output: {timeseries_bin_s: 0.000001}\n"))
    assert "output.timeseries_bin_s: expected a value >= 0.001" in output


@pytest.mark.parametrize(("change", "key"), [
    (("seed: 1", "seed: true"), "seed"),
    (("name: e", "name: e\ngpu_memory_utilization: true"), "gpu_memory_utilization"),
    (("kind: continuous}", "kind: continuous, max_num_seqs: true}"), "policies.0.max_num_seqs"),
])
def test_a_number_written_true_is_refused_not_taken_as_one(tmp_path: Path,
                                                            change: tuple[str, str],
                                                            key: str) -> None:
    text = _workload_file(tmp_path, "num_requests: 10", "seed: 1\n").replace(*change)
    output = _validate(tmp_path, text)
    assert f"{key}: expected a number, not a true/false value (got true)" in output


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_fifo_is_refused_unread_as_experiment_and_as_trace(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    done = CliRunner().invoke(app, ["validate", str(fifo)])  # would block on open
    assert done.exit_code == 2 and "not a regular file" in done.output
    text = ("name: e\nmodel: llama-3.1-8b\nhardware: h100-sxm\n"
            f"workload: {{arrivals: {{kind: trace, path: {fifo}, format: azure2023}}}}\n"
            "policies: [{name: a, kind: continuous}]\n")
    assert "is not a regular file (a pipe, socket or device)" in _validate(tmp_path, text)


def test_validate_reads_the_trace_as_run_does(tmp_path: Path) -> None:
    """A missing or malformed trace failed only in run, after "running"."""
    base = ("name: e\nmodel: llama-3.1-8b\nhardware: h100-sxm\n"
            "workload: {arrivals: {kind: trace, path: TRACE, format: azure2023}}\n"
            "policies: [{name: a, kind: continuous}]\n")
    assert "trace file 'missing.csv' not found" in _validate(
        tmp_path, base.replace("TRACE", "missing.csv"))
    (tmp_path / "bad.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\nx,1,1\n",
                                      encoding="utf-8")
    assert "bad.csv:2" in _validate(tmp_path, base.replace("TRACE", "bad.csv"))


def test_a_huge_trace_value_or_a_foreign_file_is_not_echoed_in_full(tmp_path: Path) -> None:
    base = ("name: e\nmodel: llama-3.1-8b\nhardware: h100-sxm\n"
            "workload: {arrivals: {kind: trace, path: TRACE, format: azure2023}}\n"
            "policies: [{name: a, kind: continuous}]\n")
    (tmp_path / "huge.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                       + "9" * 1_000_000 + "x,1,1\n", encoding="utf-8")
    output = _validate(tmp_path, base.replace("TRACE", "huge.csv"))
    assert "huge.csv:2" in output and "(1,000,001 characters)" in output
    assert len(output) < 400
    (tmp_path / "notes.txt").write_text("password=" + "s" * 500 + "\nmore\n", encoding="utf-8")
    output = _validate(tmp_path, base.replace("TRACE", "notes.txt"))
    assert "notes.txt:1: header is 'password=sss" in output and "s" * 100 not in output


def test_an_hour_long_static_wait_is_the_most_refused_beyond(tmp_path: Path) -> None:
    text = _workload_file(tmp_path, "num_requests: 2").replace(
        "{name: a, kind: continuous}", "{name: s, kind: static, max_wait_s: 1e9}")
    assert "policies.0.max_wait_s: expected a value <= 3600" in _validate(tmp_path, text)


def test_a_trillion_token_trace_row_is_rejected_with_its_reason(tmp_path: Path) -> None:
    """It used to die pricing that request alone (7 TiB); a waiting static batch at the
    longest allowed wait with millisecond bins is a bounded time series."""
    (tmp_path / "t.csv").write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,1000000000000,5\n"
        "2023-11-16 18:17:04.0,100,5\n", encoding="utf-8")
    (tmp_path / "e.yaml").write_text(
        "name: e\nmodel: llama-3.1-8b\nhardware: h100-sxm\n"
        "workload: {arrivals: {kind: trace, path: t.csv, format: azure2023}}\n"
        "output: {timeseries_bin_s: 0.001}\n"
        "policies: [{name: s, kind: static, max_batch_size: 4, max_wait_s: 3600}]\n",
        encoding="utf-8")
    out = tmp_path / "out"
    done = CliRunner().invoke(app, ["run", str(tmp_path / "e.yaml"), "--out", str(out)])
    assert done.exit_code == 0, done.output
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    [row] = summary["rows"]
    assert row["metrics"]["rejected_by_reason"] == {"max_model_len": 1}
    series = pd.read_parquet(out / "timeseries.parquet")
    # 3.6 million millisecond bins, merged pairwise twice: 0.004 s bins, at most MAX_BINS
    assert MAX_BINS // 2 < len(series) <= MAX_BINS
    assert series["t_start_s"].iloc[1] == 0.004


def test_a_sweep_grid_of_millions_is_refused_before_a_point_is_built() -> None:
    values = ",".join(str(i) for i in range(1, 400))
    quickstart = Path(__file__).resolve().parents[2] / "experiments" / "quickstart.yaml"
    done = CliRunner().invoke(app, ["sweep", str(quickstart),
                                    "--param", f"seed={values}",
                                    "--param", f"workload.arrivals.rate={values}",
                                    "--param", f"policies.continuous.max_num_seqs={values}"])
    assert done.exit_code == 2 and len(done.output.strip().splitlines()) == 1
    assert "399 x 399 x 399 = 63,521,199 points; at most 100,000" in done.output
