"""The Python API for notebooks and scripts: load an experiment, run it, read its tables.

It goes through the same loader, runner and writer as `batchsim run` (the command calls
:func:`run` below), so a run here and one on the command line give the same numbers and files.
Every user error is raised as the exception the command line reports in one line:
:class:`ConfigError` for the file or an override, the others for what it names.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

from batchsim.experiment import loader
from batchsim.experiment.engine_profile import EngineProfileError
from batchsim.experiment.loader import ConfigError
from batchsim.experiment.outputs import json_safe, stack_arms, summary_document, write_results
from batchsim.experiment.policy_factory import ArmError
from batchsim.experiment.runner import ArmResult, ExperimentResult, run_experiment
from batchsim.experiment.schema import Experiment
from batchsim.gpu.hardware import HardwareError
from batchsim.gpu.memory import ModelDoesNotFitError
from batchsim.gpu.model_spec import ModelError
from batchsim.workloads import WorkloadError

__all__ = [
    "ArmError",
    "ConfigError",
    "EngineProfileError",
    "Experiment",
    "HardwareError",
    "ModelDoesNotFitError",
    "ModelError",
    "Results",
    "Source",
    "WorkloadError",
    "load_experiment",
    "run",
]

Source = str | os.PathLike[str] | Mapping[str, Any] | Experiment
"""A YAML file's path, a mapping with a YAML file's content, or a validated experiment."""

_DICT_SOURCE = "experiment"  # what error lines start with for a mapping (a file gives its path)


def load_experiment(source: Source, overrides: Sequence[str] = ()) -> Experiment:
    """The validated experiment of ``source``, with ``overrides`` (``"dotted.key=value"``, as
    ``--set`` takes them) applied first; raises :class:`ConfigError` naming each problem.

    The files it names are read when it runs, from :func:`run`'s ``base_dir`` (the current
    directory unless given): pass the YAML file itself to :func:`run` to read them from its
    folder.
    """
    experiment, _ = _resolve(source, overrides, None)
    return experiment


def run(source: Source, overrides: Sequence[str] = (), *,
        base_dir: str | os.PathLike[str] | None = None,
        on_arm_done: Callable[[ArmResult], None] | None = None,
        on_progress: Callable[[str, float], None] | None = None,
        keep_token_gaps: bool = False) -> Results:
    """Simulate every policy arm of ``source`` on the same traffic, as `batchsim run` does.

    Relative paths in the experiment (traces, corpora, model or profile files) are read from
    ``base_dir``: by default the YAML file's folder for a path, else the current directory.
    ``on_arm_done(arm)`` is called as each arm finishes, ``on_progress(arm_name, simulated_s)``
    now and then while one runs; ``keep_token_gaps`` keeps each arm's inter-token gaps
    (``ArmResult.token_gaps``, memory that grows with the steps simulated). A sweep
    (``sweep:`` or ``replications > 1``) is refused: `batchsim sweep` runs those.
    """
    experiment, folder = _resolve(source, overrides, base_dir)
    if experiment.sweep is not None or experiment.replications > 1:
        raise ConfigError(f"{experiment.name}: has a sweep or replications > 1; run it with "
                          "`batchsim sweep` (the Python API runs one point)")
    return Results(run_experiment(experiment, folder, on_arm_done=on_arm_done,
                                  on_progress=on_progress, keep_token_gaps=keep_token_gaps))


def _resolve(source: Source, overrides: Sequence[str],
             base_dir: str | os.PathLike[str] | None) -> tuple[Experiment, Path]:
    """The experiment and the folder its relative paths are read from."""
    if isinstance(overrides, str):  # one override, not a sequence of one-letter ones
        overrides = [overrides]
    given = Path(base_dir) if base_dir is not None else None
    if isinstance(source, str | os.PathLike):
        experiment, file_dir = loader.load_experiment(Path(source), overrides)
        return experiment, given or file_dir
    if isinstance(source, Experiment):
        if not overrides:
            return source, given or Path.cwd()
        # Overrides address the YAML keys: apply them to the model's YAML form and revalidate.
        data: dict[str, Any] = source.model_dump(mode="json")
    elif isinstance(source, Mapping):
        data = dict(source)
    else:
        raise TypeError(f"expected a YAML path, a mapping or an Experiment, got "
                        f"{type(source).__name__}")
    data = loader.apply_overrides(data, overrides)
    return loader.validate_experiment(data, source=_DICT_SOURCE), given or Path.cwd()


class Results:
    """One run's results: the tables `batchsim run` writes, as DataFrames.

    The frames are built on first use and cached; copy one before changing it in place.
    """

    def __init__(self, result: ExperimentResult) -> None:
        self.result = result
        """The runner's own result: per-arm tables and metrics, deployment, traffic."""

    def __repr__(self) -> str:
        arms = ", ".join(arm.name for arm in self.result.arms)
        return f"<Results {self.experiment.name!r}: {arms}>"

    @property
    def experiment(self) -> Experiment:
        """The resolved experiment that ran (defaults filled in)."""
        return self.result.experiment

    @cached_property
    def summary(self) -> pd.DataFrame:
        """One row per arm: ``arm``, then every metric of summary.json's ``rows[].metrics``,
        nested keys joined by dots (``ttft_s.p99``, ``energy.joules``); null is NaN or None."""
        rows = json_safe(summary_document(self.result)["rows"])
        return pd.json_normalize([{"arm": row["arm"], **row["metrics"]} for row in rows])

    @cached_property
    def requests(self) -> pd.DataFrame:
        """One row per request per arm: the columns of requests.parquet."""
        return stack_arms([(arm.name, arm.requests) for arm in self.result.arms])

    @cached_property
    def timeseries(self) -> pd.DataFrame:
        """One row per time bin per arm: the columns of timeseries.parquet."""
        return stack_arms([(arm.name, arm.timeseries) for arm in self.result.arms])

    def write(self, out_dir: str | os.PathLike[str], *, report: bool = True) -> list[Path]:
        """Write what `batchsim run --out OUT_DIR` writes; returns the files' paths.

        ``report=False`` leaves out report.html and its plots (the slow part: matplotlib).
        """
        folder = Path(out_dir).expanduser()
        if not report:
            return write_results(self.result, folder)
        from batchsim.apps.report.build import write_report  # matplotlib only when drawing

        # Drawn into the staging folder, so the report moves in with the results.
        return [*write_results(self.result, folder, finish=write_report), folder / "report.html"]
