"""Every lesson of the gallery, in the order docs/lessons/README.md reads them."""

from __future__ import annotations

from batchsim.apps.lessons import why_batch
from batchsim.apps.lessons.lesson import Lesson

LESSONS: dict[str, Lesson] = {lesson.name: lesson for lesson in (why_batch.LESSON,)}
