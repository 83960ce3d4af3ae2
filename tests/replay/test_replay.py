"""`batchsim replay`: measured rows in, every row simulated or reported with its reason."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from batchsim.apps.cli import app
from batchsim.apps.replay.deployment import BenchmarkClient
from batchsim.apps.replay.measured import REQUIRED, MeasuredCase, ReplayError, read_cases
from batchsim.apps.replay.score import case_table, error_summary
from batchsim.apps.replay.simulate import EngineChoice, ReplayedCase, replay_case, replay_cases
from batchsim.apps.replay.split import is_held_out
from batchsim.experiment.engine_profile import load_engine_profile

HEADER = ["id", "backend", "model_path", "system", "mode", "gemm_quant_mode", "isl", "osl",
          "batch_size", "tp_size", "pp_size", "silicon_ttft_ms", "silicon_tpot_ms"]
GOOD = ["c1", "vllm", "meta-llama/Llama-3.1-8B-Instruct", "h100_sxm", "agg", "", "512", "64",
        "8", "1", "1", "50.0", "8.0"]


def _write(tmp_path: Path, rows: list[list[str]], header: list[str] = HEADER) -> Path:
    path = tmp_path / "bench.csv"
    path.write_text("\n".join(",".join(r) for r in [header, *rows]) + "\n", encoding="utf-8")
    return path


def _row(**changes: str) -> list[str]:
    row = dict(zip(HEADER, GOOD, strict=True))
    row.update(changes)
    return [row[c] for c in HEADER]


def test_a_replay_of_simulated_numbers_recovers_them(tmp_path: Path) -> None:
    """Measurements written from a simulation replay with zero error (the round trip)."""
    [case], _ = read_cases(_write(tmp_path, [GOOD]))
    simulated = replay_case(case, BenchmarkClient(3, 1), load_engine_profile("vllm"))
    assert isinstance(simulated, ReplayedCase) and simulated.ttft_s > 0
    exported = _row(silicon_ttft_ms=repr(simulated.ttft_s * 1000),
                    silicon_tpot_ms=repr(simulated.tpot_s * 1000))
    cases, skipped = read_cases(_write(tmp_path, [exported]))
    replayed, failed = replay_cases(cases, BenchmarkClient(3, 1), EngineChoice().for_case)
    assert not skipped and not failed
    table = case_table(replayed)
    assert np.abs(table[["ttft_error", "tpot_error"]].to_numpy()).max() < 1e-12


@pytest.mark.parametrize(("changes", "reason"), [
    ({"mode": "disagg"}, "disaggregated rows are not replayed yet"),
    ({"mode": "mixed"}, "expected 'agg' (colocated) or 'disagg'"),
    ({"model_path": "acme/Unknown-7B"}, "not in the model library"),
    ({"system": "tpu_v5"}, "has no profile"),
    ({"gemm_quant_mode": "int4_awq"}, "not modelled"),
    ({"isl": "abc"}, "isl: expected a positive number"),
    ({"silicon_tpot_ms": "0"}, "silicon_tpot_ms: expected a positive number"),
    ({"tp_size": "1.5"}, "tp_size: expected a whole number"),
    ({"model_path": "meta-llama/Llama-3.1-70B-Instruct"}, "needs 141.1 GB of weights per GPU"),
])
def test_a_row_that_cannot_be_simulated_says_why(tmp_path: Path, changes: dict[str, str],
                                                 reason: str) -> None:
    cases, skipped = read_cases(_write(tmp_path, [GOOD, _row(id="bad", **changes)]))
    replayed, failed = replay_cases(cases, BenchmarkClient(2, 0), EngineChoice().for_case)
    [not_run] = skipped + failed
    assert not_run.case_id == "bad" and reason in not_run.reason
    assert not_run.source == "bench.csv:3"
    assert [r.case.case_id for r in replayed] == ["c1"]  # nothing silently dropped


def test_a_missing_column_names_the_file_and_the_column(tmp_path: Path) -> None:
    header = [c for c in HEADER if c != "silicon_tpot_ms"]
    path = _write(tmp_path, [GOOD[:-1]], header=header)
    with pytest.raises(ReplayError, match=r"bench\.csv: missing column\(s\) silicon_tpot_ms"):
        read_cases(path)
    assert set(REQUIRED) <= set(HEADER)


def _replayed(engine: str, measured: float, simulated: float) -> ReplayedCase:
    case = MeasuredCase(f"{engine}-{measured}", "x.csv:2", engine, "m", "g", "", 1, 1, 10, 10,
                        1, measured, measured)
    return ReplayedCase(case, simulated, simulated, 0, "none")


def test_the_summary_gives_median_p90_and_bias_per_group() -> None:
    cases = case_table([_replayed("a", 1.0, 0.5), _replayed("a", 2.0, 2.2),
                        _replayed("a", 4.0, 5.2), _replayed("b", 1.0, 1.1)])
    summary = error_summary(cases, []).set_index("engine")
    errors = np.array([-0.5, 0.1, 0.3])
    assert summary.loc["a", "ttft_median_abs"] == pytest.approx(np.median(np.abs(errors)))
    assert summary.loc["a", "ttft_p90_abs"] == pytest.approx(np.percentile(np.abs(errors), 90))
    assert summary.loc["a", "ttft_median_signed"] == pytest.approx(0.1)
    assert summary.loc["a", "ttft_too_fast"] == pytest.approx(1 / 3)
    assert summary.loc["all", "simulated"] == 4
    assert summary.loc["b", "tpot_median_signed"] == pytest.approx(0.1)
    held = [c for c in ("a-1.0", "a-2.0", "a-4.0", "b-1.0") if is_held_out(c)]
    assert summary.loc["held out", "simulated"] == len(held)


def test_the_command_writes_every_case_and_every_reason(tmp_path: Path) -> None:
    path = _write(tmp_path, [GOOD, _row(id="d", mode="disagg")])
    out = tmp_path / "out"
    done = CliRunner().invoke(app, ["replay", str(path), "--out", str(out),
                                    "--requests-per-user", "2", "--warmup-per-user", "1"])
    assert done.exit_code == 0, done.output
    assert "1 row(s): mode 'disagg'" in done.output
    document = json.loads((out / "replay.json").read_text())
    assert [s["case_id"] for s in document["not_simulated"]] == ["d"]
    overall = document["summary"][-2]
    assert (overall["engine"], overall["rows"], overall["simulated"]) == ("all", 2, 1)
    table = pd.read_parquet(out / "replay.parquet")
    assert list(table["case_id"]) == ["c1"]
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "1 row(s) were not simulated" in page and page.count("data:image/png") == 3
    assert sorted(p.name for p in (out / "plots").iterdir()) == [
        "replay_error_by_concurrency.png", "replay_tpot.png", "replay_ttft.png"]


def test_an_unreadable_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    path = _write(tmp_path, [["x"]], header=["id"])
    done = CliRunner().invoke(app, ["replay", str(path), "--out", str(tmp_path / "o")])
    assert done.exit_code == 2
    assert "missing column(s)" in done.output and "Traceback" not in done.output


REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("page", ["docs/how-to/replay.md", "experiments/replay/README.md"])
def test_the_documented_command_runs(page: str, tmp_path: Path, monkeypatch) -> None:
    text = (REPO / page).read_text(encoding="utf-8")
    [command] = [line for line in text.splitlines() if line.startswith("batchsim replay exp")]
    args = command.split()[1:]
    args[args.index("--out") + 1] = str(tmp_path / "out")
    monkeypatch.chdir(REPO)
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 0, done.output
    document = json.loads((tmp_path / "out" / "replay.json").read_text())
    overall = document["summary"][-2]
    assert (overall["engine"], overall["rows"], overall["simulated"]) == ("all", 6, 5)
