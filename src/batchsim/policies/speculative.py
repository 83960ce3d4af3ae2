"""Speculative decoding inside an iteration-level policy (vLLM's design, simplified).

Each step every decoding sequence carries `k` proposed tokens: the drafter produced them before
the step (its cost is added to the step), and the target model computes the sequence's pending
token plus the `k` proposals in one pass, so the step costs what `k + 1` new tokens per
sequence cost. Proposal i is accepted with probability α given that 1..i-1 were (Leviathan et
al., 2023), so the accepted prefix A has P(A >= i) = α^i, and the sequence emits A + 1 tokens:
the accepted ones and one of the target's own. KV blocks for all `k + 1` positions are held
before the step (vLLM's lookahead slots); rejected positions are simply overwritten later.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from batchsim.sim.request import Request
from batchsim.sim.step_plan import StepOutcome, StepPlan


@dataclass(frozen=True, slots=True)
class Acceptance:
    """Per-token acceptance probability: `rate` for everyone, or per request from
    Beta(mean·c, (1 − mean)·c) when `concentration` (c) is set."""

    rate: float
    concentration: float | None = None

    def alpha_of(self, request_id: int, seed: Sequence[int]) -> float:
        if self.concentration is None:
            return self.rate
        a, b = self.rate * self.concentration, (1.0 - self.rate) * self.concentration
        # Seeded by the request alone, so a request's α does not depend on scheduling order.
        return float(np.random.default_rng([*seed, request_id]).beta(a, b))


class Speculation:
    """One replica's drafter: `k` proposals per decoding sequence, their cost, and the random
    acceptance of each verification, with running counts for the summary."""

    __slots__ = ("_alpha", "_alpha_seed", "_draft_seconds", "_rng", "acceptance", "accepted",
                 "draft_s", "emitted_extra", "k", "proposed", "verifications")

    def __init__(self, k: int, draft_seconds: Callable[[np.ndarray], float],
                 acceptance: Acceptance, *, alpha_seed: Sequence[int],
                 draw_seed: Sequence[int]) -> None:
        """`alpha_seed` seeds each request's acceptance probability (the same in every arm
        and replica, so arms compare on equal terms); `draw_seed` this replica's draws."""
        self.k = k
        self.acceptance = acceptance
        self._draft_seconds = draft_seconds
        self._alpha_seed = tuple(alpha_seed)
        self._rng = np.random.default_rng(list(draw_seed))
        self._alpha: dict[int, float] = {}
        self.proposed = 0  # draft tokens proposed
        self.accepted = 0  # draft tokens accepted
        self.verifications = 0  # sequence-steps that verified proposals
        self.emitted_extra = 0  # accepted tokens kept (none beyond a request's output)
        self.draft_s = 0.0  # seconds spent drafting

    def draft_seconds(self, contexts: np.ndarray) -> float:
        """What drafting `k` tokens for sequences with `contexts` computed tokens costs."""
        seconds = self._draft_seconds(contexts) if contexts.size else 0.0
        self.draft_s += seconds
        return seconds

    def draw_accepted(self, requests: list[Request]) -> list[int]:
        """Accepted proposals of each request's verification this step (0..k)."""
        alphas = np.array([self._alpha_of(r.request_id) for r in requests])
        accepted = self._rng.random((len(requests), self.k)) < alphas[:, None]
        lengths = np.where(accepted.all(axis=1), self.k, accepted.argmin(axis=1))
        return [int(n) for n in lengths]

    def count(self, verified: int, accepted: int, kept: int) -> None:
        self.verifications += verified
        self.proposed += verified * self.k
        self.accepted += accepted
        self.emitted_extra += kept

    def forget(self, request: Request) -> None:
        self._alpha.pop(request.request_id, None)

    def _alpha_of(self, request_id: int) -> float:
        alpha = self._alpha.get(request_id)
        if alpha is None:
            alpha = self._alpha[request_id] = self.acceptance.alpha_of(request_id,
                                                                       self._alpha_seed)
        return alpha


def is_decode(request: Request, num_new_tokens: int) -> bool:
    """A step that computes a request's one pending token after its first: speculated on."""
    return num_new_tokens == 1 and request.num_generated > 0 and \
        request.num_computed_tokens + 1 == request.num_tokens


def shape_speculative_step(plan: StepPlan, speculation: Speculation) -> None:
    """Turn a planned step's decodes into verifications, after `plan.use_token_shape()`:
    each computes `k + 1` tokens and runs the LM head on all of them, after the drafter."""
    k = speculation.k
    mask = [is_decode(r, n) for r, n in zip(plan.requests, plan.num_new_tokens, strict=True)]
    if not any(mask):
        return
    decodes = np.flatnonzero(mask)
    plan.cost_new_tokens = plan.cost_new_tokens.copy()
    plan.cost_new_tokens[decodes] += k
    plan.num_emitting += k * decodes.size
    plan.verified_tokens = k * decodes.size
    plan.speculated = [plan.requests[i] for i in decodes.tolist()]
    plan.verifying = np.zeros(len(plan.requests), dtype=bool)
    plan.verifying[decodes] = True
    plan.draft_seconds = speculation.draft_seconds(plan.cost_context_tokens[decodes])


def accept_proposals(plan: StepPlan, outcome: StepOutcome, speculation: Speculation) -> None:
    """After the step's own token (apply_tokens): each verifying request also keeps its
    accepted proposals, up to its output length, and may finish on them."""
    requests = plan.speculated
    if not requests:
        return
    drawn = speculation.draw_accepted(requests)
    finished = {id(r) for r in outcome.finished}
    for request, accepted in zip(requests, drawn, strict=True):
        if id(request) in finished:
            continue  # its last token was the step's own: the rest are discarded
        extra = min(accepted, request.output_tokens - request.num_generated)
        request.num_generated += extra
        request.num_computed_tokens += extra
        outcome.extra_tokens += extra
        if request.num_generated == request.output_tokens:
            outcome.finished.append(request)
    speculation.count(len(requests), sum(drawn), outcome.extra_tokens)
