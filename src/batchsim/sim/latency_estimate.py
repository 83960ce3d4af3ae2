"""The predicted-latency scorer's arithmetic: how long an arrival would wait at a replica
(docs/design.md §2, "Weighted routing").

Two rates are read off the replica's cost model once, when the router is built, so that a
prediction costs two multiplications at each arrival instead of a priced step: the seconds per
prompt token of a prefill chunk, and the seconds one more running sequence adds to a decode
step. The prediction is the prefill of the prompt tokens ahead of the arrival (its own uncached
tokens included) plus the running batch's share of the step that carries them. It ignores the
batch's growing contexts, chunking and preemption: a router's estimate, not a simulation.
"""

from __future__ import annotations

from dataclasses import dataclass

from batchsim.sim.cost_protocol import StepCostModel

# The chunk a prefill rate is read at (vLLM's default chunked-prefill budget) and the batch and
# context a decode step's per-sequence cost is read at: mid-range shapes of a serving replica.
_PREFILL_CHUNK = 2048
_DECODE_BATCH = 32
_DECODE_CONTEXT = 1024


@dataclass(frozen=True, slots=True)
class LatencyEstimate:
    prefill_s_per_token: float
    decode_s_per_seq: float

    @classmethod
    def of(cls, cost_model: StepCostModel) -> LatencyEstimate:
        prefill = cost_model.step_seconds([_PREFILL_CHUNK], [0], 1) / _PREFILL_CHUNK
        one = cost_model.step_seconds([1], [_DECODE_CONTEXT], 1)
        many = cost_model.step_seconds([1] * _DECODE_BATCH, [_DECODE_CONTEXT] * _DECODE_BATCH,
                                       _DECODE_BATCH)
        return cls(prefill, max(0.0, (many - one) / (_DECODE_BATCH - 1)))

    def wait_s(self, prefill_tokens_ahead: int, running: int) -> float:
        return prefill_tokens_ahead * self.prefill_s_per_token + running * self.decode_s_per_seq
