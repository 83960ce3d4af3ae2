"""A disaggregated arm's `autoscaler`: the prefill and the decode pool scaled separately, the
prefill pool against a TTFT target and the decode pool against an ITL target
(docs/how-to/autoscaling.md, "Disaggregated pools")."""

from typing import Literal, Self, cast

from pydantic import Field, model_validator

from batchsim.experiment.schema.common import (
    AtLeastOne,
    ConfigModel,
    NonNegative,
    Positive,
    rule_error,
)


def _check_scaler(scaler: "PrefillScalerConfig | DecodeScalerConfig") -> None:
    low, high, initial = scaler.min_replicas, scaler.max_replicas, scaler.initial_replicas
    if low > high:
        raise rule_error("min_replicas", f"must be <= max_replicas (got {low} > {high})")
    if initial is not None and not low <= initial <= high:
        raise rule_error("initial_replicas", f"must lie in [min_replicas, max_replicas] = "
                                             f"[{low}, {high}] (got {initial})")
    if scaler.metric in ("utilization", "kv_utilization") and scaler.target > 1:
        raise rule_error("target", f"a {scaler.metric} target is a fraction in (0, 1] "
                                   f"(got {scaler.target})")


class _PoolScaler(ConfigModel):
    """What both pools' scalers check and derive. No fields, so that each pool keeps its own
    fields in its own order (the reference and the echoed config follow it)."""

    @model_validator(mode="after")
    def _bounds_are_ordered(self) -> Self:
        _check_scaler(cast("PrefillScalerConfig | DecodeScalerConfig", self))
        return self

    @property
    def start_replicas(self) -> int:
        scaler = cast("PrefillScalerConfig | DecodeScalerConfig", self)
        return scaler.min_replicas if scaler.initial_replicas is None else scaler.initial_replicas


class PrefillScalerConfig(_PoolScaler):
    """The prefill pool's scaler. Every `interval_s` it computes a desired count as the
    Kubernetes HPA does: for `ttft`, ceil(serving replicas × observed TTFT / target); for a
    load metric, ceil(metric total / target). The count is clamped to [min, max] and
    stabilised by the two windows (the colocated `autoscaler`'s rule)."""

    min_replicas: int = Field(default=1, ge=0)
    """Fewest prefill replicas serving or starting; 0 scales the pool to zero (an arrival then
    waits at the router and starts one)."""
    max_replicas: AtLeastOne = 4
    """Most prefill replicas serving, starting or draining."""
    initial_replicas: int | None = Field(default=None, ge=0)
    """Prefill replicas serving at time 0; null: `min_replicas`."""
    metric: Literal["ttft", "outstanding", "utilization"] = "ttft"
    """`ttft`: the mean time to first token of the requests whose first token came in the last
    interval, or the age of the oldest request still waiting for its first token if that is
    longer (so a growing queue is seen before its requests are served); `outstanding`: prompts
    queued or running at the serving prefill replicas plus those held at the router, per
    replica (Dynamo's load-based planner reads the prefill queue); `utilization`: the busy
    fraction over the last interval."""
    target: Positive = 1.0
    """Seconds of TTFT for `ttft`; prompts per replica for `outstanding`; a fraction in
    (0, 1] for `utilization`."""
    interval_s: Positive = 15.0
    """Seconds between evaluations."""
    scale_up_window_s: NonNegative = 0.0
    """Stabilisation before growing (the smallest desired count of this window)."""
    scale_down_window_s: NonNegative = 300.0
    """Stabilisation before shrinking (the largest desired count of this window)."""
    cold_start_s: NonNegative = 60.0
    """Seconds from a prefill replica's start to its first prompt (paid for, serving
    nothing)."""


class DecodeScalerConfig(_PoolScaler):
    """The decode pool's scaler: as the prefill pool's, on its own metric. A decode pool
    never scales to zero: every prefilled request needs a decode replica to hand its KV to."""

    min_replicas: AtLeastOne = 1
    """Fewest decode replicas serving or starting (at least 1)."""
    max_replicas: AtLeastOne = 4
    """Most decode replicas serving, starting or draining."""
    initial_replicas: AtLeastOne | None = None
    """Decode replicas serving at time 0; null: `min_replicas`."""
    metric: Literal["itl", "kv_utilization", "outstanding", "utilization"] = "itl"
    """`itl`: the decode steps' seconds per token emitted over the last interval (the ITL of a
    request decoding back to back; a hand-off's wait is not in it); `kv_utilization`: the
    serving decode replicas' used share of their KV blocks, summed (Dynamo's load-based
    planner reads decode KV utilisation); `outstanding`: requests at the serving decode
    replicas (decoding, or waiting for blocks or for their KV), per replica; `utilization`:
    the busy fraction over the last interval."""
    target: Positive = 0.05
    """Seconds of ITL for `itl`; a fraction in (0, 1] for `kv_utilization` and
    `utilization`; requests per replica for `outstanding`."""
    interval_s: Positive = 15.0
    """Seconds between evaluations."""
    scale_up_window_s: NonNegative = 0.0
    """Stabilisation before growing (the smallest desired count of this window)."""
    scale_down_window_s: NonNegative = 300.0
    """Stabilisation before shrinking (the largest desired count of this window)."""
    cold_start_s: NonNegative = 60.0
    """Seconds from a decode replica's start to its first request (paid for, serving
    nothing)."""


class DisaggregatedAutoscalerConfig(ConfigModel):
    """Scale a disaggregated arm's two pools separately during the run, the shape of NVIDIA
    Dynamo's planner (prefill workers against TTFT, decode workers against ITL). Each pool has
    `max_replicas` slots: the arm's `prefill_replicas` and `decode_replicas` do not apply.
    A drained prefill replica finishes its prompts and keeps their KV until it has crossed the
    link; a drained decode replica finishes every request it holds."""

    prefill: PrefillScalerConfig = Field(default_factory=PrefillScalerConfig)
    """The prefill pool's scaler."""
    decode: DecodeScalerConfig = Field(default_factory=DecodeScalerConfig)
    """The decode pool's scaler."""
