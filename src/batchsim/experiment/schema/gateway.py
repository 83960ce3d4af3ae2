"""SLO classes at the edge: a gateway in front of dispatch that sheds lower classes under
overload (docs/how-to/slo-classes.md)."""

from pydantic import Field

from batchsim.experiment.schema.common import ConfigModel, NonNegative


class ShedClass(ConfigModel):
    """One tenant (traffic class) the gateway refuses while the system is overloaded."""

    tenant: str = Field(min_length=1)
    """The tenant's `name` in `workload.tenants`."""
    max_queued_per_replica: NonNegative
    """Overload, for this class: more requests already waiting than this many per replica,
    counting every replica's waiting queue (preempted requests included) and the shared
    queue. An arriving request of the class is then rejected (`shed_overload`, with the count
    in its reason); 0 sheds the class whenever anything waits. Running requests are not
    counted: a full batch with nothing waiting is busy, not overloaded."""


class GatewayConfig(ConfigModel):
    """Admission at the edge, before any replica sees a request: classes listed in `shed`
    are refused while the system is overloaded by their own threshold, so that the classes not
    listed (or listed with a higher threshold) keep the capacity. A shed request is rejected
    with a reason, never dropped: it counts in `rejected_by_reason` (overall and per tenant)
    and its row in requests.parquet carries the reason."""

    shed: list[ShedClass] = Field(min_length=1)
    """The classes to shed and the overload threshold of each; one entry per tenant."""
