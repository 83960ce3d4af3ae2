"""Token-length distributions (prompt and output lengths, mixtures of them) and the length
corpus that draws both lengths together."""

from typing import Annotated, Literal, Self

from pydantic import Field, model_validator

from batchsim.experiment.schema.common import AtLeastOne, ConfigModel, Positive, rule_error


class FixedLength(ConfigModel):
    """Every request has the same number of tokens."""

    kind: Literal["fixed"] = "fixed"
    """Selects this distribution."""
    value: AtLeastOne
    """The length in tokens."""


class UniformLength(ConfigModel):
    """Lengths drawn uniformly from the integers `low`..`high` (both included)."""

    kind: Literal["uniform"] = "uniform"
    """Selects this distribution."""
    low: AtLeastOne
    """Smallest length in tokens."""
    high: AtLeastOne
    """Largest length in tokens; at least `low`."""

    @model_validator(mode="after")
    def _high_at_least_low(self) -> Self:
        if self.high < self.low:
            raise rule_error("high", f"must be >= low (got high={self.high}, low={self.low})")
        return self


class LognormalLength(ConfigModel):
    """Lognormal lengths with the given mean and coefficient of variation, rounded to tokens."""

    kind: Literal["lognormal"] = "lognormal"
    """Selects this distribution."""
    mean: float = Field(ge=1)
    """Mean length in tokens."""
    cv: Positive
    """Coefficient of variation (standard deviation / mean); 1.0 is heavy-tailed."""


class GeometricLength(ConfigModel):
    """Geometric lengths on 1, 2, 3, ... with the given mean (exponential service time)."""

    kind: Literal["geometric"] = "geometric"
    """Selects this distribution."""
    mean: float = Field(ge=1)
    """Mean length in tokens."""


class EmpiricalLength(ConfigModel):
    """Lengths resampled from a column of a CSV file (for example a length corpus)."""

    kind: Literal["empirical"] = "empirical"
    """Selects this distribution."""
    path: str = Field(min_length=1)
    """CSV file; a relative path is resolved against the experiment file's folder."""
    column: str = Field(min_length=1)
    """Name of the column holding positive integer token counts."""


class WeightedComponent(ConfigModel):
    """Adds the mixing weight to a length distribution used inside a mixture."""

    weight: Positive
    """Relative weight of this component; weights are normalised to sum to one."""


class FixedComponent(FixedLength, WeightedComponent):
    """A `fixed` length inside a mixture."""


class UniformComponent(UniformLength, WeightedComponent):
    """A `uniform` length inside a mixture."""


class LognormalComponent(LognormalLength, WeightedComponent):
    """A `lognormal` length inside a mixture."""


class GeometricComponent(GeometricLength, WeightedComponent):
    """A `geometric` length inside a mixture."""


class EmpiricalComponent(EmpiricalLength, WeightedComponent):
    """An `empirical` length inside a mixture."""


MixtureComponent = Annotated[
    FixedComponent
    | UniformComponent
    | LognormalComponent
    | GeometricComponent
    | EmpiricalComponent,
    Field(discriminator="kind"),
]


class MixtureLength(ConfigModel):
    """A weighted mixture of length distributions, e.g. 90% short chat + 10% long documents."""

    kind: Literal["mixture"] = "mixture"
    """Selects this distribution."""
    components: list[MixtureComponent] = Field(min_length=1)
    """The components: each is a length distribution of any kind except `mixture`, with an
    extra `weight` > 0, e.g. `{weight: 0.9, kind: uniform, low: 32, high: 128}`."""


LengthConfig = Annotated[
    FixedLength
    | UniformLength
    | LognormalLength
    | GeometricLength
    | EmpiricalLength
    | MixtureLength,
    Field(discriminator="kind"),
]


class CorpusLengths(ConfigModel):
    """Prompt and output lengths drawn together from the rows of a length corpus (a CSV of
    real requests without timestamps, e.g. ShareGPT), so that each request gets the prompt and
    output of one real request: their correlation is kept."""

    kind: Literal["corpus"] = "corpus"
    """Selects this source of lengths."""
    path: str = Field(min_length=1)
    """CSV file, or the shipped `sharegpt-lengths` (5,000 ShareGPT requests); a relative path
    is resolved against the experiment file's folder."""
    prompt_column: str = Field(default="num_prefill_tokens", min_length=1)
    """Column of prompt token counts (integers >= 1)."""
    output_column: str = Field(default="num_decode_tokens", min_length=1)
    """Column of output token counts (integers >= 1)."""
    order: Literal["random", "in_order"] = "random"
    """`random`: each request gets a row drawn at random (with replacement); `in_order`:
    request i gets row i (the rows again from the first when there are more requests than
    rows), e.g. to replay a benchmark's requests in the order its client sent them."""
