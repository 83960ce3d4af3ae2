"""An arm's `energy` and `cost` summary metrics: which GPUs it ran on, and the measured window.

The window is the summary's: from `warmup_s` to the finish of the last measured request
(`window_s` long). Tokens are those of the measured requests that finished, the same ones the
throughputs count, so joules per output token = mean power of all the arm's GPUs / output
throughput.
"""

from __future__ import annotations

import pandas as pd

from batchsim.experiment.deployment_size import gpus_per_replica
from batchsim.experiment.disaggregation import DisaggregatedRun
from batchsim.experiment.pricing import no_price_reason, price_for
from batchsim.experiment.schema import DisaggregatedArm, Experiment
from batchsim.gpu.hardware import GpuProfile
from batchsim.metrics.energy import ReplicaGroup, cost_metrics, energy_metrics
from batchsim.metrics.summary import measured_mask
from batchsim.sim.recorder import RunRecord


def _group(exp: Experiment, first: int, replicas: int, gpus: int, hardware: str,
           gpu: GpuProfile) -> ReplicaGroup:
    price = price_for(hardware, gpu, exp.pricing)
    return ReplicaGroup(first, replicas, gpus, gpu, exp.dtype.weights, price,
                        "" if price is not None else no_price_reason(hardware, "pricing",
                                                                     exp.pricing))


def colocated_groups(arm_exp: Experiment, gpu: GpuProfile) -> list[ReplicaGroup]:
    """Every replica of a colocated arm (its own `deployment:` applied: `arm_exp`)."""
    return [_group(arm_exp, 0, arm_exp.replicas, gpus_per_replica(arm_exp), arm_exp.hardware,
                   gpu)]


def disaggregated_groups(exp: Experiment, arm: DisaggregatedArm,
                         run: DisaggregatedRun) -> list[ReplicaGroup]:
    """The prefill pool (replicas first in the step log), then the decode pool, each on its
    own hardware; GPUs per replica as the arm's `gpus` metric counts them."""
    groups, first = [], 0
    for pool in (run.prefill, run.decode):
        hardware = getattr(arm, f"{pool.role}_hardware") or exp.hardware
        groups.append(_group(exp, first, pool.replicas, pool.tensor_parallel, hardware,
                             pool.gpu))
        first += pool.replicas
    return groups


def arm_energy_and_cost(exp: Experiment, requests: pd.DataFrame, record: RunRecord,
                        groups: list[ReplicaGroup], window_s: float) -> dict[str, object]:
    """{"energy": ..., "cost": ...} over the arm's measured window."""
    measured = measured_mask(requests, exp.warmup_s, exp.cooldown_s)
    done = requests[measured & requests["finished"].to_numpy()]
    output = int(done["output_tokens"].sum())
    total = output + int(done["prompt_tokens"].sum())
    return {
        "energy": energy_metrics(record, groups, start=exp.warmup_s,
                                 end=exp.warmup_s + window_s, output_tokens=output),
        "cost": cost_metrics(groups, window_s=window_s, output_tokens=output,
                             total_tokens=total),
    }
