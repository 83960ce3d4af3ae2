"""The batching policies (arms): static, continuous, chunked_prefill and disaggregated, with
the keys they share and an arm's own deployment."""

import math
from typing import Annotated, Literal, Self, cast

from pydantic import BeforeValidator, Field, model_validator

from batchsim.experiment.schema.admission import AdmissionConfig, AdmissionReserveConfig
from batchsim.experiment.schema.autoscaler import AutoscalerConfig
from batchsim.experiment.schema.common import (
    AtLeastOne,
    ConfigModel,
    NonNegative,
    rule_error,
)
from batchsim.experiment.schema.gateway import GatewayConfig
from batchsim.experiment.schema.kv_tiers import ArmKVTiers
from batchsim.experiment.schema.ordering import FcfsOrdering, OrderingConfig
from batchsim.experiment.schema.pool_autoscaler import DisaggregatedAutoscalerConfig
from batchsim.experiment.schema.speculative import SpeculativeConfig


class ArmDeployment(ConfigModel):
    """Deployment keys an arm may set for itself, overriding the experiment's top-level ones,
    so that one experiment compares layouts (TP vs TP + PP, TP vs TP + EP, ...) on the same
    traffic. Unset keys follow the top level."""

    hardware: str | None = Field(default=None, min_length=1)
    """GPU profile name or path."""
    tensor_parallel: AtLeastOne | None = None
    """GPUs per pipeline stage."""
    pipeline_parallel: AtLeastOne | None = None
    """Pipeline stages per replica."""
    expert_parallel: AtLeastOne | None = None
    """GPUs the experts are spread over."""
    data_parallel_attention: bool | None = None
    """Data-parallel attention."""
    replicas: AtLeastOne | None = None
    """Model replicas."""
    engine: str | None = Field(default=None, min_length=1)
    """Serving engine profile (its costs) for this arm: compare engines on the same traffic."""

    def overrides(self) -> dict[str, object]:
        """The keys this arm sets, as top-level experiment keys."""
        return self.model_dump(exclude_none=True)


# Keys several arms share, each described once (the description feeds errors and the
# generated reference, as the attribute docstrings of the other keys do).
ArmOrdering = Annotated[OrderingConfig, Field(description=(
    "The order in which waiting requests are considered: `fcfs`, `priority`, "
    "`shortest_prompt_first` or `fair_share` (docs/how-to/fairness.md). Admission stops at the "
    "first request that does not fit; a preempted request always goes back first."))]
ArmDeploymentKey = Annotated[ArmDeployment | None, Field(description=(
    "This arm's own hardware, parallelism or replica count (docs/how-to/compare-layouts.md); "
    "null uses the experiment's."))]
ArmAutoscalerKey = Annotated[AutoscalerConfig | None, Field(description=(
    "Resize this arm's replica pool during the run (docs/how-to/autoscaling.md); null: a fixed "
    "`replicas`. Its `max_replicas` replaces `replicas`, so `deployment.replicas` may not be "
    "set beside it."))]


def check_autoscaler(arm: "StaticArm | ContinuousArm | ChunkedPrefillArm") -> None:
    """The pool's size is the autoscaler's: a fixed replica count beside it is ambiguous."""
    if arm.autoscaler is not None and arm.deployment is not None \
            and arm.deployment.replicas is not None:
        raise rule_error("deployment.replicas", "an arm with an `autoscaler` sizes its pool "
                                                "with autoscaler.min_replicas/max_replicas; "
                                                "remove deployment.replicas")


class _PooledArm(ConfigModel):
    """The checks of an arm that runs on a replica pool. No fields, so that each arm keeps
    its own fields in its own order (the reference and the echoed config follow it)."""

    @model_validator(mode="after")
    def _one_pool_size(self) -> Self:
        check_autoscaler(cast("StaticArm | ContinuousArm | ChunkedPrefillArm", self))
        return self


class StaticArm(_PooledArm):
    """Static batching: collect a batch, run it until its longest request finishes; finished
    slots keep computing padding and newcomers wait for the next batch."""

    name: str = Field(min_length=1)
    """Arm name, unique within the experiment; labels results and `--set policies.<name>...`."""
    kind: Literal["static"] = "static"
    """Selects this policy."""
    max_batch_size: AtLeastOne = 32
    """Requests per batch."""
    max_wait_s: Annotated[NonNegative, Field(le=3600)] = 0.0
    """How long a partial batch waits for more requests once the first one is queued; at
    most an hour (a longer wait only stretches the run, and its time series, to no end)."""
    max_output_tokens: AtLeastOne = 2048
    """Per-slot output reservation: each slot reserves KV cache for its prompt plus this many
    tokens; requests with a longer output are rejected with a reason."""
    ordering: ArmOrdering = Field(default_factory=FcfsOrdering)
    deployment: ArmDeploymentKey = None
    autoscaler: ArmAutoscalerKey = None


# Keys the iteration-level arms (continuous, chunked_prefill) share.
ArmPreemption = Annotated[Literal["recompute", "swap"], Field(description=(
    "What happens to a preempted request's KV cache: dropped and recomputed later, or "
    "swapped to host memory and back."))]
ArmAdmission = Annotated[AdmissionConfig | None, Field(description=(
    "Admission control on arrival (queue length, predicted wait); null admits everything "
    "that fits."))]
ArmAdmissionReserve = Annotated[AdmissionReserveConfig | None, Field(description=(
    "Conservative (SGLang-style) admission into the batch; null admits a request whenever "
    "its tokens fit and preempts when the cache runs out (vLLM's admit-then-preempt)."))]
ArmPrefixCaching = Annotated[bool | None, Field(description=(
    "Prefix caching for this arm; null follows `kv_cache.prefix_caching` (so one experiment "
    "can compare an arm with and without it on the same traffic)."))]
ArmKVAllocation = Annotated[Literal["paged", "contiguous"] | None, Field(description=(
    "KV allocation for this arm, `paged` or `contiguous`; null follows `kv_cache.allocation` "
    "(so one experiment compares the two on the same memory and traffic)."))]
ArmSpeculative = Annotated[SpeculativeConfig | None, Field(description=(
    "Speculative decoding for this arm; null decodes one token per step."))]
ArmPreemptionVictim = Annotated[Literal["newest", "priority"], Field(description=(
    "Which running request a full KV cache preempts: `newest`, the most recently admitted "
    "(vLLM's default); or `priority`, the lowest priority (highest tenant `priority`), latest "
    "arrival among equals, which goes back into the waiting queue by its priority instead of "
    "first (vLLM's `--scheduling-policy priority`; needs `ordering: {kind: priority}`, "
    "docs/how-to/slo-classes.md)."))]
ArmGateway = Annotated[GatewayConfig | None, Field(description=(
    "A gateway in front of dispatch that rejects requests of the listed tenants (classes) "
    "while the system is overloaded (docs/how-to/slo-classes.md); null admits every arrival "
    "to dispatch."))]


def _victim_rule_needs_priority(arm: "ContinuousArm | ChunkedPrefillArm") -> None:
    """vLLM's one `--scheduling-policy priority` orders the queue and picks the victims; a
    victim re-queued by priority needs a queue ordered by it."""
    if arm.preemption_victim == "priority" and arm.ordering.kind != "priority":
        raise rule_error("preemption_victim", (
            f"priority needs `ordering: {{kind: priority}}` (got ordering {arm.ordering.kind}): "
            "the victim goes back into the waiting queue by its priority"))


class _QueuedArm(_PooledArm):
    """The checks the iteration-level arms (continuous, chunked_prefill) share; no fields."""

    @model_validator(mode="after")
    def _victim_rule_fits_the_ordering(self) -> Self:
        _victim_rule_needs_priority(cast("ContinuousArm | ChunkedPrefillArm", self))
        return self


class ContinuousArm(_QueuedArm):
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
    preemption: ArmPreemption = "recompute"
    admission: ArmAdmission = None
    admission_reserve: ArmAdmissionReserve = None
    prefix_caching: ArmPrefixCaching = None
    kv_tiers: ArmKVTiers = None
    kv_allocation: ArmKVAllocation = None
    ordering: ArmOrdering = Field(default_factory=FcfsOrdering)
    deployment: ArmDeploymentKey = None
    speculative: ArmSpeculative = None
    autoscaler: ArmAutoscalerKey = None
    preemption_victim: ArmPreemptionVictim = "newest"
    gateway: ArmGateway = None


class ChunkedPrefillArm(_QueuedArm):
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
    mixed_prefill: bool = True
    """Mix prefill chunks and decodes in one step (vLLM v1; SGLang's `--enable-mixed-chunk`).
    False is SGLang's default: a step that can schedule prefill (a partial prompt, or a waiting
    request that fits) holds only prefill chunks and the running decodes wait for the next
    step; decoding resumes once no prefill is left. Faster prefill, longer decode stalls."""
    preemption: ArmPreemption = "recompute"
    admission: ArmAdmission = None
    admission_reserve: ArmAdmissionReserve = None
    prefix_caching: ArmPrefixCaching = None
    kv_tiers: ArmKVTiers = None
    kv_allocation: ArmKVAllocation = None
    ordering: ArmOrdering = Field(default_factory=FcfsOrdering)
    deployment: ArmDeploymentKey = None
    speculative: ArmSpeculative = None
    autoscaler: ArmAutoscalerKey = None
    preemption_victim: ArmPreemptionVictim = "newest"
    gateway: ArmGateway = None

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


def _link_bandwidth(value: object) -> object:
    """A bandwidth in GB/s, `nics` or null; anything else is refused in one line."""
    if value is None or value == "nics":
        return value
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise rule_error("", f"expected a number > 0, nics or null (got {value!r})")
    return float(value)


LinkBandwidth = Annotated[float | Literal["nics"] | None, BeforeValidator(_link_bandwidth)]


class KVLinkConfig(ConfigModel):
    """The link that carries each prefilled request's KV cache (prompt tokens × the whole
    model's KV bytes per token) from the prefill pool to the decode pool. One link joins the
    two pools: transfers in flight share its bandwidth equally (processor sharing), and each
    also pays `latency_us` once."""

    bandwidth_gb_s: LinkBandwidth = 50.0
    """Bandwidth between the pools in GB/s (10^9 bytes per second), shared by every transfer
    in flight; 50 is one 400 Gb/s NIC (InfiniBand NDR, RoCE). Null: unlimited, an ideal link
    that separates the cost of the transfers from that of splitting the GPUs. `nics`: each
    prefill replica sends over its own GPUs' NICs, a link of its own of the lower of its
    GPUs' NICs (tensor_parallel x the GPU profile's `inter_node_bandwidth_bytes_per_s`) and a
    decode replica's; the transfers from one prefill replica share its link. Both pools'
    profiles must give the NIC bandwidth."""
    latency_us: NonNegative = 10.0
    """Fixed cost of each transfer in microseconds (setup and propagation), paid after its
    last byte leaves; it does not occupy the link."""
    layerwise: bool = False
    """Pipeline the transfer layer by layer with the prefill (as Splitwise does): once the
    decode replica has reserved its blocks, all but the last layer's share of the bytes
    (1 / num_layers) may cross during the step that completes the prefill, and only the last
    layer's share after it. False: the whole KV is sent after the prefill ends."""


class DisaggregatedArm(ConfigModel):
    """Disaggregated serving (DistServe, Splitwise): a prefill pool computes each prompt and
    its first token (the TTFT); the request's KV cache then crosses `kv_link` to a decode pool,
    which waits for free KV blocks for it and generates the remaining tokens with continuous
    batching. Each pool has its own replicas, GPU, tensor and expert parallelism, data-parallel
    attention and KV capacity (sized from its own GPU memory, or `kv_cache.num_blocks`). The
    experiment's `replicas` does not apply: the arm uses `prefill_replicas ×
    prefill_tensor_parallel + decode_replicas × decode_tensor_parallel` GPUs. Arrivals reach
    the prefill pool through the experiment's `router`; a prefilled request goes to the
    decode replica with the fewest requests (then the most free KV blocks)."""

    name: str = Field(min_length=1)
    """Arm name, unique within the experiment; labels results and `--set policies.<name>...`."""
    kind: Literal["disaggregated"] = "disaggregated"
    """Selects this policy."""
    prefill_replicas: AtLeastOne = 1
    """Replicas in the prefill pool."""
    decode_replicas: AtLeastOne = 1
    """Replicas in the decode pool."""
    prefill_hardware: str | None = Field(default=None, min_length=1)
    """GPU of the prefill pool (a profile name or a path to a profile YAML); null: the
    experiment's `hardware`."""
    decode_hardware: str | None = Field(default=None, min_length=1)
    """GPU of the decode pool; null: the experiment's `hardware`."""
    prefill_tensor_parallel: AtLeastOne | None = None
    """GPUs per prefill replica; null: the experiment's `tensor_parallel`."""
    decode_tensor_parallel: AtLeastOne | None = None
    """GPUs per decode replica; null: the experiment's `tensor_parallel`."""
    prefill_expert_parallel: AtLeastOne | None = None
    """GPUs a prefill replica spreads an MoE model's experts over (it divides the pool's
    tensor parallelism); null: the experiment's `expert_parallel`."""
    decode_expert_parallel: AtLeastOne | None = None
    """GPUs a decode replica spreads the experts over; null: the experiment's
    `expert_parallel`."""
    prefill_data_parallel_attention: bool | None = None
    """Data-parallel attention in the prefill pool (needs its expert parallelism equal to its
    tensor parallelism); null: the experiment's `data_parallel_attention`."""
    decode_data_parallel_attention: bool | None = None
    """Data-parallel attention in the decode pool; null: the experiment's
    `data_parallel_attention`."""
    prefill_token_budget: AtLeastOne | None = None
    """Most prompt tokens a prefill replica computes in one step; null: `max_model_len`.
    Without `prefill_chunked` every prompt is prefilled whole in one step (prompts batched up
    to the budget), so a prompt longer than the budget is rejected
    (`prompt_exceeds_token_budget`)."""
    prefill_chunked: bool = False
    """Chunked prefill in the prefill pool: a prompt longer than what is left of the budget is
    spread over several steps (the `chunked_prefill` arm's rule). False: whole prompts, as
    the `continuous` arm."""
    prefill_max_num_seqs: AtLeastOne = 256
    """Most prompts a prefill replica works on at once."""
    decode_max_num_seqs: AtLeastOne = 256
    """Most sequences decoding at once on a decode replica; a request whose KV has arrived
    waits for a free slot."""
    decode_preemption: Literal["recompute", "swap"] = "recompute"
    """What a decode replica does when its KV cache runs out: drop the newest request's KV
    and recompute it there (prompt and generated tokens), or swap it to host memory."""
    kv_link: KVLinkConfig = Field(default_factory=KVLinkConfig)
    """The link between the pools."""

    autoscaler: DisaggregatedAutoscalerConfig | None = None
    """Scale the prefill and the decode pool separately during the run (prefill against a
    TTFT target, decode against an ITL target; docs/how-to/autoscaling.md); null: the fixed
    `prefill_replicas` and `decode_replicas`, which may not be set beside it."""

    @model_validator(mode="before")
    @classmethod
    def _one_size_per_pool(cls, data: object) -> object:
        # Each pool's size is its scaler's: a fixed count beside it is ambiguous.
        if isinstance(data, dict) and data.get("autoscaler") is not None:
            for key in ("prefill_replicas", "decode_replicas"):
                if key in data:
                    raise rule_error(key, "an arm with an `autoscaler` sizes its pools with "
                                          "autoscaler.prefill and autoscaler.decode "
                                          f"(min_replicas/max_replicas); remove {key}")
        return data


Arm = Annotated[StaticArm | ContinuousArm | ChunkedPrefillArm | DisaggregatedArm,
                Field(discriminator="kind")]
