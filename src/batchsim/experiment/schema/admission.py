"""Admission control: rejection on arrival, and conservative (SGLang-style) admission into
the batch."""

from typing import Self

from pydantic import Field, model_validator

from batchsim.experiment.schema.common import AtLeastOne, ConfigModel, Positive, rule_error


class AdmissionConfig(ConfigModel):
    """Admission control on arrival: a request is rejected (with its reason, counted in the
    summary's `rejected_by_reason`) when its replica's queue or predicted wait is over a bound.
    Absent bounds are not checked."""

    max_queue: int | None = Field(default=None, ge=0)
    """Reject an arrival when this many requests already wait at its replica (`queue_full`)."""
    max_predicted_wait_s: Positive | None = None
    """Reject an arrival whose predicted wait before it starts exceeds this many seconds
    (`predicted_wait`). The prediction uses no output lengths: 0 when the replica would start it
    at the next step, else (requests waiting + 1) × the replica's mean interval between its last
    `wait_window` completions, measured up to now; no prediction (no rejection) before it has
    completed `wait_window` requests."""
    wait_window: AtLeastOne = 16
    """Completions over which the mean interval of the wait prediction is measured."""


class AdmissionReserveConfig(ConfigModel):
    """SGLang-style conservative admission: a waiting request enters the batch only if the KV
    cache can hold, for every running request and for it, its current tokens plus
    `new_token_ratio ×` its estimated remaining decode (`assumed_max_new_tokens` − tokens
    generated), instead of admitting whenever its prompt fits and preempting later. The ratio
    decays linearly from `new_token_ratio` to `min_new_token_ratio` over `decay_steps` steps
    and returns to `new_token_ratio` at every step that preempts; set `min_new_token_ratio`
    equal to `new_token_ratio` for a fixed ratio. A request is always admitted into an empty
    batch."""

    assumed_max_new_tokens: AtLeastOne = 1024
    """The remaining-decode estimate of every request, in tokens (SGLang uses the request's
    `max_new_tokens`; the simulated output lengths are never read)."""
    new_token_ratio: float = Field(default=0.7, gt=0, le=1)
    """Initial fraction of the estimated remaining decode reserved (SGLang's
    `SGLANG_INIT_NEW_TOKEN_RATIO`, 0.7)."""
    min_new_token_ratio: float = Field(default=0.098, gt=0, le=1)
    """Floor of the decaying ratio (SGLang: 0.14 × the initial ratio)."""
    decay_steps: AtLeastOne = 600
    """Steps over which the ratio decays from its initial value to its floor (SGLang: 600)."""
    remaining_cap: AtLeastOne | None = None
    """Cap on every request's remaining-decode estimate, in tokens (SGLang clips it at 4,096:
    `SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION`); null: no cap."""
    admitted_share: float | None = Field(default=None, gt=0, le=1)
    """Share of its remaining decode a request reserves in the step that admits it; null: the
    ratio, as the running requests. SGLang charges a request being admitted its whole
    `max_new_tokens` (1) and the running ones the ratio (its `PrefillAdder`), which lets fewer
    requests in at once when the cache is tight."""

    @model_validator(mode="after")
    def _floor_below_start(self) -> Self:
        if self.min_new_token_ratio > self.new_token_ratio:
            raise rule_error(
                "min_new_token_ratio",
                f"must be <= new_token_ratio (got {self.min_new_token_ratio} > "
                f"{self.new_token_ratio})",
            )
        return self
