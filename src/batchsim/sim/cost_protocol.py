"""What the kernel needs from a cost model: the one cost interface of the project.

`batchsim.gpu`'s `RooflineCostModel` and `PipelineCostModel` conform to it structurally; the
kernel never imports them, so a test can drive the engine with any cost model of this shape.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np


class StepSeconds(Protocol):
    """A priced step: its duration, with whatever breakdown the cost model adds."""

    @property
    def seconds(self) -> float: ...


class StepCostModel(Protocol):
    """Seconds of one step, of a stretch of decode steps, and of a swap."""

    def step_time(
        self, new_tokens: np.ndarray, context_tokens: np.ndarray, num_emitting: int,
        verifying: np.ndarray | None = None,
    ) -> StepSeconds: ...

    def step_seconds(
        self, new_tokens: list[int], context_tokens: list[int], num_emitting: int,
    ) -> float:
        """`step_time(...).seconds`, bit for bit, from plain lists (the engine's hot path)."""
        ...

    def decode_step_seconds(
        self, new_tokens: np.ndarray, context_tokens: np.ndarray, num_emitting: int,
        num_steps: int,
    ) -> np.ndarray:
        """The seconds of `num_steps` decode steps, each context one token longer."""
        ...

    def decode_step_list(
        self, new_tokens: list[int], context_tokens: list[int], num_emitting: int,
        num_steps: int, within_s: float = ...,
    ) -> list[float]:
        """`decode_step_seconds` as a list, stopping one step past `within_s` seconds."""
        ...

    def swap_time(self, num_tokens: int) -> float: ...
