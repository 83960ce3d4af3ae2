"""Arrival processes: open-loop rates and load shapes, trace replay, closed-loop users and
multi-turn sessions."""

from typing import Annotated, Literal, Self

from pydantic import Field, model_validator

from batchsim.experiment.schema.common import (
    AtLeastOne,
    ConfigModel,
    NonNegative,
    Positive,
    rule_error,
)
from batchsim.experiment.schema.lengths import LengthConfig


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
    prompt_pool: AtLeastOne | None = None
    """Distinct prompts the users draw from (null: every prompt is new). Benchmark clients
    reuse a small pool (AIPerf generates 100), so with `kv_cache.prefix_caching` a repeated
    prompt hits the cache if it is still there. Each entry keeps the prompt length drawn for
    it; entries are dealt in a shuffled order, reshuffled after each pass, as AIPerf's
    sampler does."""
    drain_after: AtLeastOne | None = None
    """A warm-up phase: once this many requests were sent, no user sends another until every
    one of them has ended, so the rest start together as one wave (AIPerf's warm-up is such a
    drained phase; null: the users never wait for each other)."""


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
