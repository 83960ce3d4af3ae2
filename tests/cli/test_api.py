"""The Python API gives what `batchsim run` gives; `--version` and `-h`; a light package root."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from typer.main import get_command
from typer.testing import CliRunner

import batchsim
from batchsim.apps.cli import app
from batchsim.experiment import loader

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "experiments" / "quickstart.yaml"
SHORT = ["workload.duration_s=30"]  # a few seconds, both arms still complete requests
FILES = ("requests.parquet", "timeseries.parquet", "summary.json", "report.html")
runner = CliRunner()


@pytest.fixture(scope="module")
def cli_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cli")
    result = runner.invoke(app, ["run", str(QUICKSTART), "--out", str(out),
                                 *(arg for o in SHORT for arg in ("--set", o))])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def results() -> batchsim.Results:
    return batchsim.run(QUICKSTART, overrides=SHORT)


def _summary_from_file(folder: Path) -> pd.DataFrame:
    rows = json.loads((folder / "summary.json").read_text("utf-8"))["rows"]
    return pd.json_normalize([{"arm": row["arm"], **row["metrics"]} for row in rows])


def test_tables_equal_the_files_the_cli_writes(cli_dir: Path, results: batchsim.Results) -> None:
    pd.testing.assert_frame_equal(results.summary, _summary_from_file(cli_dir))
    pd.testing.assert_frame_equal(results.requests, pd.read_parquet(cli_dir / "requests.parquet"))
    pd.testing.assert_frame_equal(results.timeseries,
                                  pd.read_parquet(cli_dir / "timeseries.parquet"))
    assert list(results.summary["arm"]) == [arm.name for arm in results.experiment.policies]
    assert results.summary["completed"].gt(0).all()


def test_write_gives_the_cli_bytes(cli_dir: Path, results: batchsim.Results,
                                   tmp_path: Path) -> None:
    written = results.write(tmp_path)
    assert [path.name for path in written] == list(FILES)
    for name in FILES:
        assert (tmp_path / name).read_bytes() == (cli_dir / name).read_bytes(), name
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == sorted(
        p.name for p in (cli_dir / "plots").iterdir())


def test_write_without_report(results: batchsim.Results, tmp_path: Path) -> None:
    assert [path.name for path in results.write(tmp_path, report=False)] == list(FILES[:3])
    assert not (tmp_path / "report.html").exists()


def test_path_dict_and_model_give_the_same_results(results: batchsim.Results) -> None:
    data = yaml.safe_load(QUICKSTART.read_text("utf-8"))
    model = batchsim.load_experiment(str(QUICKSTART))  # overrides applied to a model, too
    for other in (batchsim.run(data, SHORT, base_dir=QUICKSTART.parent),
                  batchsim.run(model, SHORT),
                  batchsim.run(batchsim.load_experiment(data, SHORT))):
        assert other.experiment == results.experiment
        pd.testing.assert_frame_equal(other.summary, results.summary)
        pd.testing.assert_frame_equal(other.requests, results.requests)


def test_the_cli_and_api_share_the_loader() -> None:
    exp, _ = loader.load_experiment(QUICKSTART, SHORT)
    assert batchsim.load_experiment(QUICKSTART, SHORT) == exp
    assert batchsim.load_experiment(QUICKSTART, SHORT[0]) == exp  # a lone override string


def test_errors_are_the_cli_ones() -> None:
    data = yaml.safe_load(QUICKSTART.read_text("utf-8"))
    with pytest.raises(batchsim.ConfigError, match=r"^experiment: tensor_parallel: expected"):
        batchsim.run({**data, "tensor_parallel": 0})
    with pytest.raises(batchsim.ConfigError, match=re.escape("nope.yaml: file not found")):
        batchsim.load_experiment("nope.yaml")
    with pytest.raises(batchsim.ConfigError,
                       match=re.escape("--set workload: expected dotted.key=value")):
        batchsim.load_experiment(data, ["workload"])
    with pytest.raises(batchsim.ConfigError, match="batchsim sweep"):
        batchsim.run(data, ["replications=2"])
    with pytest.raises(batchsim.ModelError, match="model: "):
        batchsim.run(data, ["model=no-such-model"])
    with pytest.raises(TypeError, match="got int"):
        batchsim.load_experiment(3)  # type: ignore[arg-type]
    assert batchsim.ConfigError is loader.ConfigError


def test_public_names_resolve() -> None:
    for name in batchsim.__all__:
        assert getattr(batchsim, name) is not None, name
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = batchsim.no_such_name  # the module __getattr__ must refuse unknown names


def test_version() -> None:
    assert batchsim.__version__ == version("batchsim")
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output == f"batchsim {batchsim.__version__}\n"


def _command_paths(command: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command's words, the app's and groups' included; typer may vendor its own click,
    so a group is whatever has subcommands."""
    paths = [path]
    for name, sub in getattr(command, "commands", {}).items():
        paths += _command_paths(sub, (*path, name))
    return paths


COMMANDS = _command_paths(get_command(app))


@pytest.mark.parametrize("path", COMMANDS, ids=[" ".join(p) or "batchsim" for p in COMMANDS])
def test_short_help_on_every_command(path: tuple[str, ...]) -> None:
    short, long = (runner.invoke(app, [*path, flag]) for flag in ("-h", "--help"))
    assert short.exit_code == 0, short.output
    assert "Usage:" in short.output
    assert short.output == long.output


def test_commands_found() -> None:
    assert {("run",), ("sweep",), ("calibrate",), ("calibrate", "fit")} <= set(COMMANDS)


LIGHT = """
import sys
import batchsim.sim.request, batchsim.sim.engine
heavy = sorted(m for m in sys.modules
               if m.split(".")[0] in ("pandas", "pydantic") or m.startswith("batchsim.experiment"))
assert not heavy, heavy
"""


def test_importing_the_kernel_stays_light() -> None:
    subprocess.run([sys.executable, "-c", LIGHT], check=True, capture_output=True, text=True)
    timing = subprocess.run([sys.executable, "-X", "importtime", "-c",
                             "import batchsim.sim.request"],
                            check=True, capture_output=True, text=True)
    assert "pydantic" not in timing.stderr
