"""Speculative decoding: the drafter, the tokens proposed per step and how likely they are
to be accepted."""

from typing import Annotated, Literal, Self

from pydantic import Field, model_validator

from batchsim.experiment.schema.common import AtLeastOne, ConfigModel, Positive, rule_error


class ConstantAcceptance(ConfigModel):
    """Every draft token is accepted with the same probability."""

    kind: Literal["constant"] = "constant"
    """Selects this distribution."""
    rate: float = Field(ge=0, le=1)
    """Probability that the target model accepts a draft token, given the tokens before it
    were accepted (α of Leviathan et al., 2023)."""


class BetaAcceptance(ConfigModel):
    """Each request has its own acceptance probability, drawn from a Beta distribution: some
    prompts (code, extraction) are easy to draft for, others are not."""

    kind: Literal["beta"] = "beta"
    """Selects this distribution."""
    mean: float = Field(gt=0, lt=1)
    """Mean per-token acceptance probability over requests."""
    concentration: Positive = 10.0
    """α + β of the Beta distribution: larger means requests are more alike."""


AcceptanceConfig = Annotated[ConstantAcceptance | BetaAcceptance, Field(discriminator="kind")]


class SpeculativeConfig(ConfigModel):
    """Speculative decoding: each decode step the drafter proposes `num_speculative_tokens`
    tokens per sequence, the target model verifies them all in one pass (k + 1 tokens per
    sequence at the target's cost for that many), and the sequence keeps the accepted prefix
    plus one token of the target's own (docs/how-to/speculative-decoding.md)."""

    method: Literal["draft", "mtp"] = "draft"
    """`draft`: a separate small model proposes, one forward pass per proposed token; `mtp`:
    the target's own multi-token-prediction head (one extra transformer layer and the LM head
    per proposed token)."""
    num_speculative_tokens: AtLeastOne = 3
    """Tokens proposed per sequence per step (k)."""
    draft_model: str | None = Field(default=None, min_length=1)
    """The draft model (library name or config path); required for `draft`."""
    draft_tensor_parallel: AtLeastOne | None = None
    """GPUs the draft model is split over; null means the target's `tensor_parallel`."""
    acceptance: AcceptanceConfig
    """How likely draft tokens are to be accepted."""

    @model_validator(mode="after")
    def _draft_needs_a_model(self) -> Self:
        if self.method == "draft" and self.draft_model is None:
            raise rule_error("draft_model", "method draft needs a draft_model (a library "
                                            "name such as llama-3.1-8b, or a config path)")
        if self.method == "mtp" and self.draft_model is not None:
            raise rule_error("draft_model", "method mtp drafts with the target's own layer; "
                                            "remove draft_model or use method draft")
        return self
