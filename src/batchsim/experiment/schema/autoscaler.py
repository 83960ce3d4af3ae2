"""An arm's `autoscaler`: a replica pool resized during the run (docs/how-to/autoscaling.md)."""

from typing import Literal, Self

from pydantic import Field, model_validator

from batchsim.experiment.schema.common import (
    AtLeastOne,
    ConfigModel,
    NonNegative,
    Positive,
    rule_error,
)


class AutoscalerConfig(ConfigModel):
    """Scale a colocated arm's replicas between `min_replicas` and `max_replicas` during the
    run, as the Kubernetes horizontal pod autoscaler does: every `interval_s` the metric gives
    a desired count (ceil(metric total / target)); the pool grows to the smallest desired count
    of the last `scale_up_window_s` and shrinks to the largest of the last
    `scale_down_window_s`. A started replica serves after `cold_start_s` (paid for, serving
    nothing); a drained one takes no new requests and finishes the ones it holds. The arm's
    pool has `max_replicas` slots: the experiment's `replicas` does not apply to it."""

    min_replicas: int = Field(default=1, ge=0)
    """Fewest replicas serving or starting; 0 scales to zero (an arrival then waits at the
    router until a replica has started, and starts one if none is starting)."""
    max_replicas: AtLeastOne = 4
    """Most replicas serving, starting or draining."""
    initial_replicas: int | None = Field(default=None, ge=0)
    """Replicas serving at time 0 (already loaded, no cold start); null: `min_replicas`."""
    metric: Literal["outstanding", "utilization"] = "outstanding"
    """What is compared with `target`: `outstanding`, the requests queued or running at the
    serving replicas plus those waiting at the router, per replica (sampled at each
    evaluation); or `utilization`, the replicas' busy fraction (stepping, not idle) over the
    last interval. A continuously batching replica is busy whenever it holds a request, so
    utilization saturates early; outstanding is the concurrency signal of KServe and
    Knative."""
    target: Positive = 8.0
    """Target per replica: requests for `outstanding`, a fraction in (0, 1] for
    `utilization`."""
    interval_s: Positive = 15.0
    """Seconds between evaluations (the HPA's sync period)."""
    scale_up_window_s: NonNegative = 0.0
    """Stabilisation before growing: the pool grows to the smallest desired count of the
    evaluations in this many seconds (0: the current one)."""
    scale_down_window_s: NonNegative = 300.0
    """Stabilisation before shrinking: the pool shrinks to the largest desired count of the
    evaluations in this many seconds (the HPA's default is 300)."""
    cold_start_s: NonNegative = 60.0
    """Seconds from a replica's start to its first request (container start and model load);
    its GPUs are paid for, and draw idle power, meanwhile."""

    @model_validator(mode="after")
    def _bounds_are_ordered(self) -> Self:
        if self.min_replicas > self.max_replicas:
            raise rule_error("min_replicas", f"must be <= max_replicas (got "
                                             f"{self.min_replicas} > {self.max_replicas})")
        initial = self.initial_replicas
        if initial is not None and not self.min_replicas <= initial <= self.max_replicas:
            raise rule_error("initial_replicas", f"must lie in [min_replicas, max_replicas] = "
                                                 f"[{self.min_replicas}, {self.max_replicas}] "
                                                 f"(got {initial})")
        if self.metric == "utilization" and self.target > 1:
            raise rule_error("target", f"a utilization target is a busy fraction in (0, 1] "
                                       f"(got {self.target})")
        return self

    @property
    def start_replicas(self) -> int:
        return self.min_replicas if self.initial_replicas is None else self.initial_replicas
