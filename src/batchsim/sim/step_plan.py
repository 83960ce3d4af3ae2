"""What a policy asks the GPU to do in one step, and what came out of it."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from batchsim.sim.kv_growth import ExactGrowth
from batchsim.sim.request import Request

_EMPTY = np.zeros(0, dtype=np.int64)


@dataclass(slots=True)
class StepPlan:
    """One engine step.

    `requests[i]` gets `num_new_tokens[i]` tokens computed (token accounting). What the GPU
    actually computes can be more than that — static batching computes padding — so the cost
    shape is separate: `cost_new_tokens[j]` new tokens over `cost_context_tokens[j]` cached
    tokens for each of the sequences the GPU runs, `num_emitting` of which run the LM head.
    A plan whose cost shape is its token shape (`use_token_shape`) builds those arrays only
    when they are read: a fast-path stretch prices its steps from the lists (`cost_lists`).
    """

    requests: list[Request] = field(default_factory=list)
    num_new_tokens: list[int] = field(default_factory=list)
    contexts: list[int] = field(default_factory=list)  # each request's computed tokens
    decodes_only: bool = False  # built by add_decodes alone: every request decodes one token
    num_decodes: int = 0  # the leading requests that add_decodes added (one token each)
    # The cost shape's arrays once built or set (see the properties below).
    _cost_new_tokens: np.ndarray | None = field(default=None, repr=False)
    _cost_context_tokens: np.ndarray | None = field(default=None, repr=False)
    token_shaped: bool = False  # the cost shape is the token shape (use_token_shape)
    num_emitting: int = 0
    swap_tokens: int = 0  # tokens of KV moved over PCIe this step (swap out + swap in)
    # Lower KV tiers (sim/kv_tiered_pool.py): seconds to load this step's prefix hits from
    # them, and the layers a load may overlap the step's compute over (1: it cannot).
    load_seconds: float = 0.0
    load_layers: int = 1
    preempted: list[Request] = field(default_factory=list)
    wake_at: float | None = None  # for an empty plan: when to ask again if nothing arrives
    # Set by a policy that already counted them for `repeatable_steps`: the cumulative KV
    # blocks beyond those held that repeating this decode plan needs by each step.
    kv_growth: ExactGrowth | None = None
    # Likewise `decode_horizon` of a decode-only plan, when the policy counted it.
    horizon: int | None = None
    # Speculative decoding: the requests verifying proposals this step, and the drafter's
    # seconds before the step (policies/speculative.py).
    speculated: list[Request] = field(default_factory=list)
    draft_seconds: float = 0.0
    verifying: np.ndarray | None = None  # per cost-shape sequence: verifies proposals
    verified_tokens: int = 0  # proposals the target computes this step (k per verification)

    def with_loads(self, compute_s: float) -> float:
        """The step's seconds with its tier loads, loaded and computed layer by layer as a
        two-stage pipeline of `load_layers` equal layers: a layer computes once it is loaded
        and the one before it is computed. One layer is load then compute."""
        layers = self.load_layers
        load, compute = self.load_seconds / layers, compute_s / layers
        return load + (layers - 1) * max(load, compute) + compute

    @property
    def cost_new_tokens(self) -> np.ndarray:
        if self._cost_new_tokens is None:
            self._cost_new_tokens = self._token_array(self.num_new_tokens)
        return self._cost_new_tokens

    @cost_new_tokens.setter
    def cost_new_tokens(self, value: np.ndarray) -> None:
        self._cost_new_tokens = value

    @property
    def cost_context_tokens(self) -> np.ndarray:
        if self._cost_context_tokens is None:
            self._cost_context_tokens = self._token_array(self.contexts)
        return self._cost_context_tokens

    @cost_context_tokens.setter
    def cost_context_tokens(self, value: np.ndarray) -> None:
        self._cost_context_tokens = value

    def _token_array(self, tokens: list[int]) -> np.ndarray:
        return np.array(tokens, dtype=np.int64) if self.token_shaped else _EMPTY

    def cost_lists(self) -> tuple[list[int], list[int]]:
        """The cost shape as lists (new tokens, context tokens): the token lists themselves
        while no array was set, without building arrays."""
        if self.token_shaped and self._cost_new_tokens is None and \
                self._cost_context_tokens is None:
            return self.num_new_tokens, self.contexts
        return self.cost_new_tokens.tolist(), self.cost_context_tokens.tolist()

    @property
    def is_empty(self) -> bool:
        return not self.requests

    @property
    def total_new_tokens(self) -> int:
        if self.decodes_only:  # one token each
            return len(self.num_new_tokens)
        return int(sum(self.num_new_tokens))

    def add(self, request: Request, num_new_tokens: int) -> None:
        computed = request.num_computed_tokens
        self.requests.append(request)
        self.num_new_tokens.append(num_new_tokens)
        self.contexts.append(computed)
        self.decodes_only = False
        if computed + num_new_tokens == request.num_tokens:
            self.num_emitting += 1

    def add_chosen(self, chosen: dict[Request, tuple[int, int]]) -> None:
        """`add` of each chosen request's tokens (the first of each pair), in the dict's order:
        a policy's step decided request by request, added in one pass."""
        if not chosen:
            return
        requests, new_tokens, contexts = self.requests, self.num_new_tokens, self.contexts
        starts_plan = not requests
        emitting = decodes = 0
        for request, (tokens, _) in chosen.items():
            computed = request.num_computed_tokens
            requests.append(request)
            new_tokens.append(tokens)
            contexts.append(computed)
            if computed + tokens == request.num_tokens:
                emitting += 1
                if tokens == 1 and decodes == len(requests) - 1:
                    decodes += 1
        self.num_emitting += emitting
        self.decodes_only = False
        if starts_plan:  # its leading one-token emitters are decodes to `apply_tokens`
            self.num_decodes = decodes

    def add_decodes(self, requests: list[Request], contexts: list[int]) -> None:
        """Start the plan with running requests that each decode their one pending token;
        the plan keeps `contexts` (their computed tokens) as its own list."""
        assert not self.requests, "add_decodes must start the plan"
        self.requests.extend(requests)  # a copy: the caller's list may change later
        self.num_new_tokens = [1] * len(requests)
        self.contexts = contexts
        self.num_emitting = self.num_decodes = len(requests)
        self.decodes_only = True

    def use_token_shape(self) -> None:
        """The GPU computes exactly the scheduled tokens (every policy but static). Call it
        once the plan is complete: the arrays are built from the lists when first read."""
        self.token_shaped = True
        self._cost_new_tokens = self._cost_context_tokens = None


@dataclass(slots=True)
class StepOutcome:
    """Requests that emitted a token at the end of the step, and those that finished."""

    emitted: list[Request] = field(default_factory=list)
    finished: list[Request] = field(default_factory=list)
    extra_tokens: int = 0  # tokens emitted beyond one per emitting request (speculation)

    @property
    def num_tokens(self) -> int:
        """Output tokens the step emitted."""
        return len(self.emitted) + self.extra_tokens


def apply_tokens(plan: StepPlan) -> StepOutcome:
    """Advance every scheduled request's token account by its planned tokens.

    A request whose computed tokens catch up with its known tokens emits one new token; when
    it has emitted all its output tokens it is finished. Shared by all policies so that the
    token accounting is written once.
    """
    outcome = StepOutcome()
    if plan.decodes_only:  # the common step: every request computes and emits one token
        outcome.emitted = list(plan.requests)
        _apply_decodes(plan.requests, outcome.finished)
        return outcome
    requests, decodes = plan.requests, plan.num_decodes
    if decodes:  # running decodes, then the requests added after them (an admission)
        outcome.emitted = requests[:decodes]
        _apply_decodes(outcome.emitted, outcome.finished)
    for request, n in zip(requests[decodes:], plan.num_new_tokens[decodes:], strict=True):
        computed = request.num_computed_tokens = request.num_computed_tokens + n
        if computed == request.prompt_tokens + request.num_generated:  # all known tokens
            request.num_generated += 1
            outcome.emitted.append(request)
            if request.num_generated == request.output_tokens:
                outcome.finished.append(request)
    return outcome


def _apply_decodes(requests: list[Request], finished: list[Request]) -> None:
    """Each of `requests` computes its one pending token and emits it."""
    for request in requests:
        request.num_computed_tokens += 1
        generated = request.num_generated = request.num_generated + 1
        if generated == request.output_tokens:
            finished.append(request)
