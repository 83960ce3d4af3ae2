"""What `batchsim run` prints says what was simulated: the KV pool it used, each arm's GPUs,
the trace by its name; user strings keep their square brackets; tables off a terminal are whole.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner

from batchsim.apps.cli import app
from batchsim.apps.gpu_note import gpus_per_arm_note
from batchsim.apps.sweep.outputs import print_sweep_table
from tests.validation.experiment_builder import base_experiment

runner = CliRunner()
ARMS = ["a[red]b", "continuous-long-name-1", "continuous-long-name-2"]  # over 80 columns


@dataclass(frozen=True)
class Run:
    output: str  # as printed
    out: Path

    @property
    def flat(self) -> str:
        """The output with rich's wrapping undone."""
        return " ".join(self.output.split())

    def summary_deployment(self) -> dict:
        return json.loads((self.out / "summary.json").read_text("utf-8"))["deployment"]

    def report(self) -> str:
        return (self.out / "report.html").read_text("utf-8")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """One small run with all of it: a set block count, two replicas, a trace file given by
    its absolute path, brackets in the experiment's and an arm's names, arms too wide for 80
    columns."""
    folder = tmp_path_factory.mktemp("honest")
    trace = folder / "my_trace.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                     "2023-11-16 18:15:46.6805900,374,44\n"
                     "2023-11-16 18:15:50.9951690,396,109\n", encoding="utf-8")
    exp = base_experiment()
    exp.update(name="exp[bold]x", replicas=2, kv_cache={"num_blocks": 1500},
               workload={"arrivals": {"kind": "trace", "path": str(trace)}},
               policies=[{"name": name, "kind": "continuous"} for name in ARMS])
    path = folder / "exp.yaml"
    path.write_text(yaml.safe_dump(exp), encoding="utf-8")
    result = runner.invoke(app, ["run", str(path), "--out", str(folder / "out")])
    assert result.exit_code == 0, result.output
    return Run(result.output, folder / "out")


def test_a_set_block_count_is_the_pool_the_caption_and_report_state(run: Run) -> None:
    deployment = run.summary_deployment()
    assert deployment["kv_blocks_per_replica"] == 1500
    used = "KV cache set to 1,500 blocks of 16 tokens = 24,000 tokens"
    assert used in deployment["memory"] and used in run.flat
    assert used in " ".join(run.report().split())
    # What memory would have left is named as such, never as the pool.
    assert "blocks would fit" in run.flat and "GB KV cache (" not in run.flat


def test_an_arm_on_several_replicas_has_its_gpus_counted(run: Run) -> None:
    note = "The memory plan is one replica's (1 GPU); each arm runs on 2 GPUs."
    assert note in run.flat
    assert note.replace("'", "&#x27;") in run.report()


def test_the_gpu_note_names_each_arm_when_they_differ() -> None:
    assert gpus_per_arm_note(4, [("a", 4), ("b", 4)]) is None
    assert gpus_per_arm_note(4, [("a", 4), ("b", 8)]) == (
        "The memory plan is one replica's (4 GPUs); GPUs per arm: a 4, b 8.")


def test_a_trace_is_described_by_its_file_name_not_its_path(run: Run) -> None:
    traffic = run.summary_deployment()["traffic"]
    assert traffic.startswith("trace my_trace.csv (") and "/" not in traffic
    assert "my_trace.csv" in run.report() and str(run.out.parent) not in run.report()


def test_brackets_in_names_are_printed(run: Run) -> None:
    assert "running exp[bold]x (3 arms)" in run.flat
    assert "a[red]b: simulated in" in run.flat
    assert run.flat.count("a[red]b") == 2  # the progress line and the table's column


def test_brackets_in_an_error_are_printed(tmp_path: Path) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(base_experiment()), encoding="utf-8")
    result = runner.invoke(app, ["validate", str(path), "--set", "workload.arrivals.rate=[bold]"])
    assert result.exit_code == 2
    assert "workload.arrivals.rate: expected a number (got [bold])" in result.stderr


def test_the_calibrate_hint_keeps_its_extra(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` fails, as without it
    result = runner.invoke(app, ["calibrate", "measure", "--device", "cpu", "--quick",
                                 "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "pip install 'batchsim[calibrate]'" in result.stderr


def test_brackets_in_a_sweep_table_are_printed() -> None:
    console = Console(record=True, width=200)
    metrics: dict[str, object] = {}
    print_sweep_table([{"point": {"workload.x": "[1]"}, "arm": "a[red]b", "metrics": metrics,
                        "ci95": {}}], console)
    text = console.export_text()
    assert "a[red]b" in text and "[1]" in text


def test_a_wide_table_is_not_cut_off_a_terminal(run: Run) -> None:
    assert "…" not in run.output
    header = next(line for line in run.output.splitlines() if "metric" in line)
    assert len(header) > 80 and all(name in header for name in ARMS)
    assert any("req max gap p50 / p99 (ms)" in line for line in run.output.splitlines())
