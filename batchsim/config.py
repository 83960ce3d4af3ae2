"""The experiment file's schema (DESIGN.md §7): pydantic models, one per YAML mapping.

Every model forbids unknown keys and is immutable. Variants are discriminated on ``kind``.
The attribute docstrings are the field descriptions: they feed error messages and the
generated reference (``docs/reference/experiment.md``, see ``batchsim/schema_doc.py``).
Cross-field rules raise ``rule_error`` so the loader can name the offending key.
"""

from pathlib import Path
from typing import Annotated, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

RULE_ERROR_TYPE = "config_rule"
"""The pydantic error type of a cross-field rule; its context names the key (``key``)."""

AtLeastOne = Annotated[int, Field(ge=1)]
Positive = Annotated[float, Field(gt=0)]
NonNegative = Annotated[float, Field(ge=0)]


def rule_error(key: str, message: str) -> PydanticCustomError:
    """An error for a rule spanning several keys; ``key`` is dotted, relative to the model."""
    text = f"{key}: {message}" if key else message
    return PydanticCustomError(RULE_ERROR_TYPE, text, {"key": key, "message": message})


class ConfigModel(BaseModel):
    """Base of every experiment-file model: unknown keys are errors, values are immutable."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, allow_inf_nan=False, use_attribute_docstrings=True
    )


# --- token lengths ---------------------------------------------------------------------------


class FixedLength(ConfigModel):
    """Every request has the same number of tokens."""

    kind: Literal["fixed"] = "fixed"
    """Selects this distribution."""
    value: AtLeastOne
    """The length in tokens."""


class UniformLength(ConfigModel):
    """Lengths drawn uniformly from the integers `low`..`high` (both included)."""

    kind: Literal["uniform"] = "uniform"
    """Selects this distribution."""
    low: AtLeastOne
    """Smallest length in tokens."""
    high: AtLeastOne
    """Largest length in tokens; at least `low`."""

    @model_validator(mode="after")
    def _high_at_least_low(self) -> Self:
        if self.high < self.low:
            raise rule_error("high", f"must be >= low (got high={self.high}, low={self.low})")
        return self


class LognormalLength(ConfigModel):
    """Lognormal lengths with the given mean and coefficient of variation, rounded to tokens."""

    kind: Literal["lognormal"] = "lognormal"
    """Selects this distribution."""
    mean: float = Field(ge=1)
    """Mean length in tokens."""
    cv: Positive
    """Coefficient of variation (standard deviation / mean); 1.0 is heavy-tailed."""


class GeometricLength(ConfigModel):
    """Geometric lengths on 1, 2, 3, ... with the given mean (exponential service time)."""

    kind: Literal["geometric"] = "geometric"
    """Selects this distribution."""
    mean: float = Field(ge=1)
    """Mean length in tokens."""


class EmpiricalLength(ConfigModel):
    """Lengths resampled from a column of a CSV file (for example a length corpus)."""

    kind: Literal["empirical"] = "empirical"
    """Selects this distribution."""
    path: str = Field(min_length=1)
    """CSV file; a relative path is resolved against the experiment file's folder."""
    column: str = Field(min_length=1)
    """Name of the column holding positive integer token counts."""


class WeightedComponent(ConfigModel):
    """Adds the mixing weight to a length distribution used inside a mixture."""

    weight: Positive
    """Relative weight of this component; weights are normalised to sum to one."""


class FixedComponent(FixedLength, WeightedComponent):
    """A `fixed` length inside a mixture."""


class UniformComponent(UniformLength, WeightedComponent):
    """A `uniform` length inside a mixture."""


class LognormalComponent(LognormalLength, WeightedComponent):
    """A `lognormal` length inside a mixture."""


class GeometricComponent(GeometricLength, WeightedComponent):
    """A `geometric` length inside a mixture."""


class EmpiricalComponent(EmpiricalLength, WeightedComponent):
    """An `empirical` length inside a mixture."""


MixtureComponent = Annotated[
    FixedComponent
    | UniformComponent
    | LognormalComponent
    | GeometricComponent
    | EmpiricalComponent,
    Field(discriminator="kind"),
]


class MixtureLength(ConfigModel):
    """A weighted mixture of length distributions, e.g. 90% short chat + 10% long documents."""

    kind: Literal["mixture"] = "mixture"
    """Selects this distribution."""
    components: list[MixtureComponent] = Field(min_length=1)
    """The components: each is a length distribution of any kind except `mixture`, with an
    extra `weight` > 0, e.g. `{weight: 0.9, kind: uniform, low: 32, high: 128}`."""


LengthConfig = Annotated[
    FixedLength
    | UniformLength
    | LognormalLength
    | GeometricLength
    | EmpiricalLength
    | MixtureLength,
    Field(discriminator="kind"),
]


# --- arrivals --------------------------------------------------------------------------------


class PoissonArrivals(ConfigModel):
    """Open loop: exponential inter-arrival times (memoryless traffic)."""

    kind: Literal["poisson"] = "poisson"
    """Selects this arrival process."""
    rate: Positive
    """Mean arrival rate in requests per second."""


class GammaArrivals(ConfigModel):
    """Open loop: gamma inter-arrival times; `cv` > 1 is burstier than Poisson."""

    kind: Literal["gamma"] = "gamma"
    """Selects this arrival process."""
    rate: Positive
    """Mean arrival rate in requests per second."""
    cv: Positive
    """Coefficient of variation of the inter-arrival times (1.0 is Poisson)."""


class ConstantArrivals(ConfigModel):
    """Open loop: evenly spaced arrivals, one every 1 / `rate` seconds."""

    kind: Literal["constant"] = "constant"
    """Selects this arrival process."""
    rate: Positive
    """Arrival rate in requests per second."""


class TraceArrivals(ConfigModel):
    """Open loop: arrival times and prompt/output lengths replayed from a trace file."""

    kind: Literal["trace"] = "trace"
    """Selects this arrival process."""
    path: str = Field(min_length=1)
    """Trace file; a relative path is resolved against the experiment file's folder."""
    format: Literal["azure2023"] = "azure2023"
    """Trace format (`azure2023`: the Azure LLM inference trace 2023 CSV)."""
    time_scale: Positive = 1.0
    """Trace timestamps are multiplied by this factor: 0.5 replays the trace at twice its
    rate, keeping its burstiness."""


class ClosedLoopArrivals(ConfigModel):
    """Closed loop: `concurrency` users, each sending its next request when the previous one
    finishes (plus think time), as `vllm bench serve --max-concurrency` does."""

    kind: Literal["closed_loop"] = "closed_loop"
    """Selects this arrival process."""
    concurrency: AtLeastOne
    """Number of users, i.e. requests in flight."""
    think_time_s: NonNegative = 0.0
    """Pause in seconds between a user's response and its next request."""


ArrivalsConfig = Annotated[
    PoissonArrivals | GammaArrivals | ConstantArrivals | TraceArrivals | ClosedLoopArrivals,
    Field(discriminator="kind"),
]


class WorkloadConfig(ConfigModel):
    """The request stream shared by every arm. With `trace` arrivals the lengths come from the
    trace, so `prompt_tokens` and `output_tokens` must be absent, and `duration_s` /
    `num_requests` are optional limits (keep the first N requests / those arriving before
    `duration_s`). Every other arrival kind needs both length distributions and exactly one
    of `duration_s` or `num_requests`."""

    arrivals: ArrivalsConfig
    """When requests arrive."""
    prompt_tokens: LengthConfig | None = None
    """Distribution of prompt lengths in tokens (not with `trace` arrivals)."""
    output_tokens: LengthConfig | None = None
    """Distribution of output lengths in tokens (not with `trace` arrivals)."""
    duration_s: Positive | None = None
    """Generate requests arriving within this many seconds."""
    num_requests: AtLeastOne | None = None
    """Generate this many requests."""

    @model_validator(mode="after")
    def _lengths_and_stop_rule(self) -> Self:
        kind = self.arrivals.kind
        if kind == "trace":
            for key in ("prompt_tokens", "output_tokens"):
                if getattr(self, key) is not None:
                    raise rule_error(
                        key, "not allowed with trace arrivals, lengths come from the trace"
                    )
            return self
        for key in ("prompt_tokens", "output_tokens"):
            if getattr(self, key) is None:
                raise rule_error(key, f"required with {kind} arrivals")
        if self.duration_s is None and self.num_requests is None:
            raise rule_error("", "give exactly one of duration_s or num_requests (got neither)")
        if self.duration_s is not None and self.num_requests is not None:
            raise rule_error("", "give exactly one of duration_s or num_requests (got both)")
        return self


# --- batching policies (arms) ----------------------------------------------------------------


class StaticArm(ConfigModel):
    """Static batching: collect a batch, run it until its longest request finishes; finished
    slots keep computing padding and newcomers wait for the next batch."""

    name: str = Field(min_length=1)
    """Arm name, unique within the experiment; labels results and `--set policies.<name>...`."""
    kind: Literal["static"] = "static"
    """Selects this policy."""
    max_batch_size: AtLeastOne = 32
    """Requests per batch."""
    max_wait_s: NonNegative = 0.0
    """How long a partial batch waits for more requests once the first one is queued."""
    max_output_tokens: AtLeastOne = 2048
    """Per-slot output reservation: each slot reserves KV cache for its prompt plus this many
    tokens; requests with a longer output are rejected with a reason."""


class AdmissionConfig(ConfigModel):
    """Admission control on arrival: a request is rejected (with its reason, counted in the
    summary's `rejected_by_reason`) when its replica's queue or predicted wait is over a bound.
    Absent bounds are not checked."""

    max_queue: int | None = Field(default=None, ge=0)
    """Reject an arrival when this many requests already wait at its replica (`queue_full`)."""
    max_predicted_wait_s: Positive | None = None
    """Reject an arrival whose predicted wait before it starts exceeds this many seconds
    (`predicted_wait`). The prediction uses no output lengths: 0 when the replica would start it
    at the next step, else (requests waiting + 1) × the replica's mean interval between its last
    `wait_window` completions, measured up to now; no prediction (no rejection) before it has
    completed `wait_window` requests."""
    wait_window: AtLeastOne = 16
    """Completions over which the mean interval of the wait prediction is measured."""


class AdmissionReserveConfig(ConfigModel):
    """SGLang-style conservative admission: a waiting request enters the batch only if the KV
    cache can hold, for every running request and for it, its current tokens plus
    `new_token_ratio ×` its estimated remaining decode (`assumed_max_new_tokens` − tokens
    generated), instead of admitting whenever its prompt fits and preempting later. The ratio
    decays linearly from `new_token_ratio` to `min_new_token_ratio` over `decay_steps` steps
    and returns to `new_token_ratio` at every step that preempts; set `min_new_token_ratio`
    equal to `new_token_ratio` for a fixed ratio. A request is always admitted into an empty
    batch."""

    assumed_max_new_tokens: AtLeastOne = 1024
    """The remaining-decode estimate of every request, in tokens (SGLang uses the request's
    `max_new_tokens`; the simulated output lengths are never read)."""
    new_token_ratio: float = Field(default=0.7, gt=0, le=1)
    """Initial fraction of the estimated remaining decode reserved (SGLang's
    `SGLANG_INIT_NEW_TOKEN_RATIO`, 0.7)."""
    min_new_token_ratio: float = Field(default=0.098, gt=0, le=1)
    """Floor of the decaying ratio (SGLang: 0.14 × the initial ratio)."""
    decay_steps: AtLeastOne = 600
    """Steps over which the ratio decays from its initial value to its floor (SGLang: 600)."""

    @model_validator(mode="after")
    def _floor_below_start(self) -> Self:
        if self.min_new_token_ratio > self.new_token_ratio:
            raise rule_error(
                "min_new_token_ratio",
                f"must be <= new_token_ratio (got {self.min_new_token_ratio} > "
                f"{self.new_token_ratio})",
            )
        return self


class ContinuousArm(ConfigModel):
    """Continuous (iteration-level) batching as in vLLM: running requests first, then
    waiting ones; a new request's prefill runs whole in one step."""

    name: str = Field(min_length=1)
    """Arm name, unique within the experiment; labels results and `--set policies.<name>...`."""
    kind: Literal["continuous"] = "continuous"
    """Selects this policy."""
    max_num_seqs: AtLeastOne = 256
    """Most sequences in one step."""
    max_num_batched_tokens: AtLeastOne | None = None
    """Most new tokens in one step; null means `max_model_len`. Without chunked prefill it must
    be at least `max_model_len` (as in vLLM), checked when the model is known."""
    preemption: Literal["recompute", "swap"] = "recompute"
    """What happens to a preempted request's KV cache: dropped and recomputed later, or
    swapped to host memory and back."""
    admission: AdmissionConfig | None = None
    """Admission control on arrival (queue length, predicted wait); null admits everything
    that fits."""
    admission_reserve: AdmissionReserveConfig | None = None
    """Conservative (SGLang-style) admission into the batch; null admits a request whenever
    its tokens fit and preempts when the cache runs out (vLLM's admit-then-preempt)."""


class ChunkedPrefillArm(ConfigModel):
    """Chunked prefill as in Sarathi-Serve and vLLM v1: a per-step token budget; running
    decodes first, then prefill chunks fill the rest, so a long prompt is spread over several
    steps instead of stalling every decode for one long step."""

    name: str = Field(min_length=1)
    """Arm name, unique within the experiment; labels results and `--set policies.<name>...`."""
    kind: Literal["chunked_prefill"] = "chunked_prefill"
    """Selects this policy."""
    token_budget: AtLeastOne = 2048
    """Most new tokens in one step (vLLM's `max_num_batched_tokens`), decodes and prefill chunks
    together. It bounds the longest step, hence decode inter-token latency; larger budgets
    prefill faster. 2048 is vLLM v1's server default on GPUs under 70 GiB and on the A100
    (8192 on the H100/H200); Sarathi-Serve used 512 for tight inter-token SLOs."""
    max_num_seqs: AtLeastOne = 256
    """Most sequences running at once (and in one step); at most `token_budget`, so that every
    running request can decode in every step."""
    long_prefill_token_threshold: AtLeastOne | None = None
    """Cap on one request's prefill chunk per step, so that several long prompts share the
    budget (and short ones are admitted beside a long one); null: no cap beyond the budget."""
    preemption: Literal["recompute", "swap"] = "recompute"
    """What happens to a preempted request's KV cache: dropped and recomputed later, or
    swapped to host memory and back."""
    admission: AdmissionConfig | None = None
    """Admission control on arrival (queue length, predicted wait); null admits everything
    that fits."""
    admission_reserve: AdmissionReserveConfig | None = None
    """Conservative (SGLang-style) admission into the batch; null admits a request whenever
    its tokens fit and preempts when the cache runs out (vLLM's admit-then-preempt)."""

    @model_validator(mode="after")
    def _budget_holds_every_decode(self) -> Self:
        if self.token_budget < self.max_num_seqs:
            raise rule_error(
                "token_budget",
                f"must be >= max_num_seqs (got token_budget={self.token_budget}, "
                f"max_num_seqs={self.max_num_seqs}), as in vLLM: every running request "
                "decodes one token per step",
            )
        return self


Arm = Annotated[StaticArm | ContinuousArm | ChunkedPrefillArm, Field(discriminator="kind")]


# --- deployment and output -------------------------------------------------------------------


class DTypeConfig(ConfigModel):
    """Numeric formats: they set the bytes moved per weight and per cached token."""

    weights: Literal["bf16", "fp8", "int8", "int4"] = "bf16"
    """Format of the model weights."""
    kv_cache: Literal["bf16", "fp8", "int8"] = "bf16"
    """Format of the KV cache; fewer bytes per token means more concurrent sequences."""


class KVCacheConfig(ConfigModel):
    """The paged KV cache."""

    block_size: AtLeastOne = 16
    """Tokens per KV block."""
    num_blocks: AtLeastOne | None = None
    """Blocks per replica; overrides the capacity computed from GPU memory (for what-if studies
    and tests). Null computes it."""
    swap_space_gb: NonNegative = 4.0
    """Host memory per GPU, in GB, for swap preemption."""


class SLOConfig(ConfigModel):
    """Service-level objectives; a request meets the SLO when it meets every one given.
    They define goodput and SLO attainment; absent ones are not checked."""

    ttft_p99_s: Positive | None = None
    """Target p99 time to first token, in seconds."""
    tpot_p99_s: Positive | None = None
    """Target p99 time per output token, in seconds."""
    e2e_p99_s: Positive | None = None
    """Target p99 end-to-end latency, in seconds."""


class OutputConfig(ConfigModel):
    """Where and how results are written."""

    dir: str | None = None
    """Result folder; null means `results/<name>`."""
    timeseries_bin_s: Positive = 1.0
    """Width in seconds of the bins of the time series (batch size, KV use, queue length)."""


class EngineConfig(ConfigModel):
    """How the simulation engine advances time (never what it computes)."""

    fast_path: bool = True
    """Advance a decode-only batch over many steps in one event when nothing can change it in
    between (exact: the same results as stepping one by one). False steps one by one."""


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
    """GPUs per replica (tensor parallelism)."""
    dtype: DTypeConfig = Field(default_factory=DTypeConfig)
    """Numeric formats of weights and KV cache."""
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    """Fraction of GPU memory the server may use (weights, activations, KV cache)."""
    max_model_len: int | None = Field(default=None, ge=2)
    """Longest prompt + output a request may have; null means the model's
    `max_position_embeddings`. Lengths drawn from distributions are clipped to fit."""
    kv_cache: KVCacheConfig = Field(default_factory=KVCacheConfig)
    """The paged KV cache."""
    replicas: AtLeastOne = 1
    """Model replicas, each on `tensor_parallel` GPUs."""
    router: Literal["round_robin", "least_outstanding", "least_kv", "shared_queue"] = (
        "round_robin")
    """How arrivals reach replicas: assigned on arrival in turn, to the fewest queued +
    running, or to the most free KV blocks (ties to the lowest replica index); or
    `shared_queue`: one FCFS queue from which the first replica with room takes the next
    request."""
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
    engine: EngineConfig = Field(default_factory=EngineConfig)
    """Simulation-engine settings."""

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

    @property
    def output_dir(self) -> Path:
        """The result folder as written (`output.dir`, else `results/<name>`)."""
        return Path(self.output.dir) if self.output.dir is not None else Path("results", self.name)
