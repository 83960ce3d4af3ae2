"""Workloads: request streams as plain numpy arrays (arrival times and token counts).

Nothing here knows about the simulator; the runner turns these arrays into requests.
"""

from batchsim.workloads.arrivals import constant_arrivals, gamma_arrivals, poisson_arrivals
from batchsim.workloads.errors import WorkloadError
from batchsim.workloads.lengths import (
    EmpiricalLength,
    FixedLength,
    GeometricLength,
    LengthDistribution,
    LognormalLength,
    MixtureLength,
    UniformLength,
    load_empirical_column,
)
from batchsim.workloads.traces.replay import (
    SHIPPED_TRACES,
    TraceRequests,
    apply_time_scale,
    load_trace,
    resolve_trace_path,
)

__all__ = [
    "SHIPPED_TRACES",
    "EmpiricalLength",
    "FixedLength",
    "GeometricLength",
    "LengthDistribution",
    "LognormalLength",
    "MixtureLength",
    "TraceRequests",
    "UniformLength",
    "WorkloadError",
    "apply_time_scale",
    "constant_arrivals",
    "gamma_arrivals",
    "load_empirical_column",
    "load_trace",
    "poisson_arrivals",
    "resolve_trace_path",
]
