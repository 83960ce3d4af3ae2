"""Capacity planning questions for `batchsim plan`: max-rate search, candidate
configurations, the overload test and what-ifs."""

from typing import Annotated, Any, Literal, Self

from pydantic import Field, model_validator

from batchsim.experiment.schema.common import (
    AtLeastOne,
    ConfigModel,
    NonNegative,
    Positive,
    rule_error,
)
from batchsim.experiment.schema.slo import SLOConfig


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


def _distinct(values: list[Any] | None, key: str) -> None:
    """A value listed twice would be the same candidate twice, under one label."""
    if values is not None and len(set(values)) < len(values):
        raise rule_error(key, f"lists a value twice (got {values})")


class PlanDisaggregatedConfig(ConfigModel):
    """Prefill:decode splits tried for the `disaggregated` arms among the candidates: pool
    sizes (replicas per pool, by GPU budget or listed) times per-pool tensor parallelism.
    With it, these arms take their pools' tensor parallelism from here, not from
    `candidates.tensor_parallel` (which then applies to colocated arms only)."""

    gpus: list[AtLeastOne] | None = Field(default=None, min_length=1)
    """GPU budgets: for each, every split with `prefill_replicas × prefill TP + decode_replicas
    × decode TP` equal to it (at least one replica per pool); null: the replica lists below."""
    prefill_replicas: list[AtLeastOne] | None = Field(default=None, min_length=1)
    """Prefill replica counts to try (not with `gpus`); null: the arm's `prefill_replicas`."""
    decode_replicas: list[AtLeastOne] | None = Field(default=None, min_length=1)
    """Decode replica counts to try (not with `gpus`); null: the arm's `decode_replicas`."""
    prefill_tensor_parallel: list[AtLeastOne] | None = Field(default=None, min_length=1)
    """GPUs per prefill replica to try; null: the arm's `prefill_tensor_parallel`, else the
    experiment's `tensor_parallel`."""
    decode_tensor_parallel: list[AtLeastOne] | None = Field(default=None, min_length=1)
    """GPUs per decode replica to try; null: the arm's `decode_tensor_parallel`, else the
    experiment's `tensor_parallel`."""

    @model_validator(mode="after")
    def _one_way_to_size(self) -> Self:
        for key in ("gpus", "prefill_replicas", "decode_replicas", "prefill_tensor_parallel",
                    "decode_tensor_parallel"):
            _distinct(getattr(self, key), key)
        if self.gpus is not None and (self.prefill_replicas or self.decode_replicas):
            raise rule_error("gpus", "give GPU budgets or prefill_replicas/decode_replicas "
                                     "lists, not both")
        return self


class PlanCandidatesConfig(ConfigModel):
    """The configurations tried at `target_rate`: every combination of these lists (absent
    lists keep the experiment's value). A `disaggregated` arm sizes its own pools, so
    `replicas` does not apply to it (its pools take `hardware` and `tensor_parallel` only
    where the arm leaves them null; with `disaggregated`, their sizes and tensor parallelism
    come from there)."""

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
    disaggregated: PlanDisaggregatedConfig | None = None
    """Prefill:decode splits and per-pool tensor parallelism for the `disaggregated` arms
    tried; null: each such arm's own pools (with `hardware` and `tensor_parallel` above)."""


class PlanAutoscalingConfig(ConfigModel):
    """Fleet sizing on the file's own traffic (not at `target_rate`: a load that varies over
    the run, such as a diurnal day, is what an autoscaler is for): fixed replica counts and
    autoscaler bounds of colocated arms, each run on the experiment's deployment and judged by
    the SLO, with the GPU-hours and dollars it paid over the measured window."""

    policies: list[Annotated[str, Field(min_length=1)]] | None = Field(default=None,
                                                                        min_length=1)
    """Names of this file's colocated arms to size; null: every colocated arm. An arm's own
    `autoscaler` (or the defaults) gives the knobs not listed here."""
    fixed_replicas: list[AtLeastOne] = Field(default_factory=list)
    """Fixed replica counts to compare with (the arm without its autoscaler)."""
    min_replicas: list[Annotated[int, Field(ge=0)]] | None = Field(default=None, min_length=1)
    """Autoscaler lower bounds to try; null: the arm's (1 without an autoscaler)."""
    max_replicas: list[AtLeastOne] | None = Field(default=None, min_length=1)
    """Autoscaler upper bounds to try; pairs with min_replicas > max_replicas are skipped;
    null: the arm's (4 without an autoscaler)."""
    target: list[Positive] | None = Field(default=None, min_length=1)
    """Autoscaler targets per replica to try; null: the arm's (8 without an autoscaler)."""
    autoscaled: bool = True
    """Try the autoscaled candidates (false: the fixed counts only)."""

    @model_validator(mode="after")
    def _axes_make_candidates(self) -> Self:
        for key in ("fixed_replicas", "min_replicas", "max_replicas", "target"):
            _distinct(getattr(self, key), key)
        if self.min_replicas and self.max_replicas and \
                min(self.min_replicas) > max(self.max_replicas):
            raise rule_error("min_replicas", f"every bound exceeds every max_replicas "
                                             f"(got {self.min_replicas} and "
                                             f"{self.max_replicas}): no pair to try")
        if not self.autoscaled and not self.fixed_replicas:
            raise rule_error("fixed_replicas", "required with autoscaled: false (nothing to "
                                               "try otherwise)")
        return self


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
    autoscaling: PlanAutoscalingConfig | None = None
    """Fixed and autoscaled fleets of colocated arms on the file's own traffic, ranked by
    what they paid over the run; null: none."""

    @model_validator(mode="after")
    def _something_to_plan(self) -> Self:
        if self.rate is None and self.target_rate is None and self.autoscaling is None:
            raise rule_error("", "give rate (max-rate search), target_rate (candidates) or "
                                 "autoscaling (fleet sizing)")
        if self.candidates is not None and self.target_rate is None:
            raise rule_error("target_rate", "required with candidates")
        names = [what_if.name for what_if in self.what_if]
        for index, name in enumerate(names):
            if name in names[:index] or name == "base":
                raise rule_error(f"what_if.{index}.name",
                                 f"{name!r} is taken (names are unique and not 'base')")
        return self
