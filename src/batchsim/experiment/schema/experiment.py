"""The top-level ``Experiment`` model: one experiment file."""

from pathlib import Path
from typing import Self

from pydantic import Field, field_validator, model_validator

from batchsim.experiment.schema.arms import Arm
from batchsim.experiment.schema.common import (
    AtLeastOne,
    ConfigModel,
    NonNegative,
    Positive,
    rule_error,
)
from batchsim.experiment.schema.dtype import DTypeConfig
from batchsim.experiment.schema.kv_allocation import check_kv_allocation
from batchsim.experiment.schema.kv_cache import KVCacheConfig
from batchsim.experiment.schema.kv_tier_arms import check_kv_tiers
from batchsim.experiment.schema.output import OutputConfig
from batchsim.experiment.schema.plan import PlanConfig
from batchsim.experiment.schema.router import RouterConfig, router_name_or_mapping
from batchsim.experiment.schema.simulation import SimulationConfig
from batchsim.experiment.schema.slo import SLOConfig
from batchsim.experiment.schema.slo_classes import check_slo_classes
from batchsim.experiment.schema.sweep import SweepConfig
from batchsim.experiment.schema.trace import check_trace_file_names
from batchsim.experiment.schema.workload import WorkloadConfig


class Experiment(ConfigModel):
    """One experiment: a model on a GPU, a request stream, and the batching policies (arms)
    that each serve that same stream."""

    name: str = Field(min_length=1, pattern=r"^[^/\\]+$")
    """Experiment name (no path separators); the default output folder is `results/<name>`."""
    seed: int = Field(default=0, ge=0)
    """Seed of the run's random numbers: same seed, same results."""
    model: str = Field(min_length=1)
    """Model: a library name such as `llama-3.1-8b`, or a path to a Hugging Face
    `config.json`."""
    hardware: str = Field(min_length=1)
    """GPU: a profile name such as `h100-sxm`, or a path to a profile YAML."""
    tensor_parallel: AtLeastOne = 1
    """GPUs per pipeline stage, each holding a slice of every layer (tensor parallelism)."""
    pipeline_parallel: AtLeastOne = 1
    """Pipeline stages per replica, each holding a contiguous share of the layers; a replica
    uses `tensor_parallel × pipeline_parallel` GPUs."""
    expert_parallel: AtLeastOne = 1
    """GPUs of a stage that the experts of a mixture-of-experts model are spread over (expert
    parallelism); 1 shards every expert by tensor parallelism instead."""
    data_parallel_attention: bool = False
    """Run attention data-parallel over the stage's GPUs (each GPU its own share of the
    sequences, full attention weights, KV not split by heads) instead of tensor-parallel."""
    moe_imbalance: float = Field(default=1.0, ge=1.0)
    """Routing skew of a mixture-of-experts model under expert parallelism: the GPU holding the
    most-routed experts receives this many times the mean tokens, and the step waits for it
    (1 = balanced routing; no effect without `expert_parallel`). docs/how-to/moe.md."""
    dtype: DTypeConfig = Field(default_factory=DTypeConfig)
    """Numeric formats of weights and KV cache."""
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    """Fraction of GPU memory the server may use (weights, activations, KV cache)."""
    max_model_len: int | None = Field(default=None, ge=2)
    """Longest prompt + output a request may have; null means the model's
    `max_position_embeddings`. Lengths drawn from distributions are clipped to fit."""
    kv_cache: KVCacheConfig = Field(default_factory=KVCacheConfig)
    """The KV cache: blocks, their layout (paged or contiguous), swap space, prefix caching,
    lower tiers."""
    replicas: AtLeastOne = 1
    """Model replicas, each on `tensor_parallel × pipeline_parallel` GPUs (a `disaggregated`
    arm sizes its own pools instead)."""
    router: RouterConfig = "round_robin"
    """How arrivals reach replicas: assigned on arrival in turn, to the fewest queued +
    running, to the most free KV blocks, or (`prefix_affinity`, with prefix caching) to the
    longest cached prefix of the prompt, then the fewest queued + running (ties to the lowest
    replica index); `shared_queue`: one FCFS queue from which the first replica with room
    takes the next request; or a mapping `{kind: weighted, scorers: [...]}`: a weighted sum
    of scorers over signals that may be `signal_delay_s` old (docs/how-to/routing.md)."""
    workload: WorkloadConfig
    """The request stream."""
    warmup_s: NonNegative = 0.0
    """Requests arriving before this time are excluded from the summary."""
    cooldown_s: NonNegative = 0.0
    """Requests arriving in the last `cooldown_s` of the arrival span are excluded from the
    summary."""
    slo: SLOConfig = Field(default_factory=SLOConfig)
    """Latency targets for goodput and SLO attainment."""
    policies: list[Arm] = Field(min_length=1)
    """The arms: batching policies, each run on the same request stream; names are unique."""
    output: OutputConfig = Field(default_factory=OutputConfig)
    """Where results go."""
    engine: str = Field(default="vllm", min_length=1)
    """The serving engine whose costs the arms run with (its front-end latency and per-step
    overheads; the arms keep the batching knobs they name): a shipped engine profile
    (`vllm`, the default, calibrated on measured benchmarks; `sglang`, `trtllm`; `batchsim
    engines` lists them), a path to an engine profile YAML (`batchsim calibrate engine`
    writes one), or `none`: the bare roofline with the GPU profile's per-step overhead priors
    and no per-request latency (docs/background/engines.md)."""
    simulation: SimulationConfig = Field(default_factory=SimulationConfig)
    """Settings of the simulation itself (never what it computes)."""
    sweep: list[SweepConfig] | None = None
    """Parameters to sweep: one mapping, or a list of them that forms a grid (every
    combination). Each point is a full run of the experiment, written to its own folder."""
    replications: AtLeastOne = 1
    """Runs of each point with independent seeds (spawned from `seed`); the summary gives each
    metric's mean and 95% confidence interval over them."""
    pricing: dict[str, Positive] = Field(default_factory=dict)
    """Dollars per GPU-hour by hardware: keyed by a profile name, one of its aliases, or the
    `hardware` string as written (e.g. `{h100-sxm: 2.5}`). Each arm's summary then gives its
    cost per million tokens over the measured window (docs/how-to/energy-and-cost.md); `batchsim
    plan` uses it when `plan.price_per_gpu_hour` is empty. Empty: no cost is given."""
    plan: PlanConfig | None = None
    """Capacity planning questions for `batchsim plan`; ignored by `batchsim run` and
    `batchsim sweep`."""

    @field_validator("engine", mode="before")
    @classmethod
    def _engine_names_the_serving_engine(cls, value: object) -> object:
        if isinstance(value, dict):
            raise ValueError("names the serving engine (none, vllm, sglang, trtllm or an engine "
                             "profile YAML); the setting fast_path moved to simulation.fast_path")
        return value

    @field_validator("router", mode="before")
    @classmethod
    def _router_is_a_name_or_a_mapping(cls, value: object) -> object:
        return router_name_or_mapping(value)

    @field_validator("sweep", mode="before")
    @classmethod
    def _one_sweep_is_a_list_of_one(cls, value: object) -> object:
        return [value] if isinstance(value, dict) else value

    @model_validator(mode="after")
    def _arm_names_unique(self) -> Self:
        first_index: dict[str, int] = {}
        for index, arm in enumerate(self.policies):
            if arm.name in first_index:
                raise rule_error(
                    f"policies.{index}.name",
                    f"duplicate arm name {arm.name!r} (already used by "
                    f"policies.{first_index[arm.name]})",
                )
            first_index[arm.name] = index
        return self

    @model_validator(mode="after")
    def _orderings_fit_the_workload(self) -> Self:
        for index, arm in enumerate(self.policies):
            ordering = getattr(arm, "ordering", None)
            kind = "fcfs" if ordering is None else ordering.kind
            if kind == "fcfs":
                continue
            key = f"policies.{index}.ordering.kind"
            if self.router == "shared_queue":
                raise rule_error(key, f"{kind} orders each replica's waiting queue, but with "
                                      "router: shared_queue requests wait in one central FCFS "
                                      "queue (use another router, or ordering fcfs)")
            if kind in ("priority", "fair_share") and self.workload.tenants is None:
                raise rule_error(key, f"{kind} needs workload.tenants: with one stream every "
                                      "request has the same tenant and priority")
        return self

    @model_validator(mode="after")
    def _kv_allocation_fits_the_arms(self) -> Self:
        check_kv_allocation(self.policies, self.kv_cache)
        check_kv_tiers(self.policies, self.kv_cache)
        return self

    @model_validator(mode="after")
    def _gateways_fit_the_workload(self) -> Self:
        check_slo_classes(self.policies, self.workload)
        return self

    @model_validator(mode="after")
    def _arm_names_make_trace_files(self) -> Self:
        check_trace_file_names([arm.name for arm in self.policies], self.output.trace)
        return self

    @property
    def output_dir(self) -> Path:
        """The result folder (`output.dir`, else `results/<name>`), `~` expanded."""
        given = self.output.dir
        return (Path(given) if given is not None else Path("results", self.name)).expanduser()
