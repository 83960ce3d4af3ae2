"""Energy and cost of one arm over its measured window (docs/how-to/energy-and-cost.md).

Power model, per GPU of a replica (the profile's `power`, `batchsim.gpu.hardware.BoardPower`):

- no step running: `idle_w`;
- a step running: `memory_bound_w + (max_w − memory_bound_w) × load`, where `load` is how far
  the step's layer GEMMs are towards compute-bound: `min(1, tokens / ridge_tokens)`. A GEMM
  over `tokens` rows streams each weight once and does 2 FLOPs per weight per row, so it turns
  compute-bound at `ridge_tokens = bytes_per_weight × peak_flops × e_c / (2 × bandwidth × e_m)`
  (the roofline's ridge point, with the profile's efficiencies as the cost model uses them).
  A small decode (a few tokens) streams the weights at full bandwidth and draws about
  `memory_bound_w`; a long prefill chunk (thousands of tokens) keeps the tensor cores busy and
  draws `max_w`.

Joules = Σ over replicas and their GPUs of (busy seconds × busy watts + idle seconds × idle
watts) inside the window. Cost = GPU-hours of the window × $/GPU-hour: a GPU is paid for whether
it steps or idles. An autoscaled pool (`ReplicaGroup.active_replica_s`) pays for the
replica-seconds it ran, cold starts included (a starting replica draws idle power), not for
every slot throughout.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from batchsim.gpu.dtypes import bytes_per_element
from batchsim.gpu.hardware import BoardPower, GpuProfile
from batchsim.sim.recorder import RunRecord

SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True, slots=True)
class ReplicaGroup:
    """Replicas `first .. first + replicas − 1` of the step log, all on the same GPU kind and
    size: every replica of a colocated arm, or one pool of a disaggregated arm."""

    first: int
    replicas: int
    gpus_per_replica: int
    gpu: GpuProfile
    weight_dtype: str
    usd_per_gpu_hour: float | None  # None: no price set for this hardware
    no_price_reason: str = ""  # why there is no price (names the pricing key)
    # An autoscaled pool: replica-seconds inside the window its replicas were paid for
    # (serving, starting or draining; metrics/autoscaling.py). None: all, throughout.
    active_replica_s: float | None = None

    @property
    def gpus(self) -> int:
        return self.replicas * self.gpus_per_replica

    def replica_seconds(self, window_s: float) -> float:
        """Replica-seconds paid for in a window `window_s` long."""
        if self.active_replica_s is None:
            return window_s * self.replicas
        return self.active_replica_s


def _fixed(groups: list[ReplicaGroup]) -> bool:
    """No group autoscaled: the sums keep the order they had before autoscaling, so that
    such runs keep their bytes."""
    return all(g.active_replica_s is None for g in groups)


def paid_gpu_seconds(groups: list[ReplicaGroup], window_s: float) -> float:
    if _fixed(groups):
        return sum(g.gpus for g in groups) * window_s
    return sum(g.replica_seconds(window_s) * g.gpus_per_replica for g in groups)


def ridge_tokens(gpu: GpuProfile, weight_dtype: str) -> float:
    """Tokens per step at which the layer GEMMs stop being bound by streaming the weights."""
    # fp8 and nvfp4 GEMMs have fitted keys of their own; others borrow
    # (`PeakFlops.gemm_keys_for`).
    own = gpu.efficiency.gemm_by_weights
    eff = gpu.efficiency.for_weights(gpu.peak_flops.gemm_keys_for(weight_dtype, own))
    compute = gpu.peak_flops.for_weights(weight_dtype) * eff.gemm_peak_efficiency
    memory = gpu.memory_bandwidth_bytes_per_s * eff.memory_efficiency
    return bytes_per_element(weight_dtype) * compute / (2.0 * memory)


def busy_power_w(power: BoardPower, tokens: np.ndarray, ridge: float) -> np.ndarray:
    """Watts per GPU while running steps of `tokens` tokens each."""
    load = np.minimum(1.0, tokens / ridge)
    return power.memory_bound_w + (power.max_w - power.memory_bound_w) * load


def group_joules(record: RunRecord, group: ReplicaGroup, start: float, end: float) -> float:
    """Energy of one group's GPUs over [start, end]: busy steps plus the idle rest."""
    power = group.gpu.power
    assert power is not None
    sums = record.steps.window_sums(start, end, range(group.first, group.first + group.replicas))
    # A step's power depends on its tokens only: the window kept busy seconds by tokens.
    watts = busy_power_w(power, sums.tokens.astype(np.float64),
                         ridge_tokens(group.gpu, group.weight_dtype))
    busy_joules = float(np.add.reduce(sums.seconds_by_tokens * watts))  # not np.dot: summary.py
    # A replica steps one batch at a time, so its busy seconds fit in the window; the clip
    # only guards the idle time against rounding.
    idle_s = max(0.0, group.replica_seconds(end - start) - sums.busy_s)
    return (busy_joules + idle_s * power.idle_w) * group.gpus_per_replica


def energy_metrics(record: RunRecord, groups: list[ReplicaGroup], *, start: float, end: float,
                   output_tokens: int) -> dict[str, object]:
    """`energy` of summary.json: joules, per output token, mean watts per GPU; null numbers
    with the reason when a GPU profile gives no power."""
    missing = [g.gpu.name for g in groups if g.gpu.power is None]
    if missing:
        return {"joules": None, "joules_per_output_token": None, "mean_power_per_gpu_w": None,
                "reason": f"GPU profile {missing[0]} has no `power` block (idle_w, "
                          "memory_bound_w, max_w), so no energy is computed"}
    joules = sum(group_joules(record, g, start, end) for g in groups)
    gpu_seconds = paid_gpu_seconds(groups, end - start)
    return {
        "joules": joules,
        "joules_per_output_token": joules / output_tokens if output_tokens else None,
        "mean_power_per_gpu_w": joules / gpu_seconds if gpu_seconds > 0 else None,
        "reason": None if output_tokens else "no output tokens in the window",
    }


def cost_metrics(groups: list[ReplicaGroup], *, window_s: float, output_tokens: int,
                 total_tokens: int) -> dict[str, object]:
    """`cost` of summary.json: GPU-hours of the window, and dollars when every group's GPU
    kind has a price (null with the reason otherwise)."""
    gpu_hours = paid_gpu_seconds(groups, window_s) / SECONDS_PER_HOUR
    unpriced = [g for g in groups if g.usd_per_gpu_hour is None]
    if unpriced:
        return {"gpu_hours": gpu_hours, "usd": None, "usd_per_million_output_tokens": None,
                "usd_per_million_total_tokens": None, "reason": unpriced[0].no_price_reason}
    if _fixed(groups):
        usd = (sum(g.gpus * (g.usd_per_gpu_hour or 0.0) for g in groups) * window_s
               / SECONDS_PER_HOUR)
    else:
        usd = sum(g.replica_seconds(window_s) * g.gpus_per_replica * (g.usd_per_gpu_hour or 0.0)
                  for g in groups) / SECONDS_PER_HOUR
    return {
        "gpu_hours": gpu_hours,
        "usd": usd,
        "usd_per_million_output_tokens": usd / output_tokens * 1e6 if output_tokens else None,
        "usd_per_million_total_tokens": usd / total_tokens * 1e6 if total_tokens else None,
        "reason": None if output_tokens else "no output tokens in the window",
    }
