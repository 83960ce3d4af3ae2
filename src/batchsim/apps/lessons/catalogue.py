"""Every lesson of the gallery, in the order docs/lessons/README.md reads them."""

from __future__ import annotations

from batchsim.apps.lessons import (
    common_mistakes,
    fairness,
    long_contexts,
    memory_limit,
    paged_vs_contiguous,
    prefill_decode_interference,
    quantisation,
    static_vs_continuous,
    ttft,
    why_batch,
)
from batchsim.apps.lessons.lesson import Lesson

LESSONS: dict[str, Lesson] = {lesson.name: lesson for lesson in (
    why_batch.LESSON,
    static_vs_continuous.LESSON,
    memory_limit.LESSON,
    long_contexts.LESSON,
    paged_vs_contiguous.LESSON,
    prefill_decode_interference.LESSON,
    fairness.LESSON,
    quantisation.LESSON,
    common_mistakes.LESSON,
    ttft.LESSON,
)}
