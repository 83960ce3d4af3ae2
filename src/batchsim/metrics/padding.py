"""Static batching's padding: the share of computed decode slots that did no useful work.

A static batch decodes every slot until its longest output is done, so a sequence that finished
early keeps its slot and the GPU computes a padding token for it each step (policies/static.py
counts them per request as `padding_slots` when its batch ends). Iteration-level policies free
the slot at once: their padding is 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from batchsim.sim.request import Request, RequestStatus


def padding_fraction(requests: Sequence[Request], measured: np.ndarray) -> float:
    """Padding slots / all decode slots computed, over the measured requests that finished.

    A request's useful decode slots are its tokens after the first (which the prefill step
    emits); its padding slots are the decode steps its batch ran after its last token.
    `measured` is aligned with `requests` (metrics/summary.py `measured_mask`).
    """
    padding = useful = 0
    for request, counted in zip(requests, measured, strict=True):
        if counted and request.status is RequestStatus.FINISHED:
            padding += request.padding_slots
            useful += max(request.num_generated - 1, 0)
    computed = padding + useful
    return padding / computed if computed else 0.0
