"""Rerun lessons and rewrite what is generated from them: each figure, and each page's block
of numbers and checked claims (the prose stays as written)."""

from __future__ import annotations

from pathlib import Path

from batchsim.apps.lessons.figure_file import save_figure
from batchsim.apps.lessons.lesson import Lesson, rows_digest
from batchsim.apps.lessons.page import generated_block, write_block
from batchsim.apps.lessons.rows import lesson_run


def build_lesson(lesson: Lesson, root: Path, jobs: int = 1) -> list[Path]:
    """Run `lesson`'s experiment in full and write its figure and its page's numbers."""
    run = lesson_run(lesson.experiment(root), jobs=jobs)
    digest = rows_digest(run.rows)
    figure = lesson.draw(run)
    save_figure(figure, lesson.image(root), digest)
    write_block(lesson.page(root), generated_block(lesson, run, digest))
    return [lesson.image(root), lesson.page(root)]
