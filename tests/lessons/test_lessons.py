"""Every lesson's claims hold on a shortened run; its page and figure come from one full run
(the full rerun, which reproduces them byte for byte, runs with -m slow)."""

from __future__ import annotations

from pathlib import Path

import pytest

from batchsim.apps.lessons.catalogue import LESSONS
from batchsim.apps.lessons.figure_file import figure_digest
from batchsim.apps.lessons.lesson import rows_digest
from batchsim.apps.lessons.page import page_digest
from batchsim.apps.lessons.rows import lesson_run

REPO = Path(__file__).resolve().parents[2]
NAMES = list(LESSONS)


@pytest.mark.parametrize("name", NAMES)
def test_claims_hold_on_a_shortened_run(name: str) -> None:
    lesson = LESSONS[name]
    run = lesson_run(lesson.experiment(REPO), lesson.quick)
    failed = [f"{claim.text}: {claim.measured}" for claim in lesson.claims(run)
              if not claim.holds]
    assert not failed, failed


@pytest.mark.parametrize("name", NAMES)
def test_page_and_figure_come_from_the_same_run(name: str) -> None:
    lesson = LESSONS[name]
    digest = page_digest(lesson.page(REPO))
    assert digest is not None, f"{lesson.page(REPO)} has no generated numbers"
    assert figure_digest(lesson.image(REPO)) == digest, (
        f"{lesson.image(REPO)} was drawn from other rows than the page's numbers: rerun "
        f"python -m batchsim.apps.lessons {name}")
    assert f"images/{name}.png" in lesson.page(REPO).read_text("utf-8")
    assert f"batchsim run experiments/lessons/{name}.yaml" in lesson.page(REPO).read_text("utf-8")


def test_the_gallery_lists_every_lesson_and_the_readme_links_it() -> None:
    index = (REPO / "docs" / "lessons" / "README.md").read_text("utf-8")
    for name in NAMES:
        assert f"({name}.md)" in index, name
    assert "docs/lessons/README.md" in (REPO / "README.md").read_text("utf-8")


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_the_full_run_reproduces_the_page(name: str) -> None:
    lesson = LESSONS[name]
    run = lesson_run(lesson.experiment(REPO), jobs=2)
    assert rows_digest(run.rows) == page_digest(lesson.page(REPO)), (
        f"the simulator's numbers for lesson {name} moved: rerun "
        f"python -m batchsim.apps.lessons {name} and check its prose still holds")
    assert all(claim.holds for claim in lesson.claims(run))
