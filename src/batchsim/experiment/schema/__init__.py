"""The experiment file's schema (docs/design.md §7): pydantic models, one per YAML mapping.

Every model forbids unknown keys and is immutable. Variants are discriminated on ``kind``.
The attribute docstrings are the field descriptions: they feed error messages and the
generated reference (``docs/reference/experiment.md``, see
``batchsim/experiment/reference_doc.py``).
Cross-field rules raise ``rule_error`` so the loader can name the offending key.

The models live in one module per subject; this package re-exports them.
"""

from batchsim.experiment.schema.admission import AdmissionConfig, AdmissionReserveConfig
from batchsim.experiment.schema.arms import (
    Arm,
    ArmAdmission,
    ArmAdmissionReserve,
    ArmDeployment,
    ArmDeploymentKey,
    ArmKVAllocation,
    ArmOrdering,
    ArmPreemption,
    ArmPrefixCaching,
    ArmSpeculative,
    ChunkedPrefillArm,
    ContinuousArm,
    DisaggregatedArm,
    KVLinkConfig,
    StaticArm,
)
from batchsim.experiment.schema.arrivals import (
    TRACE_FORMATS_WITH_COLUMNS,
    ArrivalsConfig,
    BurstConfig,
    ClosedLoopArrivals,
    ConstantArrivals,
    DiurnalArrivals,
    GammaArrivals,
    PoissonArrivals,
    RateCurveArrivals,
    SessionArrivals,
    TenantArrivals,
    TraceArrivals,
    TraceColumns,
    TraceLengthFilter,
    WeibullArrivals,
)
from batchsim.experiment.schema.autoscaler import AutoscalerConfig
from batchsim.experiment.schema.common import (
    RULE_ERROR_TYPE,
    AtLeastOne,
    ConfigModel,
    NonNegative,
    Positive,
    rule_error,
)
from batchsim.experiment.schema.dtype import DTypeConfig
from batchsim.experiment.schema.experiment import Experiment
from batchsim.experiment.schema.kv_allocation import arm_kv_allocation
from batchsim.experiment.schema.kv_cache import KVAllocation, KVCacheConfig
from batchsim.experiment.schema.lengths import (
    CorpusLengths,
    EmpiricalComponent,
    EmpiricalLength,
    FixedComponent,
    FixedLength,
    GeometricComponent,
    GeometricLength,
    LengthConfig,
    LognormalComponent,
    LognormalLength,
    MixtureComponent,
    MixtureLength,
    UniformComponent,
    UniformLength,
    WeightedComponent,
)
from batchsim.experiment.schema.ordering import (
    FairShareOrdering,
    FcfsOrdering,
    OrderingConfig,
    PriorityOrdering,
    ShortestPromptFirstOrdering,
)
from batchsim.experiment.schema.output import OutputConfig
from batchsim.experiment.schema.plan import (
    PlanAutoscalingConfig,
    PlanCandidatesConfig,
    PlanConfig,
    PlanDisaggregatedConfig,
    PlanKeepUpConfig,
    PlanRateConfig,
    PlanWhatIfConfig,
)
from batchsim.experiment.schema.pool_autoscaler import (
    DecodeScalerConfig,
    DisaggregatedAutoscalerConfig,
    PrefillScalerConfig,
)
from batchsim.experiment.schema.simulation import SimulationConfig
from batchsim.experiment.schema.slo import SLOConfig
from batchsim.experiment.schema.speculative import (
    AcceptanceConfig,
    BetaAcceptance,
    ConstantAcceptance,
    SpeculativeConfig,
)
from batchsim.experiment.schema.sweep import SweepConfig
from batchsim.experiment.schema.workload import TenantConfig, WorkloadConfig

__all__ = [
    "RULE_ERROR_TYPE",
    "TRACE_FORMATS_WITH_COLUMNS",
    "AcceptanceConfig",
    "AdmissionConfig",
    "AdmissionReserveConfig",
    "Arm",
    "ArmAdmission",
    "ArmAdmissionReserve",
    "ArmDeployment",
    "ArmDeploymentKey",
    "ArmKVAllocation",
    "ArmOrdering",
    "ArmPreemption",
    "ArmPrefixCaching",
    "ArmSpeculative",
    "ArrivalsConfig",
    "AtLeastOne",
    "AutoscalerConfig",
    "BetaAcceptance",
    "BurstConfig",
    "ChunkedPrefillArm",
    "ClosedLoopArrivals",
    "ConfigModel",
    "ConstantAcceptance",
    "ConstantArrivals",
    "ContinuousArm",
    "CorpusLengths",
    "DTypeConfig",
    "DecodeScalerConfig",
    "DisaggregatedArm",
    "DisaggregatedAutoscalerConfig",
    "DiurnalArrivals",
    "EmpiricalComponent",
    "EmpiricalLength",
    "Experiment",
    "FairShareOrdering",
    "FcfsOrdering",
    "FixedComponent",
    "FixedLength",
    "GammaArrivals",
    "GeometricComponent",
    "GeometricLength",
    "KVAllocation",
    "KVCacheConfig",
    "KVLinkConfig",
    "LengthConfig",
    "LognormalComponent",
    "LognormalLength",
    "MixtureComponent",
    "MixtureLength",
    "NonNegative",
    "OrderingConfig",
    "OutputConfig",
    "PlanAutoscalingConfig",
    "PlanCandidatesConfig",
    "PlanConfig",
    "PlanDisaggregatedConfig",
    "PlanKeepUpConfig",
    "PlanRateConfig",
    "PlanWhatIfConfig",
    "PoissonArrivals",
    "Positive",
    "PrefillScalerConfig",
    "PriorityOrdering",
    "RateCurveArrivals",
    "SLOConfig",
    "SessionArrivals",
    "ShortestPromptFirstOrdering",
    "SimulationConfig",
    "SpeculativeConfig",
    "StaticArm",
    "SweepConfig",
    "TenantArrivals",
    "TenantConfig",
    "TraceArrivals",
    "TraceColumns",
    "TraceLengthFilter",
    "UniformComponent",
    "UniformLength",
    "WeibullArrivals",
    "WeightedComponent",
    "WorkloadConfig",
    "arm_kv_allocation",
    "rule_error",
]
