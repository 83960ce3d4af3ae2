"""The check that ties an arm's gateway classes to the workload's tenants, with the file (so
that `validate` refuses what `run` would), and the thresholds the kernel's gateway takes."""

from batchsim.experiment.schema.arms import Arm, ChunkedPrefillArm, ContinuousArm
from batchsim.experiment.schema.common import rule_error
from batchsim.experiment.schema.gateway import GatewayConfig
from batchsim.experiment.schema.workload import WorkloadConfig


def shed_thresholds(gateway: GatewayConfig, workload: WorkloadConfig) -> dict[int, float]:
    """Tenant index -> its `max_queued_per_replica` (the names were checked with the file)."""
    index = {t.name: i for i, t in enumerate(workload.tenants or [])}
    return {index[c.tenant]: c.max_queued_per_replica for c in gateway.shed}


def check_slo_classes(arms: list[Arm], workload: WorkloadConfig) -> None:
    """Raise a rule error naming the key of the first arm whose gateway does not fit the
    workload."""
    for index, arm in enumerate(arms):
        if isinstance(arm, ContinuousArm | ChunkedPrefillArm) and arm.gateway is not None:
            _check_gateway(arm.gateway, workload, f"policies.{index}.gateway")


def _check_gateway(gateway: GatewayConfig, workload: WorkloadConfig, key: str) -> None:
    if workload.tenants is None:
        raise rule_error(f"{key}.shed", "sheds tenants by class and needs workload.tenants "
                                        "(with one stream every request has the same class)")
    names = [t.name for t in workload.tenants]
    seen: set[str] = set()
    for position, entry in enumerate(gateway.shed):
        entry_key = f"{key}.shed.{position}.tenant"
        if entry.tenant not in names:
            raise rule_error(entry_key, f"unknown tenant {entry.tenant!r} (workload.tenants "
                                        f"are {', '.join(map(repr, names))})")
        if entry.tenant in seen:
            raise rule_error(entry_key, f"tenant {entry.tenant!r} is listed twice")
        seen.add(entry.tenant)

