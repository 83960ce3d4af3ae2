"""Orderings of waiting requests: fcfs, priority, shortest prompt first, fair share."""

from typing import Annotated, Literal, Self

from pydantic import Field, model_validator

from batchsim.experiment.schema.common import ConfigModel, NonNegative, Positive, rule_error


class FcfsOrdering(ConfigModel):
    """First come, first served."""

    kind: Literal["fcfs"] = "fcfs"
    """Selects this ordering."""


class PriorityOrdering(ConfigModel):
    """Lower tenant `priority` first (vLLM's convention), arrival order among equals."""

    kind: Literal["priority"] = "priority"
    """Selects this ordering."""
    aging_s: Positive | None = None
    """Aging: every `aging_s` seconds a request waits count as one priority level better
    (rank = priority − waited / aging_s), so low priorities cannot starve; null: no aging."""


class ShortestPromptFirstOrdering(ConfigModel):
    """Fewest prompt tokens first (shortest job first on the one length a server knows),
    arrival order among equals."""

    kind: Literal["shortest_prompt_first"] = "shortest_prompt_first"
    """Selects this ordering."""
    aging_tokens_per_s: Positive | None = None
    """Aging: every second a request waits counts as this many prompt tokens fewer
    (rank = prompt_tokens − waited × aging_tokens_per_s), so long prompts cannot starve;
    null: no aging."""


class FairShareOrdering(ConfigModel):
    """Per-tenant fair share by tokens served (virtual token counters, after Sheng et al.,
    OSDI'24): the next request is the oldest one of the waiting tenant served least so far,
    counting `input_token_weight` per prefill (or recomputed) token and `output_token_weight`
    per output token. A tenant that becomes active starts level with the least-served active
    tenant, so idling banks no credit."""

    kind: Literal["fair_share"] = "fair_share"
    """Selects this ordering."""
    input_token_weight: NonNegative = 1.0
    """Counter increment per input token served (prefill and recomputation)."""
    output_token_weight: NonNegative = 2.0
    """Counter increment per output token served (the paper's default weights are 1 and 2:
    a decoded token costs more than a prefilled one)."""

    @model_validator(mode="after")
    def _some_weight(self) -> Self:
        if self.input_token_weight + self.output_token_weight <= 0:
            raise rule_error("output_token_weight",
                             "input_token_weight and output_token_weight cannot both be 0")
        return self


OrderingConfig = Annotated[
    FcfsOrdering | PriorityOrdering | ShortestPromptFirstOrdering | FairShareOrdering,
    Field(discriminator="kind"),
]
