"""Bad input gives one clear line naming the file and key, and a non-zero exit — no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from batchsim.apps.cli import app
from tests.cli_checks import fails_cleanly as _fails_cleanly
from tests.validation.experiment_builder import base_experiment

runner = CliRunner()


def _write(tmp_path: Path, exp: dict, name: str = "exp.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(exp), encoding="utf-8")
    return path


def test_unknown_key(tmp_path: Path) -> None:
    exp = base_experiment()
    exp["workload"]["burstiness"] = 3
    _fails_cleanly(["run", str(_write(tmp_path, exp))], "exp.yaml", "workload.burstiness",
                   "unknown key")


def test_each_problem_gets_its_own_line(tmp_path: Path) -> None:
    exp = base_experiment()
    exp["workload"]["arivals"] = exp["workload"].pop("arrivals")  # a typo
    exp["seed"] = -1  # and a bad value
    result = runner.invoke(app, ["run", str(_write(tmp_path, exp))])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2
    assert all("exp.yaml" in line for line in lines)
    assert any("workload.arivals: unknown key" in line for line in lines)
    assert any("seed: expected a value >= 0" in line for line in lines)


def test_wrong_type(tmp_path: Path) -> None:
    exp = base_experiment(tensor_parallel="two")
    _fails_cleanly(["validate", str(_write(tmp_path, exp))], "exp.yaml", "tensor_parallel")


def test_negative_rate(tmp_path: Path) -> None:
    exp = base_experiment()
    exp["workload"]["arrivals"]["rate"] = -3
    _fails_cleanly(["run", str(_write(tmp_path, exp))], "exp.yaml", "workload.arrivals.rate")


def test_negative_rate_from_the_command_line(tmp_path: Path) -> None:
    path = _write(tmp_path, base_experiment())
    _fails_cleanly(["run", str(path), "--set", "workload.arrivals.rate=0"],
                   "workload.arrivals.rate")


def _trace_experiment(trace: str) -> dict:
    exp = base_experiment()
    exp["workload"] = {"arrivals": {"kind": "trace", "path": trace}}
    return exp


def test_missing_trace_file(tmp_path: Path) -> None:
    path = _write(tmp_path, _trace_experiment("nowhere/trace.csv"))
    _fails_cleanly(["run", str(path), "--out", str(tmp_path / "out")], "nowhere/trace.csv")


def test_malformed_trace_row_is_named_by_line(tmp_path: Path) -> None:
    (tmp_path / "trace.csv").write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.9951690,396,109\n"
        "2023-11-16 18:15:51.2224670,many,55\n",
        encoding="utf-8",
    )
    path = _write(tmp_path, _trace_experiment("trace.csv"))
    _fails_cleanly(["run", str(path), "--out", str(tmp_path / "out")], "trace.csv:4")


def test_model_too_big_for_the_gpu(tmp_path: Path) -> None:
    path = _write(tmp_path, base_experiment(model="llama-3.1-70b"))
    _fails_cleanly(["run", str(path), "--out", str(tmp_path / "out")], "llama-3.1-70b",
                   "tensor_parallel")


def test_token_budget_below_max_model_len(tmp_path: Path) -> None:
    exp = base_experiment(policies=[{"name": "c", "kind": "continuous",
                                     "max_num_batched_tokens": 2048}])
    _fails_cleanly(["run", str(_write(tmp_path, exp)), "--out", str(tmp_path / "o")],
                   "policies.0.max_num_batched_tokens")


@pytest.mark.parametrize("args", [["run", "missing.yaml"], ["validate", "missing.yaml"]])
def test_missing_experiment_file(args: list[str]) -> None:
    _fails_cleanly(args, "missing.yaml")


def test_validate_prints_the_resolved_config(tmp_path: Path) -> None:
    result = runner.invoke(app, ["validate", str(_write(tmp_path, base_experiment()))])
    assert result.exit_code == 0, result.output
    resolved = yaml.safe_load(result.stdout)
    assert resolved["gpu_memory_utilization"] == 0.9  # a default, filled in
    assert resolved["policies"][0]["max_num_seqs"] == 256


@pytest.mark.parametrize(("where", "key"), [
    (("policies", 0, "max_num_seqs"), "policies.0.max_num_seqs"),
    (("workload", "arrivals", "rate"), "workload.arrivals.rate"),
    (("workload", "num_requests"), "workload.num_requests"),
])
@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_boolean_is_not_taken_as_a_number(tmp_path: Path, where: tuple, key: str,
                                            command: str) -> None:
    exp = base_experiment()
    node = exp
    for step in where[:-1]:
        node = node[step]
    node[where[-1]] = True
    _fails_cleanly([command, str(_write(tmp_path, exp))], key, "not a true/false value",
                   "(got true)")
