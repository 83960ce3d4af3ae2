"""The experiment file's schema (DESIGN.md §7): pydantic models, one per YAML mapping.

Every model forbids unknown keys and is immutable. Variants are discriminated on ``kind``.
The attribute docstrings are the field descriptions: they feed error messages and the
generated reference (``docs/reference/experiment.md``, see ``batchsim/experiment/reference_doc.py``).
Cross-field rules raise ``rule_error`` so the loader can name the offending key.
"""

from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

RULE_ERROR_TYPE = "config_rule"
"""The pydantic error type of a cross-field rule; its context names the key (``key``)."""

AtLeastOne = Annotated[int, Field(ge=1)]
Positive = Annotated[float, Field(gt=0)]
NonNegative = Annotated[float, Field(ge=0)]


def rule_error(key: str, message: str) -> PydanticCustomError:
    """An error for a rule spanning several keys; ``key`` is dotted, relative to the model."""
    text = f"{key}: {message}" if key else message
    return PydanticCustomError(RULE_ERROR_TYPE, text, {"key": key, "message": message})


class ConfigModel(BaseModel):
    """Base of every experiment-file model: unknown keys are errors, values are immutable."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, allow_inf_nan=False, use_attribute_docstrings=True
    )


# --- token lengths ---------------------------------------------------------------------------


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


# --- arrivals --------------------------------------------------------------------------------


class PoissonArrivals(ConfigModel):
    """Open loop: exponential inter-arrival times (memoryless traffic)."""

    kind: Literal["poisson"] = "poisson"
    """Selects this arrival process."""
    rate: Positive
    """Mean arrival rate in requests per second."""


class GammaArrivals(ConfigModel):
    """Open loop: gamma inter-arrival times; `cv` > 1 is burstier than Poisson."""

    kind: Literal["gamma"] = "gamma"
    """Selects this arrival process."""
    rate: Positive
    """Mean arrival rate in requests per second."""
    cv: Positive
    """Coefficient of variation of the inter-arrival times (1.0 is Poisson)."""


class ConstantArrivals(ConfigModel):
    """Open loop: evenly spaced arrivals, one every 1 / `rate` seconds."""

    kind: Literal["constant"] = "constant"
    """Selects this arrival process."""
    rate: Positive
    """Arrival rate in requests per second."""


class TraceColumns(ConfigModel):
    """Column map of a generic `csv` or `parquet` trace: which column holds what. Other
    columns are ignored."""

    arrival_time: str = Field(min_length=1)
    """Column of request arrival times."""
    arrival_time_unit: Literal["s", "ms", "us", "ns", "datetime"] = "s"
    """Unit of `arrival_time`: numbers in seconds, milliseconds, microseconds or nanoseconds,
    or `datetime` for ISO 8601 date-times (e.g. `2024-05-10 00:00:00.009930+00:00`) or
    Parquet timestamps."""
    prompt_tokens: str = Field(min_length=1)
    """Column of prompt (input) token counts, integers >= 1."""
    output_tokens: str = Field(min_length=1)
    """Column of output token counts, integers >= 1."""


class TraceLengthFilter(ConfigModel):
    """Keep only trace requests whose token counts lie within these bounds (inclusive)."""

    min_prompt_tokens: AtLeastOne | None = None
    """Drop requests with fewer prompt tokens; null: no lower bound."""
    max_prompt_tokens: AtLeastOne | None = None
    """Drop requests with more prompt tokens (e.g. the model's context); null: no bound."""
    min_output_tokens: AtLeastOne | None = None
    """Drop requests with fewer output tokens; null: no lower bound."""
    max_output_tokens: AtLeastOne | None = None
    """Drop requests with more output tokens; null: no bound."""

    @model_validator(mode="after")
    def _bounds_ordered(self) -> Self:
        for what in ("prompt", "output"):
            low, high = getattr(self, f"min_{what}_tokens"), getattr(self, f"max_{what}_tokens")
            if low is not None and high is not None and high < low:
                raise rule_error(f"max_{what}_tokens",
                                 f"must be >= min_{what}_tokens (got {high} < {low})")
        return self


TRACE_FORMATS_WITH_COLUMNS = ("csv", "parquet")


class TraceArrivals(ConfigModel):
    """Open loop: arrival times and prompt/output lengths replayed from a trace file,
    optionally cut to a time window, filtered by length, sampled and rescaled in time (in
    that order; docs/how-to/traces.md)."""

    kind: Literal["trace"] = "trace"
    """Selects this arrival process."""
    path: str = Field(min_length=1)
    """Trace file, or a shipped trace name (`azure2023-conv`, `azure2023-code`,
    `mooncake-conversation`); a relative path is resolved against the experiment file's
    folder."""
    format: Literal["azure2023", "azure2024", "mooncake", "burstgpt", "csv", "parquet"] = (
        "azure2023")
    """Trace format: `azure2023` / `azure2024` (Azure LLM inference CSVs), `mooncake` (JSONL
    with prefix block ids), `burstgpt` (BurstGPT CSV), or a generic `csv` / `parquet` file
    with a `columns` map."""
    columns: TraceColumns | None = None
    """Column map; required with `csv` and `parquet`, not allowed with the other formats."""
    failed_rows: Literal["error", "drop"] = "error"
    """`burstgpt` only: rows with 0 response tokens (failed requests) or 0 request tokens are
    an error naming the first, or with `drop` are skipped and counted in the summary."""
    window_s: list[NonNegative] | None = Field(default=None, min_length=2, max_length=2)
    """`[start, end]`: replay only requests arriving in [start, end) seconds of the trace
    (times counted from its first request), shifted so that `start` becomes 0; null: all."""
    filter: TraceLengthFilter | None = None
    """Drop requests outside token-count bounds; null: keep all."""
    sample_fraction: float = Field(default=1.0, gt=0, le=1)
    """Keep each request independently with this probability (seeded by the experiment's
    `seed`): a thinner stream with the same shape over time."""
    time_scale: Positive = 1.0
    """Trace timestamps are multiplied by this factor: 0.5 replays the trace at twice its
    rate, keeping its burstiness."""
    target_rate: Positive | None = None
    """Instead of `time_scale`: scale timestamps so that the mean rate (1 / mean
    inter-arrival gap) of the replayed requests is this many requests per second, keeping
    the burstiness (the inter-arrival CV)."""

    @model_validator(mode="after")
    def _format_options(self) -> Self:
        if self.format in TRACE_FORMATS_WITH_COLUMNS and self.columns is None:
            raise rule_error("columns", f"required with format {self.format} (e.g. {{"
                             "arrival_time: ts, prompt_tokens: input, output_tokens: output})")
        if self.format not in TRACE_FORMATS_WITH_COLUMNS and self.columns is not None:
            raise rule_error("columns", f"only for formats csv and parquet (format "
                             f"{self.format} has fixed columns)")
        if self.failed_rows == "drop" and self.format != "burstgpt":
            raise rule_error("failed_rows", "only for format burstgpt")
        if self.target_rate is not None and self.time_scale != 1.0:
            raise rule_error("target_rate", "give time_scale or target_rate, not both")
        if self.window_s is not None and self.window_s[1] <= self.window_s[0]:
            raise rule_error("window_s", f"end must be > start (got {self.window_s})")
        return self


class WeibullArrivals(ConfigModel):
    """Open loop: Weibull inter-arrival times with the given mean rate and coefficient of
    variation; next to `gamma` with the same `cv`, longer lulls (a heavier tail)."""

    kind: Literal["weibull"] = "weibull"
    """Selects this arrival process."""
    rate: Positive
    """Mean arrival rate in requests per second."""
    cv: float = Field(ge=0.001, le=1000)
    """Coefficient of variation of the inter-arrival times (1.0 is Poisson)."""


class RateCurveArrivals(ConfigModel):
    """Open loop: a non-homogeneous Poisson process whose rate follows a piecewise-constant
    curve over time, given as `points` or read from a CSV (`path`), e.g. ServeGen's rate per
    600 s window."""

    kind: Literal["rate_curve"] = "rate_curve"
    """Selects this arrival process."""
    points: list[Annotated[list[NonNegative], Field(min_length=2, max_length=2)]] | None = (
        Field(default=None, min_length=1))
    """`[[t, rate], ...]`: from time `t` seconds on, `rate` requests per second until the next
    point; the last rate holds after it. Times increase; the first is taken as time 0."""
    path: str | None = Field(default=None, min_length=1)
    """Instead of `points`: a CSV with one row per window, or the shipped `servegen-rate`
    (2 days of Alibaba ServeGen rates per 600 s window); relative to the experiment file."""
    time_column: str = Field(default="window_start_s", min_length=1)
    """With `path`: column of window start times in seconds."""
    rate_column: str | None = Field(default=None, min_length=1)
    """With `path` (required): column of rates in requests per second, e.g. `m-large`."""
    time_scale: Positive = 1.0
    """Curve times are multiplied by this factor: 0.01 plays a day in 14.4 minutes."""
    rate_scale: Positive = 1.0
    """Rates are multiplied by this factor."""
    mean_rate: Positive | None = None
    """Instead of `rate_scale`: rescale the rates so that their mean is this many requests per
    second, over [0, `duration_s`) or, with `num_requests`, from the first point to the
    last."""

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if (self.points is None) == (self.path is None):
            raise rule_error("", "give exactly one of points or path")
        if self.path is not None and self.rate_column is None:
            raise rule_error("rate_column", "required with path")
        if self.points is not None:
            times = [t for t, _ in self.points]
            if any(times[i + 1] <= times[i] for i in range(len(times) - 1)):
                raise rule_error("points", f"times must increase (got {times})")
            if not any(rate > 0 for _, rate in self.points):
                raise rule_error("points", "every rate is 0 (expected some rate > 0)")
        if self.mean_rate is not None and self.rate_scale != 1.0:
            raise rule_error("mean_rate", "give rate_scale or mean_rate, not both")
        return self


class BurstConfig(ConfigModel):
    """A burst: the rate is multiplied by `factor` for `duration_s` seconds."""

    start_s: NonNegative
    """When the burst starts, in seconds."""
    duration_s: Positive
    """How long it lasts, in seconds."""
    factor: Positive
    """Rate multiplier during the burst (overlapping bursts multiply)."""


class DiurnalArrivals(ConfigModel):
    """Open loop: a non-homogeneous Poisson process with a sine-shaped rate,
    `mean_rate × (1 + amplitude × sin(2π (t − phase_s) / period_s))`, times any `bursts`."""

    kind: Literal["diurnal"] = "diurnal"
    """Selects this arrival process."""
    mean_rate: Positive
    """Mean of the sine in requests per second (bursts add to it)."""
    amplitude: float = Field(default=0.5, ge=0, le=1)
    """Relative swing: the rate runs from `mean_rate × (1 − amplitude)` to
    `mean_rate × (1 + amplitude)`."""
    period_s: Positive = 86400.0
    """Period of the sine in seconds (a day by default)."""
    phase_s: float = 0.0
    """Shift of the sine in seconds: the rate crosses its mean, rising, at `phase_s`."""
    bursts: list[BurstConfig] = Field(default_factory=list)
    """Bursts on top of the sine, e.g. `[{start_s: 600, duration_s: 60, factor: 4}]`."""


class ClosedLoopArrivals(ConfigModel):
    """Closed loop: `concurrency` users, each sending its next request when the previous one
    finishes (plus think time), as `vllm bench serve --max-concurrency` does."""

    kind: Literal["closed_loop"] = "closed_loop"
    """Selects this arrival process."""
    concurrency: AtLeastOne
    """Number of users, i.e. requests in flight."""
    think_time_s: NonNegative = 0.0
    """Pause in seconds between a user's response and its next request."""


class SessionArrivals(ConfigModel):
    """Multi-turn sessions (chat): sessions start as a Poisson process; each sends its turns
    one at a time, the next `think_time_s` after the previous answer ended (a closed loop per
    session). Turn k's prompt is the system prompt plus every earlier user message
    (`prompt_tokens`) and answer (`output_tokens`) plus its own user message, with prefix
    block ids that chain from turn to turn, for `kv_cache.prefix_caching`. A session stops
    before a turn that would exceed `max_model_len`."""

    kind: Literal["sessions"] = "sessions"
    """Selects this arrival process."""
    num_sessions: AtLeastOne
    """Number of sessions."""
    session_rate: Positive
    """New sessions per second."""
    turns: LengthConfig
    """Turns per session, as a length distribution (e.g. `{kind: geometric, mean: 4}`)."""
    think_time_s: NonNegative = 0.0
    """Pause in seconds between an answer and the session's next turn."""
    system_prompt_tokens: int = Field(default=0, ge=0)
    """Tokens of a system prompt that starts every session's every prompt (shared blocks)."""


ArrivalsConfig = Annotated[
    PoissonArrivals | GammaArrivals | ConstantArrivals | TraceArrivals | ClosedLoopArrivals
    | WeibullArrivals | RateCurveArrivals | DiurnalArrivals | SessionArrivals,
    Field(discriminator="kind"),
]

TenantArrivals = Annotated[
    PoissonArrivals | GammaArrivals | ConstantArrivals | TraceArrivals,
    Field(discriminator="kind"),
]


# --- tenants ---------------------------------------------------------------------------------


class SLOConfig(ConfigModel):
    """Service-level objectives; a request meets the SLO when it meets every one given.
    They define goodput and SLO attainment; absent ones are not checked."""

    ttft_p99_s: Positive | None = None
    """Target p99 time to first token, in seconds."""
    tpot_p99_s: Positive | None = None
    """Target p99 time per output token, in seconds."""
    e2e_p99_s: Positive | None = None
    """Target p99 end-to-end latency, in seconds."""


class TenantConfig(ConfigModel):
    """One tenant (or traffic class) of a multi-tenant workload, with its own open-loop
    arrivals, lengths, priority and SLO; its requests are merged with the other tenants' by
    arrival time, and its metrics are reported separately (`tenants` in summary.json)."""

    name: str = Field(min_length=1)
    """Tenant name, unique within the workload; labels its metrics."""
    arrivals: TenantArrivals
    """When this tenant's requests arrive: `poisson`, `gamma` or `constant` with its rate, or
    a `trace` (its timestamps and lengths; several trace tenants splice traces together)."""
    prompt_tokens: LengthConfig | None = None
    """Distribution of this tenant's prompt lengths in tokens (required, except with `trace`
    arrivals, whose lengths come from the trace)."""
    output_tokens: LengthConfig | None = None
    """Distribution of this tenant's output lengths in tokens (as `prompt_tokens`)."""
    priority: int = 0
    """Priority of this tenant's requests under the `priority` ordering: lower is served
    first (vLLM's convention)."""
    slo: SLOConfig | None = None
    """This tenant's latency targets, for its own goodput and SLO attainment; null: the
    experiment's `slo`."""


def _tenant_lengths_rule(tenant: TenantConfig, index: int) -> None:
    """Lengths come from a trace tenant's trace, and from distributions for every other."""
    for key in ("prompt_tokens", "output_tokens"):
        given = getattr(tenant, key) is not None
        if tenant.arrivals.kind == "trace" and given:
            raise rule_error(f"tenants.{index}.{key}",
                             "not allowed with trace arrivals: the lengths come from the trace")
        if tenant.arrivals.kind != "trace" and not given:
            raise rule_error(f"tenants.{index}.{key}", "required key is missing")


class WorkloadConfig(ConfigModel):
    """The request stream shared by every arm. With `trace` arrivals the lengths come from the
    trace, so `prompt_tokens` and `output_tokens` must be absent, and `duration_s` /
    `num_requests` are optional limits (keep the first N requests / those arriving before
    `duration_s`). Every other arrival kind needs both length distributions (or a `lengths`
    corpus) and exactly one of `duration_s` or `num_requests`. Give either `arrivals` (one
    stream) or `tenants` (several, each with its own arrivals and lengths), not both."""

    arrivals: ArrivalsConfig | None = None
    """When requests arrive; required unless `tenants` is given."""
    prompt_tokens: LengthConfig | None = None
    """Distribution of prompt lengths in tokens (not with `trace` arrivals)."""
    output_tokens: LengthConfig | None = None
    """Distribution of output lengths in tokens (not with `trace` arrivals)."""
    lengths: CorpusLengths | None = None
    """Instead of `prompt_tokens` and `output_tokens`: both lengths drawn as pairs from the
    rows of a length corpus (not with `trace` arrivals)."""
    duration_s: Positive | None = None
    """Generate requests arriving within this many seconds."""
    num_requests: AtLeastOne | None = None
    """Generate this many requests (with `tenants`: the first this many of the merged
    stream)."""
    tenants: list[TenantConfig] | None = Field(default=None, min_length=1)
    """Several tenants, each with its own arrivals, lengths, priority and SLO, merged into one
    stream by arrival time (instead of `arrivals`, `prompt_tokens`, `output_tokens`). Requests
    carry their tenant's index in this list (`tenant` in requests.parquet)."""

    @model_validator(mode="after")
    def _lengths_and_stop_rule(self) -> Self:
        if self.tenants is not None:
            return self._tenant_rules(self.tenants)
        if self.arrivals is None:
            raise rule_error("arrivals", "required key is missing (or give tenants)")
        kind = self.arrivals.kind
        if kind == "trace":
            for key in ("prompt_tokens", "output_tokens", "lengths"):
                if getattr(self, key) is not None:
                    raise rule_error(
                        key, "not allowed with trace arrivals, lengths come from the trace"
                    )
            return self
        if self.lengths is not None:
            for key in ("prompt_tokens", "output_tokens"):
                if getattr(self, key) is not None:
                    raise rule_error(key, "not allowed with lengths, the corpus gives both")
            return self._one_stop_rule()
        for key in ("prompt_tokens", "output_tokens"):
            if getattr(self, key) is None:
                raise rule_error(key, f"required with {kind} arrivals")
        return self._one_stop_rule()

    def _one_stop_rule(self) -> Self:
        if self.duration_s is None and self.num_requests is None:
            raise rule_error("", "give exactly one of duration_s or num_requests (got neither)")
        if self.duration_s is not None and self.num_requests is not None:
            raise rule_error("", "give exactly one of duration_s or num_requests (got both)")
        return self

    def _tenant_rules(self, tenants: list[TenantConfig]) -> Self:
        for key in ("arrivals", "prompt_tokens", "output_tokens", "lengths"):
            if getattr(self, key) is not None:
                raise rule_error(key, "not allowed with tenants: each tenant has its own")
        first_index: dict[str, int] = {}
        for index, tenant in enumerate(tenants):
            if tenant.name in first_index:
                raise rule_error(f"tenants.{index}.name",
                                 f"duplicate tenant name {tenant.name!r} (already used by "
                                 f"tenants.{first_index[tenant.name]})")
            first_index[tenant.name] = index
            _tenant_lengths_rule(tenant, index)
        if all(t.arrivals.kind == "trace" for t in tenants) and (
                self.duration_s is None or self.num_requests is None):
            return self  # traces end by themselves; a stop is an optional limit
        return self._one_stop_rule()


# --- ordering of waiting requests ------------------------------------------------------------


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


# --- batching policies (arms) ----------------------------------------------------------------


class ArmDeployment(ConfigModel):
    """Deployment keys an arm may set for itself, overriding the experiment's top-level ones,
    so that one experiment compares layouts (TP vs TP + PP, TP vs TP + EP, ...) on the same
    traffic. Unset keys follow the top level."""

    hardware: str | None = Field(default=None, min_length=1)
    """GPU profile name or path."""
    tensor_parallel: AtLeastOne | None = None
    """GPUs per pipeline stage."""
    pipeline_parallel: AtLeastOne | None = None
    """Pipeline stages per replica."""
    expert_parallel: AtLeastOne | None = None
    """GPUs the experts are spread over."""
    data_parallel_attention: bool | None = None
    """Data-parallel attention."""
    replicas: AtLeastOne | None = None
    """Model replicas."""

    def overrides(self) -> dict[str, object]:
        """The keys this arm sets, as top-level experiment keys."""
        return self.model_dump(exclude_none=True)


# Keys several arms share, each described once (the description feeds errors and the
# generated reference, as the attribute docstrings of the other keys do).
ArmOrdering = Annotated[OrderingConfig, Field(description=(
    "The order in which waiting requests are considered: `fcfs`, `priority`, "
    "`shortest_prompt_first` or `fair_share` (docs/how-to/fairness.md). Admission stops at the "
    "first request that does not fit; a preempted request always goes back first."))]
ArmDeploymentKey = Annotated[ArmDeployment | None, Field(description=(
    "This arm's own hardware, parallelism or replica count (docs/how-to/compare-layouts.md); "
    "null uses the experiment's."))]


class StaticArm(ConfigModel):
    """Static batching: collect a batch, run it until its longest request finishes; finished
    slots keep computing padding and newcomers wait for the next batch."""

    name: str = Field(min_length=1)
    """Arm name, unique within the experiment; labels results and `--set policies.<name>...`."""
    kind: Literal["static"] = "static"
    """Selects this policy."""
    max_batch_size: AtLeastOne = 32
    """Requests per batch."""
    max_wait_s: NonNegative = 0.0
    """How long a partial batch waits for more requests once the first one is queued."""
    max_output_tokens: AtLeastOne = 2048
    """Per-slot output reservation: each slot reserves KV cache for its prompt plus this many
    tokens; requests with a longer output are rejected with a reason."""
    ordering: ArmOrdering = Field(default_factory=FcfsOrdering)
    deployment: ArmDeploymentKey = None


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

    @model_validator(mode="after")
    def _floor_below_start(self) -> Self:
        if self.min_new_token_ratio > self.new_token_ratio:
            raise rule_error(
                "min_new_token_ratio",
                f"must be <= new_token_ratio (got {self.min_new_token_ratio} > "
                f"{self.new_token_ratio})",
            )
        return self


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


# Keys the iteration-level arms (continuous, chunked_prefill) share.
ArmPreemption = Annotated[Literal["recompute", "swap"], Field(description=(
    "What happens to a preempted request's KV cache: dropped and recomputed later, or "
    "swapped to host memory and back."))]
ArmAdmission = Annotated[AdmissionConfig | None, Field(description=(
    "Admission control on arrival (queue length, predicted wait); null admits everything "
    "that fits."))]
ArmAdmissionReserve = Annotated[AdmissionReserveConfig | None, Field(description=(
    "Conservative (SGLang-style) admission into the batch; null admits a request whenever "
    "its tokens fit and preempts when the cache runs out (vLLM's admit-then-preempt)."))]
ArmPrefixCaching = Annotated[bool | None, Field(description=(
    "Prefix caching for this arm; null follows `kv_cache.prefix_caching` (so one experiment "
    "can compare an arm with and without it on the same traffic)."))]
ArmSpeculative = Annotated[SpeculativeConfig | None, Field(description=(
    "Speculative decoding for this arm; null decodes one token per step."))]


class ContinuousArm(ConfigModel):
    """Continuous (iteration-level) batching as in vLLM: running requests first, then
    waiting ones; a new request's prefill runs whole in one step."""

    name: str = Field(min_length=1)
    """Arm name, unique within the experiment; labels results and `--set policies.<name>...`."""
    kind: Literal["continuous"] = "continuous"
    """Selects this policy."""
    max_num_seqs: AtLeastOne = 256
    """Most sequences in one step."""
    max_num_batched_tokens: AtLeastOne | None = None
    """Most new tokens in one step; null means `max_model_len`. Without chunked prefill it must
    be at least `max_model_len` (as in vLLM), checked when the model is known."""
    preemption: ArmPreemption = "recompute"
    admission: ArmAdmission = None
    admission_reserve: ArmAdmissionReserve = None
    prefix_caching: ArmPrefixCaching = None
    ordering: ArmOrdering = Field(default_factory=FcfsOrdering)
    deployment: ArmDeploymentKey = None
    speculative: ArmSpeculative = None


class ChunkedPrefillArm(ConfigModel):
    """Chunked prefill as in Sarathi-Serve and vLLM v1: a per-step token budget; running
    decodes first, then prefill chunks fill the rest, so a long prompt is spread over several
    steps instead of stalling every decode for one long step."""

    name: str = Field(min_length=1)
    """Arm name, unique within the experiment; labels results and `--set policies.<name>...`."""
    kind: Literal["chunked_prefill"] = "chunked_prefill"
    """Selects this policy."""
    token_budget: AtLeastOne = 2048
    """Most new tokens in one step (vLLM's `max_num_batched_tokens`), decodes and prefill chunks
    together. It bounds the longest step, hence decode inter-token latency; larger budgets
    prefill faster. 2048 is vLLM v1's server default on GPUs under 70 GiB and on the A100
    (8192 on the H100/H200); Sarathi-Serve used 512 for tight inter-token SLOs."""
    max_num_seqs: AtLeastOne = 256
    """Most sequences running at once (and in one step); at most `token_budget`, so that every
    running request can decode in every step."""
    long_prefill_token_threshold: AtLeastOne | None = None
    """Cap on one request's prefill chunk per step, so that several long prompts share the
    budget (and short ones are admitted beside a long one); null: no cap beyond the budget."""
    preemption: ArmPreemption = "recompute"
    admission: ArmAdmission = None
    admission_reserve: ArmAdmissionReserve = None
    prefix_caching: ArmPrefixCaching = None
    ordering: ArmOrdering = Field(default_factory=FcfsOrdering)
    deployment: ArmDeploymentKey = None
    speculative: ArmSpeculative = None

    @model_validator(mode="after")
    def _budget_holds_every_decode(self) -> Self:
        if self.token_budget < self.max_num_seqs:
            raise rule_error(
                "token_budget",
                f"must be >= max_num_seqs (got token_budget={self.token_budget}, "
                f"max_num_seqs={self.max_num_seqs}), as in vLLM: every running request "
                "decodes one token per step",
            )
        return self


class KVLinkConfig(ConfigModel):
    """The link that carries each prefilled request's KV cache (prompt tokens × the whole
    model's KV bytes per token) from the prefill pool to the decode pool. One link joins the
    two pools: transfers in flight share its bandwidth equally (processor sharing), and each
    also pays `latency_us` once."""

    bandwidth_gb_s: Positive | None = 50.0
    """Bandwidth between the pools in GB/s (10^9 bytes per second), shared by every transfer
    in flight; 50 is one 400 Gb/s NIC (InfiniBand NDR, RoCE). Null: unlimited, an ideal link
    that separates the cost of the transfers from that of splitting the GPUs."""
    latency_us: NonNegative = 10.0
    """Fixed cost of each transfer in microseconds (setup and propagation), paid after its
    last byte leaves; it does not occupy the link."""
    layerwise: bool = False
    """Pipeline the transfer layer by layer with the prefill (as Splitwise does): once the
    decode replica has reserved its blocks, all but the last layer's share of the bytes
    (1 / num_layers) may cross during the step that completes the prefill, and only the last
    layer's share after it. False: the whole KV is sent after the prefill ends."""


class DisaggregatedArm(ConfigModel):
    """Disaggregated serving (DistServe, Splitwise): a prefill pool computes each prompt and
    its first token (the TTFT); the request's KV cache then crosses `kv_link` to a decode pool,
    which waits for free KV blocks for it and generates the remaining tokens with continuous
    batching. Each pool has its own replicas, GPU, tensor parallelism and KV capacity (sized
    from its own GPU memory, or `kv_cache.num_blocks`). The experiment's `replicas` does not
    apply: the arm uses `prefill_replicas × prefill_tensor_parallel + decode_replicas ×
    decode_tensor_parallel` GPUs. Arrivals reach the prefill pool through the experiment's
    `router`; a prefilled request goes to the decode replica with the fewest requests (then
    the most free KV blocks)."""

    name: str = Field(min_length=1)
    """Arm name, unique within the experiment; labels results and `--set policies.<name>...`."""
    kind: Literal["disaggregated"] = "disaggregated"
    """Selects this policy."""
    prefill_replicas: AtLeastOne = 1
    """Replicas in the prefill pool."""
    decode_replicas: AtLeastOne = 1
    """Replicas in the decode pool."""
    prefill_hardware: str | None = Field(default=None, min_length=1)
    """GPU of the prefill pool (a profile name or a path to a profile YAML); null: the
    experiment's `hardware`."""
    decode_hardware: str | None = Field(default=None, min_length=1)
    """GPU of the decode pool; null: the experiment's `hardware`."""
    prefill_tensor_parallel: AtLeastOne | None = None
    """GPUs per prefill replica; null: the experiment's `tensor_parallel`."""
    decode_tensor_parallel: AtLeastOne | None = None
    """GPUs per decode replica; null: the experiment's `tensor_parallel`."""
    prefill_token_budget: AtLeastOne | None = None
    """Most prompt tokens a prefill replica computes in one step; null: `max_model_len`.
    Without `prefill_chunked` every prompt is prefilled whole in one step (prompts batched up
    to the budget), so a prompt longer than the budget is rejected
    (`prompt_exceeds_token_budget`)."""
    prefill_chunked: bool = False
    """Chunked prefill in the prefill pool: a prompt longer than what is left of the budget is
    spread over several steps (the `chunked_prefill` arm's rule). False: whole prompts, as
    the `continuous` arm."""
    prefill_max_num_seqs: AtLeastOne = 256
    """Most prompts a prefill replica works on at once."""
    decode_max_num_seqs: AtLeastOne = 256
    """Most sequences decoding at once on a decode replica; a request whose KV has arrived
    waits for a free slot."""
    decode_preemption: Literal["recompute", "swap"] = "recompute"
    """What a decode replica does when its KV cache runs out: drop the newest request's KV
    and recompute it there (prompt and generated tokens), or swap it to host memory."""
    kv_link: KVLinkConfig = Field(default_factory=KVLinkConfig)
    """The link between the pools."""


Arm = Annotated[StaticArm | ContinuousArm | ChunkedPrefillArm | DisaggregatedArm,
                Field(discriminator="kind")]


# --- deployment and output -------------------------------------------------------------------


class DTypeConfig(ConfigModel):
    """Numeric formats: they set the bytes moved per weight and per cached token."""

    weights: Literal["bf16", "fp8", "int8", "int4"] = "bf16"
    """Format of the model weights."""
    kv_cache: Literal["bf16", "fp8", "int8"] = "bf16"
    """Format of the KV cache; fewer bytes per token means more concurrent sequences."""


class KVCacheConfig(ConfigModel):
    """The paged KV cache."""

    block_size: AtLeastOne = 16
    """Tokens per KV block."""
    num_blocks: AtLeastOne | None = None
    """Blocks per replica; overrides the capacity computed from GPU memory (for what-if studies
    and tests). Null computes it."""
    swap_space_gb: NonNegative = 4.0
    """Host memory per GPU, in GB, for swap preemption."""
    prefix_caching: bool = False
    """Keep full prompt blocks cached after their request leaves (reference counts, LRU
    eviction, vLLM v1's design) so that a request whose leading blocks are cached skips their
    prefill. Needs prefix block ids: a Mooncake trace or `sessions` arrivals. Applies to
    `continuous` and `chunked_prefill` arms."""


class OutputConfig(ConfigModel):
    """Where and how results are written."""

    dir: str | None = None
    """Result folder; null means `results/<name>`."""
    timeseries_bin_s: Positive = 1.0
    """Width in seconds of the bins of the time series (batch size, KV use, queue length)."""


class EngineConfig(ConfigModel):
    """How the simulation engine advances time (never what it computes)."""

    fast_path: bool = True
    """Advance a decode-only batch over many steps in one event when nothing can change it in
    between (exact: the same results as stepping one by one). False steps one by one."""


class SweepConfig(ConfigModel):
    """One swept parameter: a dotted key of this file and the values it takes."""

    parameter: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    """Dotted key, as `--set` takes it, e.g. `workload.arrivals.rate` or
    `policies.vllm.max_num_seqs`."""
    values: list[Any] = Field(min_length=1)
    """The values, in order; each is validated as that key's type."""


# --- capacity planning (batchsim plan) -------------------------------------------------------


class PlanRateConfig(ConfigModel):
    """The load axis of the max-rate search: each arm's load is bisected between `low` and
    `high` to the largest value that meets the SLO, within `tolerance`."""

    parameter: str = Field(default="workload.arrivals.rate", min_length=1,
                           pattern=r"^[A-Za-z0-9_.-]+$")
    """Dotted key of the load, as `--set` takes it (a rate: fractional values must be valid);
    `target_rate` is set through it too."""
    low: Positive
    """Lowest load tried; when it already misses the SLO the arm has no answer."""
    high: Positive
    """Highest load tried; when it meets the SLO the answer is `high` (and reported as a lower
    bound)."""
    tolerance: Positive
    """Bisection stops when the highest load that met the SLO and the lowest that missed it
    are at most this far apart (in the parameter's unit); the answer is the former, so the
    true boundary lies in [answer, answer + tolerance)."""

    @model_validator(mode="after")
    def _bracket(self) -> Self:
        if self.high <= self.low:
            raise rule_error("high", f"must be > low (got high={self.high}, low={self.low})")
        if self.tolerance >= self.high - self.low:
            raise rule_error("tolerance", f"must be < high - low ({self.high - self.low:g})")
        return self


class PlanCandidatesConfig(ConfigModel):
    """The configurations tried at `target_rate`: every combination of these lists (absent
    lists keep the experiment's value). A `disaggregated` arm sizes its own pools, so
    `replicas` does not apply to it (its pools take `hardware` and `tensor_parallel` only
    where the arm leaves them null)."""

    hardware: list[Annotated[str, Field(min_length=1)]] | None = Field(default=None,
                                                                        min_length=1)
    """GPU profiles to try; null: the experiment's `hardware`."""
    tensor_parallel: list[AtLeastOne] | None = Field(default=None, min_length=1)
    """Tensor-parallel sizes to try; null: the experiment's `tensor_parallel`."""
    pipeline_parallel: list[AtLeastOne] | None = Field(default=None, min_length=1)
    """Pipeline stage counts to try (colocated arms); null: the experiment's
    `pipeline_parallel`."""
    replicas: list[AtLeastOne] | None = Field(default=None, min_length=1)
    """Replica counts to try; null: the experiment's `replicas`."""
    policies: list[Annotated[str, Field(min_length=1)]] | None = Field(default=None,
                                                                        min_length=1)
    """Names of this file's arms to try (each with its knobs); null: every arm."""


class PlanKeepUpConfig(ConfigModel):
    """When a run counts as overloaded (a growing queue), whatever its percentiles say:
    between the first and the last third of the measured requests (by arrival), their mean
    TTFT grew by more than `ttft_growth_slack_s` and faster than `max_ttft_growth_per_s`
    seconds per second of arrivals. Above capacity the queue, hence TTFT, grows by about
    (load / capacity − 1) seconds per second; below it, TTFT does not trend."""

    max_ttft_growth_per_s: NonNegative = 0.05
    """Allowed growth of the mean TTFT per second of arrivals (0.05: a load more than ~5%
    above capacity fails)."""
    ttft_growth_slack_s: NonNegative = 0.1
    """Growth in seconds that is never taken for a growing queue (noise on short runs)."""


class PlanWhatIfConfig(ConfigModel):
    """The same plan again with one change, reported side by side with the base plan."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.+-]+$")
    """Name of the what-if (letters, digits, `_.+-`); labels its column and folder."""
    set: list[Annotated[str, Field(min_length=1)]] = Field(min_length=1)
    """`--set` overrides (`dotted.key=value`) applied on top of the file, e.g.
    `[dtype.kv_cache=fp8]`; `candidates` lists still override the keys they vary."""


class PlanConfig(ConfigModel):
    """Capacity planning for `batchsim plan` (docs/how-to/capacity-planning.md): the largest
    load each arm serves under the SLO, the cheapest candidate configuration for a target
    load, the Pareto front of tokens/s per GPU vs per user, and what-ifs. `batchsim run`
    ignores it."""

    slo: SLOConfig | None = None
    """Targets a configuration must meet (p99 over the measured requests, rejected requests
    counting as misses; with replications, the upper end of the 95% interval); null: the
    experiment's `slo`. At least one target is required."""
    rate: PlanRateConfig | None = None
    """The max-rate search (per arm, on the experiment's deployment); null: none."""
    target_rate: Positive | None = None
    """Load the candidates must serve, set through `rate.parameter` (default
    `workload.arrivals.rate`); null: no candidate search."""
    candidates: PlanCandidatesConfig | None = None
    """Configurations tried at `target_rate`; null: each arm on the experiment's
    deployment."""
    price_per_gpu_hour: dict[str, Positive] = Field(default_factory=dict)
    """Price of one GPU-hour by hardware (as written in the file, a profile name or an alias,
    e.g. `h100-sxm: 3.0`); empty: the experiment's top-level `pricing`, and without that
    configurations are ranked by GPU count and no cost is given."""
    objective: Literal["cost", "gpus", "energy"] | None = None
    """What ranks the candidates that meet the SLO: `cost` (dollars per hour; needs prices),
    `gpus` (fewest GPUs) or `energy` (fewest joules per output token; needs GPU profiles with
    `power`); ties go to fewer GPUs, then the label. Null: `cost` when prices are given, else
    `gpus`."""
    keep_up: PlanKeepUpConfig = Field(default_factory=PlanKeepUpConfig)
    """The overload (growing queue) test every run must pass."""
    what_if: list[PlanWhatIfConfig] = Field(default_factory=list)
    """Variants of the whole plan, each with its own overrides."""

    @model_validator(mode="after")
    def _something_to_plan(self) -> Self:
        if self.rate is None and self.target_rate is None:
            raise rule_error("", "give rate (max-rate search) or target_rate (candidates)")
        if self.candidates is not None and self.target_rate is None:
            raise rule_error("target_rate", "required with candidates")
        names = [what_if.name for what_if in self.what_if]
        for index, name in enumerate(names):
            if name in names[:index] or name == "base":
                raise rule_error(f"what_if.{index}.name",
                                 f"{name!r} is taken (names are unique and not 'base')")
        return self


class Experiment(ConfigModel):
    """One experiment: a model on a GPU, a request stream, and the batching policies (arms)
    that each serve that same stream."""

    name: str = Field(min_length=1, pattern=r"^[^/\\]+$")
    """Experiment name (no path separators); the default output folder is `results/<name>`."""
    seed: int = Field(default=0, ge=0)
    """Seed of the run's random numbers: same seed, same results."""
    model: str = Field(min_length=1)
    """Model: a library name such as `llama-3.1-8b`, or a path to a Hugging Face
    `config.json`."""
    hardware: str = Field(min_length=1)
    """GPU: a profile name such as `h100-sxm`, or a path to a profile YAML."""
    tensor_parallel: AtLeastOne = 1
    """GPUs per pipeline stage, each holding a slice of every layer (tensor parallelism)."""
    pipeline_parallel: AtLeastOne = 1
    """Pipeline stages per replica, each holding a contiguous share of the layers; a replica
    uses `tensor_parallel × pipeline_parallel` GPUs."""
    expert_parallel: AtLeastOne = 1
    """GPUs of a stage that the experts of a mixture-of-experts model are spread over (expert
    parallelism); 1 shards every expert by tensor parallelism instead."""
    data_parallel_attention: bool = False
    """Run attention data-parallel over the stage's GPUs (each GPU its own share of the
    sequences, full attention weights, KV not split by heads) instead of tensor-parallel."""
    moe_imbalance: float = Field(default=1.0, ge=1.0)
    """Routing skew of a mixture-of-experts model under expert parallelism: the GPU holding the
    most-routed experts receives this many times the mean tokens, and the step waits for it
    (1 = balanced routing; no effect without `expert_parallel`). docs/how-to/moe.md."""
    dtype: DTypeConfig = Field(default_factory=DTypeConfig)
    """Numeric formats of weights and KV cache."""
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    """Fraction of GPU memory the server may use (weights, activations, KV cache)."""
    max_model_len: int | None = Field(default=None, ge=2)
    """Longest prompt + output a request may have; null means the model's
    `max_position_embeddings`. Lengths drawn from distributions are clipped to fit."""
    kv_cache: KVCacheConfig = Field(default_factory=KVCacheConfig)
    """The paged KV cache."""
    replicas: AtLeastOne = 1
    """Model replicas, each on `tensor_parallel × pipeline_parallel` GPUs (a `disaggregated`
    arm sizes its own pools instead)."""
    router: Literal["round_robin", "least_outstanding", "least_kv", "prefix_affinity",
                    "shared_queue"] = "round_robin"
    """How arrivals reach replicas: assigned on arrival in turn, to the fewest queued +
    running, to the most free KV blocks, or (`prefix_affinity`, with prefix caching) to the
    longest cached prefix of the prompt, then the fewest queued + running (ties to the lowest
    replica index); or `shared_queue`: one FCFS queue from which the first replica with room
    takes the next request."""
    workload: WorkloadConfig
    """The request stream."""
    warmup_s: NonNegative = 0.0
    """Requests arriving before this time are excluded from the summary."""
    cooldown_s: NonNegative = 0.0
    """Requests arriving in the last `cooldown_s` of the arrival span are excluded from the
    summary."""
    slo: SLOConfig = Field(default_factory=SLOConfig)
    """Latency targets for goodput and SLO attainment."""
    policies: list[Arm] = Field(min_length=1)
    """The arms: batching policies, each run on the same request stream; names are unique."""
    output: OutputConfig = Field(default_factory=OutputConfig)
    """Where results go."""
    engine: EngineConfig = Field(default_factory=EngineConfig)
    """Simulation-engine settings."""
    sweep: list[SweepConfig] | None = None
    """Parameters to sweep: one mapping, or a list of them that forms a grid (every
    combination). Each point is a full run of the experiment, written to its own folder."""
    replications: AtLeastOne = 1
    """Runs of each point with independent seeds (spawned from `seed`); the summary gives each
    metric's mean and 95% confidence interval over them."""
    pricing: dict[str, Positive] = Field(default_factory=dict)
    """Dollars per GPU-hour by hardware: keyed by a profile name, one of its aliases, or the
    `hardware` string as written (e.g. `{h100-sxm: 2.5}`). Each arm's summary then gives its
    cost per million tokens over the measured window (docs/how-to/energy-and-cost.md); `batchsim
    plan` uses it when `plan.price_per_gpu_hour` is empty. Empty: no cost is given."""
    plan: PlanConfig | None = None
    """Capacity planning questions for `batchsim plan`; ignored by `batchsim run` and
    `batchsim sweep`."""

    @field_validator("sweep", mode="before")
    @classmethod
    def _one_sweep_is_a_list_of_one(cls, value: object) -> object:
        return [value] if isinstance(value, dict) else value

    @model_validator(mode="after")
    def _arm_names_unique(self) -> Self:
        first_index: dict[str, int] = {}
        for index, arm in enumerate(self.policies):
            if arm.name in first_index:
                raise rule_error(
                    f"policies.{index}.name",
                    f"duplicate arm name {arm.name!r} (already used by "
                    f"policies.{first_index[arm.name]})",
                )
            first_index[arm.name] = index
        return self

    @model_validator(mode="after")
    def _orderings_fit_the_workload(self) -> Self:
        for index, arm in enumerate(self.policies):
            ordering = getattr(arm, "ordering", None)
            kind = "fcfs" if ordering is None else ordering.kind
            if kind == "fcfs":
                continue
            key = f"policies.{index}.ordering.kind"
            if self.router == "shared_queue":
                raise rule_error(key, f"{kind} orders each replica's waiting queue, but with "
                                      "router: shared_queue requests wait in one central FCFS "
                                      "queue (use another router, or ordering fcfs)")
            if kind in ("priority", "fair_share") and self.workload.tenants is None:
                raise rule_error(key, f"{kind} needs workload.tenants: with one stream every "
                                      "request has the same tenant and priority")
        return self

    @property
    def output_dir(self) -> Path:
        """The result folder as written (`output.dir`, else `results/<name>`)."""
        return Path(self.output.dir) if self.output.dir is not None else Path("results", self.name)
