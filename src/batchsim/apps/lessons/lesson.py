"""What a lesson is: its experiment, the numbers and the figure drawn from its rows, and the
claims those rows must show (checked by the tests on a shortened run and on the full one)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from batchsim.experiment.schema import Experiment

EXPERIMENTS = Path("experiments/lessons")  # relative to the repository
PAGES = Path("docs/lessons")
IMAGES = "images"  # beside the pages


@dataclass(frozen=True, slots=True)
class Claim:
    """One statement a lesson's rows must bear out, and what they measured for it."""

    text: str
    holds: bool
    measured: str


@dataclass(frozen=True, slots=True)
class LessonRun:
    """A lesson's rows (`rows.lesson_run`) and the experiment they were run from."""

    rows: pd.DataFrame
    experiment: Experiment


@dataclass(frozen=True, slots=True)
class Lesson:
    """`numbers` is the page's table (headers as shown, cells already formatted); `draw` the
    page's one figure; `claims` what the test asserts; `quick` the `--set` overrides of the
    shortened run the default tests use (the claims must hold on it too)."""

    name: str
    title: str
    numbers: Callable[[LessonRun], pd.DataFrame]
    draw: Callable[[LessonRun], Figure]
    claims: Callable[[LessonRun], list[Claim]]
    quick: tuple[str, ...] = ()

    def experiment(self, root: Path) -> Path:
        return root / EXPERIMENTS / f"{self.name}.yaml"

    def page(self, root: Path) -> Path:
        return root / PAGES / f"{self.name}.md"

    def image(self, root: Path) -> Path:
        return root / PAGES / IMAGES / f"{self.name}.png"


def rows_digest(rows: pd.DataFrame) -> str:
    """What the page and its figure were both made from: the rows, as CSV (same seed, same
    bytes, so a rerun gives the same digest)."""
    return hashlib.sha256(rows.to_csv(index=False).encode("utf-8")).hexdigest()
