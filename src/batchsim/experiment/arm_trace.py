"""An arm's timeline (`output.trace`): the bounds the run keeps its steps for, and the trace
document made from what it kept (metrics/trace_export.py)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from batchsim.experiment.schema.output import OutputConfig
from batchsim.metrics.trace_export import timeline
from batchsim.sim.disaggregated import DisaggregatedSimulation
from batchsim.sim.engine import Simulation
from batchsim.sim.step_trace import StepTrace, TraceBounds


def keep_trace(output: OutputConfig, simulation: Simulation) -> None:
    """Have the simulation keep its steps for the timeline, when one is asked for."""
    config = output.trace_config()
    if config is None:
        return
    start, end = (0.0, math.inf) if config.window_s is None else config.window_s
    simulation.record.step_trace = StepTrace(TraceBounds(
        start_s=start, end_s=end, max_steps=config.max_steps, max_requests=config.max_requests))


def arm_timeline(simulation: Simulation, requests: pd.DataFrame,
                 arm: str) -> dict[str, Any] | None:
    """The arm's trace document, None when the run kept no steps for one."""
    steps = simulation.record.step_trace
    if steps is None:
        return None
    if isinstance(simulation, DisaggregatedSimulation):
        pools = [("prefill", len(simulation.replicas)),
                 ("decode", len(simulation.decode_replicas))]
    else:
        pools = [("replica", simulation.record.num_replicas)]
    return timeline(requests, steps, pools, arm)
