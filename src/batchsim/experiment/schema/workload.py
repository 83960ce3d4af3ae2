"""The request stream: arrivals with their lengths, or several tenants merged into one
stream, and when generation stops."""

from typing import Annotated, Self

from pydantic import Field, model_validator

from batchsim.experiment.schema.arrivals import ArrivalsConfig, TenantArrivals
from batchsim.experiment.schema.common import AtLeastOne, ConfigModel, Positive, rule_error
from batchsim.experiment.schema.lengths import CorpusLengths, LengthConfig
from batchsim.experiment.schema.slo import SLOConfig


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


# Larger runs exhaust memory before they finish (each request is kept for the outputs).
MAX_REQUESTS = 10_000_000


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
    num_requests: Annotated[AtLeastOne, Field(le=MAX_REQUESTS)] | None = None
    """Generate this many requests (with `tenants`: the first this many of the merged
    stream); at most 10,000,000 (a simulated request keeps about 1 KB in memory until the run
    ends, docs/performance.md)."""
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
            if kind == "sessions" and self.lengths.order == "in_order":
                # A session draws its turns' messages as it goes: there is no request order
                # for the rows to follow.
                raise rule_error("lengths.order", "in_order is not available with sessions "
                                 "arrivals (expected random)")
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
