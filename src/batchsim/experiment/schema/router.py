"""The weighted router: scorers over replica signals that may be seconds old
(docs/how-to/routing.md)."""

from typing import Literal, Self, get_args

from pydantic import Field, model_validator

from batchsim.experiment.schema.common import ConfigModel, NonNegative, Positive, rule_error

RouterName = Literal["round_robin", "least_outstanding", "least_kv", "prefix_affinity",
                     "shared_queue"]


class ScorerConfig(ConfigModel):
    """One scorer of a weighted router and its weight."""

    kind: Literal["prefix_cache", "tiered_prefix_cache", "queue_depth", "kv_use",
                  "predicted_latency"]
    """What it scores, each in [0, 1] with higher better: `prefix_cache` the share of the
    prompt's full blocks cached at the replica (needs prefix caching); `tiered_prefix_cache`
    the share found on the replica's GPU or in its lower KV tiers (`kv_cache.tiers`; without
    tiers it is `prefix_cache`); `queue_depth` the
    requests queued + running, `(max - n) / (max - min)` across replicas; `kv_use` the
    replica's free share of its KV blocks; `predicted_latency` the arrival's predicted wait
    (prompt tokens ahead of it and its own uncached ones at the cost model's prefill rate, plus
    the running batch), scaled like `queue_depth`."""
    weight: Positive = 1.0
    """Its weight in the sum the router maximises."""


class WeightedRouterConfig(ConfigModel):
    """A router that sends each arrival to the replica with the highest weighted sum of scores,
    from replica state that may be old, as llm-d's and Dynamo's routers see it."""

    kind: Literal["weighted"]
    """The weighted router (the only mapping form of `router`)."""
    scorers: list[ScorerConfig] = Field(min_length=1)
    """The scorers, each kind at most once."""
    signal_delay_s: NonNegative = 0.0
    """How old the load signals are: the router reads a snapshot of the replicas' queues and KV
    use taken every this many seconds (so 0 to this old); 0 reads the exact state at each
    arrival. Prefix-cache hits are always current (KV-cache events)."""
    count_own_assignments: bool = False
    """Add the requests this router sent since the last snapshot to the snapshot's queues,
    prompt tokens and KV use (llm-d counts its in-flight requests so): without it a burst
    lands on the one replica the old snapshot favours."""
    load_balance_ties: bool = False
    """Among replicas tied for the best score, take them in turn (by the arrival's sequence
    number) instead of the lowest index."""

    @model_validator(mode="after")
    def _each_kind_once(self) -> Self:
        seen: dict[str, int] = {}
        for index, scorer in enumerate(self.scorers):
            if scorer.kind in seen:
                raise rule_error(f"scorers.{index}.kind",
                                 f"{scorer.kind} is already scorers.{seen[scorer.kind]}: give "
                                 "it one weight")
            seen[scorer.kind] = index
        return self


RouterConfig = RouterName | WeightedRouterConfig


def router_name_or_mapping(value: object) -> object:
    """The `router` key before validation: a mapping is validated as the weighted router alone,
    so that its errors name its own keys rather than every form `router` takes."""
    if isinstance(value, dict):
        return WeightedRouterConfig.model_validate(value)
    if isinstance(value, str | WeightedRouterConfig) and (
            not isinstance(value, str) or value in get_args(RouterName)):
        return value
    names = ", ".join(get_args(RouterName))
    raise ValueError(f"expected one of: {names}, or a mapping {{kind: weighted, scorers: [...]}}")
