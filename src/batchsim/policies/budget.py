"""Per-step admission budget: counts what a step may still take and says why it stopped."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class StepBudget:
    tokens_left: int
    seqs_left: int
    stop_reason: str = ""

    def fits(self, num_tokens: int) -> bool:
        if self.seqs_left <= 0:
            self.stop_reason = "max_num_seqs"
            return False
        if num_tokens > self.tokens_left:
            self.stop_reason = "max_num_batched_tokens"
            return False
        return True

    def take(self, num_tokens: int) -> None:
        self.tokens_left -= num_tokens
        self.seqs_left -= 1
