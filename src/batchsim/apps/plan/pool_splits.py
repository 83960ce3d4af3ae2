"""The prefill:decode splits a plan tries for a `disaggregated` arm
(`plan.candidates.disaggregated`): per-pool tensor parallelism times pool sizes, the sizes
either listed or every split of a GPU budget. Pure arithmetic on the file's values, so
`validate` runs it too."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from batchsim.experiment.loader import ConfigError
from batchsim.experiment.schema import DisaggregatedArm, PlanDisaggregatedConfig

_KEY = "plan.candidates.disaggregated"


@dataclass(frozen=True, slots=True)
class PoolSplit:
    """One layout of the two pools: replicas and GPUs per replica of each."""

    prefill_replicas: int
    prefill_tensor_parallel: int
    decode_replicas: int
    decode_tensor_parallel: int

    @property
    def gpus(self) -> int:
        return (self.prefill_replicas * self.prefill_tensor_parallel
                + self.decode_replicas * self.decode_tensor_parallel)

    @property
    def label(self) -> str:
        return (f"prefill tp{self.prefill_tensor_parallel} x{self.prefill_replicas} + "
                f"decode tp{self.decode_tensor_parallel} x{self.decode_replicas}")

    def overrides(self, arm: str) -> dict[str, int]:
        """The arm's keys that give this layout, as `--set` keys (the arm by name)."""
        return {f"policies.{arm}.{key}": getattr(self, key) for key in (
            "prefill_replicas", "prefill_tensor_parallel", "decode_replicas",
            "decode_tensor_parallel")}


def _tensor_parallel(listed: list[int] | None, arm_value: int | None,
                     tensor_parallel: int) -> list[int]:
    return list(listed or [arm_value or tensor_parallel])


def _budget_splits(budget: int, prefill_tp: int, decode_tp: int) -> list[tuple[int, int]]:
    """(prefill replicas, decode replicas) using exactly `budget` GPUs, one replica or more
    per pool, fewest prefill replicas first."""
    splits = []
    for prefill in range(1, (budget - decode_tp) // prefill_tp + 1):
        rest = budget - prefill * prefill_tp
        if rest >= decode_tp and rest % decode_tp == 0:
            splits.append((prefill, rest // decode_tp))
    return splits


def pool_splits(arm: DisaggregatedArm, config: PlanDisaggregatedConfig,
                tensor_parallel: int) -> list[PoolSplit]:
    """Every layout to try for `arm` (`tensor_parallel`: the experiment's, for a pool that
    neither the list nor the arm sizes), by budget, then prefill TP, decode TP and sizes."""
    prefill_tps = _tensor_parallel(config.prefill_tensor_parallel, arm.prefill_tensor_parallel,
                                   tensor_parallel)
    decode_tps = _tensor_parallel(config.decode_tensor_parallel, arm.decode_tensor_parallel,
                                  tensor_parallel)
    if config.gpus is None:
        return [PoolSplit(p, ptp, d, dtp) for ptp, dtp, p, d in itertools.product(
            prefill_tps, decode_tps, config.prefill_replicas or [arm.prefill_replicas],
            config.decode_replicas or [arm.decode_replicas])]
    splits = []
    for budget in config.gpus:
        found = [PoolSplit(p, ptp, d, dtp) for ptp, dtp in itertools.product(
            prefill_tps, decode_tps) for p, d in _budget_splits(budget, ptp, dtp)]
        if not found:
            raise ConfigError(f"{_KEY}.gpus: {budget} GPUs do not split into a prefill and a "
                              f"decode pool of one replica or more with prefill TP "
                              f"{prefill_tps} and decode TP {decode_tps} (arm {arm.name!r})")
        splits += found
    return splits
