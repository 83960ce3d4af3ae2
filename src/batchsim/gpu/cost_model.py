"""The roofline cost of one engine step (docs/design.md §3), cheap enough to call every simulated
step.

Each GEMM is bound by its compute time or its memory time: with few tokens the weights
streaming from HBM dominate (why batching decode is nearly free), with many tokens the FLOPs do
(why prefill is expensive). Attention adds prefill FLOPs and decode KV reads; tensor
parallelism adds two all-reduces per layer; every step pays a fixed and a per-sequence overhead.
The per-operator formulas are `batchsim.gpu.roofline`'s, the functions the calibration fit scores
against measurements; this module applies them to a model's shapes and caches what it can.

All shapes are per GPU: tensor parallelism splits N of the QKV and gate/up projections and K of
the output and down projections (Megatron-style), and the LM head by vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, TypeVar, cast

import numpy as np

from batchsim.gpu.attention_layers import STATE_ELEMENT_BYTES
from batchsim.gpu.dtypes import (
    ACTIVATION_BYTES,
    bytes_per_element,
    check_expert_dtype,
    check_weight_dtype,
)
from batchsim.gpu.gemm_group import GemmGroup
from batchsim.gpu.hardware import GpuProfile
from batchsim.gpu.hybrid_cost import HybridAttentionCost
from batchsim.gpu.model_spec import ModelSpec
from batchsim.gpu.moe_cost import LayerStackCost, attention_shape
from batchsim.gpu.moe_layout import Parallelism, check_parallelism, kv_bytes_per_token_per_gpu
from batchsim.gpu.network import group_allreduce_seconds, group_span, span_problem
from batchsim.gpu.roofline import (
    DecodeAttentionTerms,
    StepAround,
    decode_attention_from_terms,
    decode_attention_over_steps,
    decode_attention_step_list,
    decode_attention_terms,
    prefill_attention_shape,
    prefill_attention_variable_seconds,
)

# The caches hold one entry per distinct token count; a long run with chunked prefill sees at
# most a few thousand, so the bound only guards against pathological inputs.
_MAX_CACHE_ENTRIES = 100_000
# Token counts priced together when the layer cache misses.
_LAYER_BLOCK = 256
# Up to this many steps a stretch is priced in plain Python (`decode_step_list`), past it by
# numpy, whose fixed cost per call only pays for long stretches: the two break even here
# (measured: docs/performance.md, items 13 and 35).
_PYTHON_DECODE_MAX_STEPS = 38

_FloatOrArray = TypeVar("_FloatOrArray", float, np.ndarray)


@dataclass(frozen=True, slots=True)
class StepCost:
    """Duration of one step and where it went; the four parts sum to `seconds`."""

    seconds: float
    linear_s: float  # QKV/O/MLP GEMMs of every layer, plus the LM head
    attention_s: float
    communication_s: float  # tensor-parallel all-reduces
    overhead_s: float  # c0 + c1 * num_seqs
    compute_bound_linear: bool  # the layer GEMMs' FLOP time exceeded their memory time


class RooflineCostModel:
    """Step and swap times of one replica: `model` on `tensor_parallel` GPUs of kind `gpu`."""

    __slots__ = (
        "_allreduce_bytes_per_token",
        "_allreduce_count",
        "_attention_launch_s",
        "_attention_peak_flops",
        "_attention_shape",
        "_data_parallel_ranks",
        "_decode_flops_per_kv_token",
        "_decode_head_dim",
        "_decode_kv_heads",
        "_decode_q_heads",
        "_decode_terms_cache",
        "_efficiency",
        "_graph_decode_only",
        "_graph_max_tokens",
        "_graph_tokens",
        "_head_dim",
        "_hybrid",
        "_kv_element_bytes",
        "_kv_heads",
        "_layer_cache",
        "_layer_gemms",
        "_layer_stack",
        "_layers",
        "_lm_head_cache",
        "_lm_head_gemm",
        "_memory_bw",
        "_per_seq_overhead_s",
        "_q_heads",
        "_sm_count",
        "_step_overhead_s",
        "gpu",
        "kv_bytes_per_token_per_gpu",
        "kv_dtype",
        "model",
        "tensor_parallel",
        "weight_dtype",
    )

    def __init__(
        self,
        model: ModelSpec,
        gpu: GpuProfile,
        *,
        tensor_parallel: int,
        weight_dtype: str,
        kv_dtype: str,
        expert_parallel: int = 1,
        data_parallel_attention: bool = False,
        moe_imbalance: float = 1.0,
        expert_dtype: str | None = None,
    ) -> None:
        check_weight_dtype(weight_dtype)
        check_expert_dtype(expert_dtype, model_name=model.name,
                           routed_experts=model.moe is not None)
        gpu.check_kv_dtype(kv_dtype)
        layout = Parallelism(tensor_parallel, expert_parallel, data_parallel_attention)
        check_parallelism(model, layout)
        problem = span_problem(gpu, tensor_parallel, f"tensor_parallel={tensor_parallel}")
        if problem is not None:  # plan_memory refuses it first, with the experiment's key
            raise ValueError(problem)
        self.model = model
        self.gpu = gpu
        self.tensor_parallel = tp = tensor_parallel
        self.weight_dtype = weight_dtype
        self.kv_dtype = kv_dtype
        eff = gpu.efficiency
        h, d, layers = model.hidden_size, model.head_dim, model.num_layers
        q_heads = model.num_heads // layout.attention_split
        kv_heads = model.kv_heads_per_gpu(layout.attention_split)
        mlp_width = math.ceil(model.intermediate_size / tp)
        # MoE and MLA layers, and data-parallel attention, are priced by batchsim.gpu.moe_cost.
        self._layer_stack = None
        if (model.moe is not None or model.mla is not None or data_parallel_attention
                or model.num_linear_layers):
            self._layer_stack = LayerStackCost(model, gpu, layout, weight_dtype=weight_dtype,
                                               imbalance=moe_imbalance, expert_dtype=expert_dtype)

        self._layer_gemms = GemmGroup(
            shapes=(
                ((q_heads + 2 * kv_heads) * d, h),  # fused QKV, column-parallel
                (h, q_heads * d),  # attention output, row-parallel
                (2 * mlp_width, h),  # fused gate/up, column-parallel
                (h, mlp_width),  # down, row-parallel
            ),
            repeats=layers,
            peak_flops=gpu.peak_flops.for_weights(weight_dtype),
            weight_bytes=bytes_per_element(weight_dtype),
            gpu=gpu,
            efficiency=eff.for_weights(
                gpu.peak_flops.gemm_keys_for(weight_dtype, eff.gemm_by_weights)),
        )
        # The LM head stays bf16 in quantised checkpoints, so it streams and computes as bf16.
        self._lm_head_gemm = GemmGroup(
            shapes=((math.ceil(model.vocab_size / layout.attention_split), h),),
            repeats=1,
            peak_flops=gpu.peak_flops.bf16,
            weight_bytes=ACTIVATION_BYTES,
            gpu=gpu,
            efficiency=eff,
        )
        self._layer_cache: dict[int, tuple[float, float, bool]] = {}
        self._lm_head_cache: dict[int, float] = {}
        # Per batch size: the busiest rank's share of it and its decode-attention constants.
        self._decode_terms_cache: dict[int, tuple[float, DecodeAttentionTerms]] = {}

        # Attention is priced per layer by gpu.roofline (the functions the fit uses), times L.
        self._efficiency = eff
        self._attention_launch_s = eff.attention_launch_s
        self._attention_peak_flops = gpu.peak_flops.bf16
        self._memory_bw = gpu.memory_bandwidth_bytes_per_s
        # Full-attention layers; a hybrid model's others are priced by gpu/hybrid_cost.py.
        self._layers = float(model.num_full_attention_layers)
        self._hybrid = _hybrid_cost(model, gpu, layout) if model.is_hybrid else None
        shape = self._attention_shape = attention_shape(model, layout)
        self._q_heads = shape.prefill_q_heads
        self._kv_heads = shape.prefill_kv_heads
        self._head_dim = shape.prefill_head_dim
        self._decode_q_heads = shape.decode_q_heads
        self._decode_kv_heads = shape.decode_kv_heads
        self._decode_head_dim = shape.decode_head_dim
        self._decode_flops_per_kv_token = shape.decode_flops_per_kv_token
        self._sm_count = gpu.parallel_units
        self._kv_element_bytes = bytes_per_element(kv_dtype)
        self.kv_bytes_per_token_per_gpu = kv_bytes_per_token_per_gpu(model, layout, kv_dtype)

        # Two all-reduces per layer (after attention and after the MLP), none without TP.
        self._allreduce_count = 2 * layers if tp > 1 else 0
        self._allreduce_bytes_per_token = h * ACTIVATION_BYTES
        self._step_overhead_s = eff.step_overhead_s
        self._per_seq_overhead_s = eff.per_seq_overhead_s
        self._data_parallel_ranks = shape.data_parallel_ranks
        padding = gpu.graph_padding
        self._graph_tokens = [] if padding is None else padding.table()
        self._graph_max_tokens = len(self._graph_tokens) - 1  # -1: no graphs, nothing padded
        self._graph_decode_only = padding is not None and padding.decode_only

    def step_time(
        self, new_tokens: np.ndarray, context_tokens: np.ndarray, num_emitting: int,
        verifying: np.ndarray | None = None,
    ) -> StepCost:
        """Cost of one step.

        `new_tokens[i]` (>= 1) tokens are computed for sequence i on top of the
        `context_tokens[i]` already in its KV cache; `num_emitting` rows run the LM head.
        `verifying[i]` marks a sequence verifying speculative proposals: its few query tokens
        run in the decode attention kernel (vLLM sends requests of up to 1 + k query tokens
        there when speculating), reading its cache once, not in the prefill kernel.
        """
        num_seqs = new_tokens.shape[0]
        if num_seqs == 0:
            raise ValueError("step_time of an empty step: a step needs at least one sequence")
        if context_tokens.shape != new_tokens.shape:
            raise ValueError(
                f"new_tokens has shape {new_tokens.shape} but context_tokens {context_tokens.shape}"
            )
        total_new = int(np.add.reduce(new_tokens))  # (the ufunc: `.sum()` wraps it in Python)
        if total_new <= 0:
            raise ValueError("step_time of a step with no new tokens")

        linear_s, communication_s, overhead_s, compute_bound = self._fixed_parts(
            total_new, num_emitting, num_seqs)
        if verifying is not None and verifying.any():
            attention_s = self._verify_attention_s(new_tokens, context_tokens, verifying)
        else:
            attention_s = self._attention_s(new_tokens, context_tokens, total_new, num_seqs)
        if self._hybrid is not None:
            attention_s += self._hybrid_attention_s(new_tokens.tolist(),
                                                    context_tokens.tolist())
        return StepCost(
            seconds=linear_s + attention_s + communication_s + overhead_s,
            linear_s=linear_s,
            attention_s=attention_s,
            communication_s=communication_s,
            overhead_s=overhead_s,
            compute_bound_linear=compute_bound,
        )

    def step_seconds(self, new_tokens: list[int], context_tokens: list[int],
                     num_emitting: int) -> float:
        """`step_time(...).seconds` of a step given as lists (no verification), the same number
        bit for bit: the engine prices most single steps (an arrival's prefill with a few
        decodes) this way, without building arrays or a `StepCost`. A large batch, or one
        whose shape the list path does not cover, goes through `step_time`."""
        num_seqs = len(new_tokens)
        if (num_seqs > _PYTHON_SUMS_MAX_SEQS or len(context_tokens) != num_seqs
                or self._hybrid is not None):
            return self._step_time_of_lists(new_tokens, context_tokens, num_emitting)
        total_new = sum(new_tokens)
        sums = _prefill_sums_of_lists(new_tokens, context_tokens)
        if total_new <= 0 or (not sums.num_prefills and total_new != num_seqs):
            # No new tokens (an error), or a zero-token sequence: the general path decides.
            return self._step_time_of_lists(new_tokens, context_tokens, num_emitting)
        linear_s, communication_s, overhead_s, _ = self._fixed_parts(
            total_new, num_emitting, num_seqs)
        attention_s = self._attention_from_sums(sums, num_seqs)
        return linear_s + attention_s + communication_s + overhead_s

    def _step_time_of_lists(self, new_tokens: list[int], context_tokens: list[int],
                            num_emitting: int) -> float:
        return self.step_time(np.array(new_tokens, dtype=np.int64),
                              np.array(context_tokens, dtype=np.int64), num_emitting).seconds

    def _fixed_parts(self, total_new: int, num_emitting: int,
                     num_seqs: int) -> tuple[float, float, float, bool]:
        """What a step costs besides attention: the layers' GEMMs and the LM head, the
        all-reduces, and the per-step overhead (linear, communication, overhead, bound).

        A step the engine runs as a CUDA graph computes its layers at the graph's size
        (gpu/graph_padding.py); its LM head runs on the emitting rows only."""
        if total_new <= self._graph_max_tokens and (
                total_new == num_seqs or not self._graph_decode_only):
            total_new = self._graph_tokens[total_new]
        layers = self._layer_cache.get(total_new)
        if layers is None:
            layers = self._layer_cost(total_new)
        linear_s, communication_s, compute_bound = layers
        if num_emitting > 0:
            lm_head_s = self._lm_head_cache.get(num_emitting)
            if lm_head_s is None:
                lm_head_s = self._lm_head_cost(num_emitting)
            linear_s += lm_head_s
        # Each data-parallel rank runs its own scheduler over its own sequences (vLLM's engine
        # core per rank, SGLang's scheduler per rank): the busiest one's share sets the step's
        # per-sequence time.
        per_rank = (num_seqs if self._data_parallel_ranks == 1
                    else max(num_seqs / self._data_parallel_ranks, 1.0))
        overhead_s = self._step_overhead_s + self._per_seq_overhead_s * per_rank
        return linear_s, communication_s, overhead_s, compute_bound

    def swap_time(self, num_tokens: int) -> float:
        """Seconds to copy `num_tokens` tokens of KV one way over PCIe.

        Each GPU moves only its own shard, all GPUs of the replica in parallel.
        """
        if num_tokens <= 0:
            return 0.0
        return (
            self.gpu.p2p_latency_s
            + num_tokens * self.kv_bytes_per_token_per_gpu / self.gpu.pcie_bandwidth_bytes_per_s
        )

    def _attention_s(
        self, new_tokens: np.ndarray, context_tokens: np.ndarray, total_new: int, num_seqs: int
    ) -> float:
        sums = _prefill_sums(new_tokens, context_tokens)
        if not sums.num_prefills and total_new != num_seqs:  # not every q_i == 1
            decode_kv_tokens = self._decode_kv_tokens(new_tokens, context_tokens)
            return self._decode_attention_s(decode_kv_tokens, num_seqs)
        return self._attention_from_sums(sums, num_seqs)

    def _attention_from_sums(self, sums: _PrefillSums, num_seqs: int) -> float:
        """Attention of a step from its sums: a mixed or prefill step, or a pure-decode one
        (no prefills, every q_i == 1)."""
        if not sums.num_prefills:  # the common pure-decode step
            decode_kv_tokens = float(sums.all_context) + num_seqs
            return self._decode_attention_s(decode_kv_tokens, num_seqs)

        # One attention kernel per layer serves the whole mixed batch (FlashAttention varlen):
        # one launch, the prefill sequences' FLOPs and traffic, the decode sequences' KV reads.
        new_sum = float(sums.new)
        flops, head_tokens, traffic = prefill_attention_shape(
            new_sum, float(sums.context), float(sums.new_times_context),
            float(sums.new_squared), q_heads=self._q_heads,
            kv_heads=self._kv_heads, head_dim=self._head_dim, kv_bytes=self._kv_element_bytes,
        )
        share = self._attention_shape.local_share(num_seqs)  # 1 unless data-parallel
        per_layer_s = prefill_attention_variable_seconds(
            flops * share, head_tokens * share, traffic * share,
            peak_flops=self._attention_peak_flops,
            memory_bw=self._memory_bw, eff=self._efficiency,
        )
        if self._layer_stack is not None:  # MLA: cached latents re-expanded for the chunk
            per_layer_s += self._layer_stack.mla_context_expansion_s(float(sums.context) * share)
        num_decode = num_seqs - sums.num_prefills
        if num_decode:
            # Σ (c_i + 1) over the decode sequences: all context + count, minus the prefills'.
            decode_kv_tokens = float(sums.all_context) - float(sums.context)
            per_layer_s += self._decode_per_layer_s(decode_kv_tokens + num_decode, num_decode)
        return self._layers * (self._attention_launch_s + per_layer_s)

    def _verify_attention_s(self, new_tokens: np.ndarray, context_tokens: np.ndarray,
                            verifying: np.ndarray) -> float:
        """Attention of a step in which some sequences verify proposals: the rest as usual,
        plus the verifying ones in the decode kernel with one launch per layer in all."""
        queries = new_tokens[verifying]
        kv_tokens = context_tokens[verifying] + queries
        per_layer_s = self._decode_per_layer_s(
            float(kv_tokens.sum()), queries.shape[0],
            query_kv_tokens=float(np.dot(queries, kv_tokens)))
        rest = ~verifying
        if rest.any():
            others = self._attention_s(new_tokens[rest], context_tokens[rest],
                                       int(new_tokens[rest].sum()), int(rest.sum()))
            return others + self._layers * per_layer_s
        return self._layers * (self._attention_launch_s + per_layer_s)

    def decode_step_seconds(
        self, new_tokens: np.ndarray, context_tokens: np.ndarray, num_emitting: int,
        num_steps: int,
    ) -> np.ndarray:
        """Durations of `num_steps` consecutive decode steps of one unchanged batch.

        Step j is the step `step_time` would cost with every context grown by j: the linear
        layers, communication and overhead are the same each step, and only the KV read grows.
        Computed with the same operations in the same order as `step_time`, so each element
        equals `step_time(...).seconds` exactly — the fast path's results depend on that.
        """
        num_seqs = new_tokens.shape[0]
        # Checked and summed as Python lists: batches are tens of sequences, where each numpy
        # call costs more than the arithmetic (the sums are exact integers either way).
        if new_tokens.tolist().count(1) != num_seqs:
            raise ValueError("decode_step_seconds needs a decode-only batch (one token each)")
        linear_s, communication_s, overhead_s, _ = self._fixed_parts(num_seqs, num_emitting,
                                                                     num_seqs)
        # Σ (c_i + 1) at step j: exact integers, as `step_time` counts them.
        first = sum(context_tokens.tolist()) + num_seqs
        kv_tokens = np.arange(first, first + num_seqs * num_steps, num_seqs, dtype=np.int64)
        share, terms = self._decode_terms(num_seqs)
        if share == 1.0 and not self._decode_flops_per_kv_token:
            # In place on the new array: `x += y` is `x + y`, and + and * commute, so these
            # are `layers · (launch + per_layer)` exactly as `step_time` adds them.
            total_s = decode_attention_over_steps(kv_tokens, terms)
            total_s += self._attention_launch_s
            total_s *= self._layers
        else:
            total_s = self._decode_attention_s(kv_tokens.astype(np.float64), num_seqs)
        if self._hybrid is not None:  # as `step_time` adds it to the full layers' attention
            total_s += self._hybrid.decode_steps_s(context_tokens.tolist(), num_steps,
                                                   self._decode_per_layer_s)
        total_s += linear_s  # linear + attention
        if communication_s:  # x + 0.0 is x: skipped without tensor parallelism
            total_s += communication_s
        total_s += overhead_s
        return total_s

    def decode_step_list(
        self, new_tokens: list[int], context_tokens: list[int], num_emitting: int,
        num_steps: int, within_s: float = math.inf,
    ) -> list[float]:
        """`decode_step_seconds` of a batch given as lists, as a list, the same numbers bit for
        bit: the engine's stretch works on plain numbers. A short stretch (the usual one: it
        is cut by the next arrival or finish) is priced in plain Python, which costs less
        than numpy's per-call overhead; a long one, or data-parallel or MLA attention, by
        `decode_step_seconds`.

        `within_s`: the caller needs no step after the one that ends more than `within_s`
        after the first starts (the next arrival's time), so pricing may stop a step after it.
        """
        num_seqs = len(new_tokens)
        share, terms = self._decode_terms(num_seqs)
        if share != 1.0 or self._decode_flops_per_kv_token or self._hybrid is not None:
            return self._decode_step_array(new_tokens, context_tokens, num_emitting, num_steps)
        if num_steps > _PYTHON_DECODE_MAX_STEPS:
            if within_s == math.inf:
                return self._decode_step_array(new_tokens, context_tokens, num_emitting,
                                               num_steps)
            # In Python up to the switch, in case the arrival comes within it; the rest in
            # numpy, as the steps of a batch whose contexts are that many tokens longer.
            head = self.decode_step_list(new_tokens, context_tokens, num_emitting,
                                         _PYTHON_DECODE_MAX_STEPS, within_s)
            if len(head) < _PYTHON_DECODE_MAX_STEPS or _adds_up_past(head[:-1], within_s):
                return head  # it stopped: the arrival comes within these steps
            later = [context + _PYTHON_DECODE_MAX_STEPS for context in context_tokens]
            return head + self._decode_step_array(new_tokens, later, num_emitting,
                                                  num_steps - _PYTHON_DECODE_MAX_STEPS)
        if new_tokens.count(1) != num_seqs:
            raise ValueError("decode_step_list needs a decode-only batch (one token each)")
        linear_s, communication_s, overhead_s, _ = self._fixed_parts(num_seqs, num_emitting,
                                                                     num_seqs)
        # Σ (c_i + 1) at step j, as `step_time` counts it; then `step_time`'s sum in its order
        # (adding a zero communication time changes nothing: x + 0.0 is x).
        first = sum(context_tokens) + num_seqs
        around = StepAround(linear_s, self._layers, self._attention_launch_s, communication_s,
                            overhead_s)
        return decode_attention_step_list(first, num_seqs, num_steps, terms, around, within_s)

    def _decode_step_array(self, new_tokens: list[int], context_tokens: list[int],
                           num_emitting: int, num_steps: int) -> list[float]:
        return self.decode_step_seconds(np.array(new_tokens, dtype=np.int64),
                                        np.array(context_tokens, dtype=np.int64),
                                        num_emitting, num_steps).tolist()

    def _hybrid_attention_s(self, new_tokens: list[int], context_tokens: list[int]) -> float:
        """A hybrid model's sliding-window and linear layers in one step."""
        assert self._hybrid is not None
        num_seqs = len(new_tokens)

        def prefill_per_layer(new: float, context: float, new_times_context: float,
                              new_squared: float) -> float:
            flops, head_tokens, traffic = prefill_attention_shape(
                new, context, new_times_context, new_squared, q_heads=self._q_heads,
                kv_heads=self._kv_heads, head_dim=self._head_dim,
                kv_bytes=self._kv_element_bytes)
            share = self._attention_shape.local_share(num_seqs)
            return prefill_attention_variable_seconds(
                flops * share, head_tokens * share, traffic * share,
                peak_flops=self._attention_peak_flops, memory_bw=self._memory_bw,
                eff=self._efficiency)

        return self._hybrid.step_s(new_tokens, context_tokens, self._decode_per_layer_s,
                                   prefill_per_layer)

    def _decode_attention_s(self, kv_tokens: _FloatOrArray, num_seqs: int) -> _FloatOrArray:
        """Decode attention of `num_seqs` sequences reading `kv_tokens` cached tokens in all
        layers (scalar, or an array with one element per step)."""
        return self._layers * (
            self._attention_launch_s + self._decode_per_layer_s(kv_tokens, num_seqs)
        )

    def _decode_per_layer_s(self, kv_tokens: _FloatOrArray, num_seqs: int,
                            query_kv_tokens: float | None = None) -> _FloatOrArray:
        """`query_kv_tokens`: Σ queries × cached tokens they attend to, when sequences bring
        more than one query each (verification); the FLOPs grow with it, the reads do not."""
        share, terms = self._decode_terms(num_seqs)
        # x * 1.0 is x: skipped without data-parallel attention, the common case.
        seconds = decode_attention_from_terms(
            kv_tokens if share == 1.0 else kv_tokens * share, terms)
        if not self._decode_flops_per_kv_token:
            return seconds
        # MLA's absorbed decode does enough FLOPs per latent byte to be compute-bound when a
        # GPU runs many heads; priced at the prefill kernel's fitted FLOP efficiency.
        attended = kv_tokens if query_kv_tokens is None else query_kv_tokens
        flops_s = attended * share * self._decode_flops_per_kv_token / (
            self._attention_peak_flops * self._efficiency.attention_compute_efficiency)
        if isinstance(seconds, np.ndarray):
            return cast(_FloatOrArray, np.maximum(seconds, flops_s))
        return max(seconds, flops_s)

    def _decode_terms(self, num_seqs: int) -> tuple[float, DecodeAttentionTerms]:
        """The share of `num_seqs` sequences the busiest data-parallel rank serves, and the
        constants of its decode-attention kernel, cached per batch size."""
        cached = self._decode_terms_cache.get(num_seqs)
        if cached is None:
            if len(self._decode_terms_cache) >= _MAX_CACHE_ENTRIES:
                self._decode_terms_cache.clear()
            share = self._attention_shape.local_share(num_seqs)
            terms = decode_attention_terms(
                num_seqs * share, q_heads=self._decode_q_heads, kv_heads=self._decode_kv_heads,
                head_dim=self._decode_head_dim, kv_bytes=self._kv_element_bytes,
                memory_bw=self._memory_bw, sm_count=self._sm_count, eff=self._efficiency,
            )
            cached = self._decode_terms_cache[num_seqs] = (share, terms)
        return cached

    @staticmethod
    def _decode_kv_tokens(new_tokens: np.ndarray, context_tokens: np.ndarray) -> float:
        """Σ (c_i + 1) over the decode sequences (q_i == 1)."""
        is_decode = new_tokens == 1
        return float(np.dot(is_decode, context_tokens)) + float(np.count_nonzero(is_decode))

    def _layer_cost(self, total_new: int) -> tuple[float, float, bool]:
        """The layers' cost at `total_new` tokens, priced with its neighbours in one go.

        Prefill steps see thousands of distinct token counts; pricing a block of
        `_LAYER_BLOCK` counts in one vectorised call costs about what one count did alone.
        Element-wise, the numbers equal the scalar formula's exactly.
        """
        if len(self._layer_cache) >= _MAX_CACHE_ENTRIES:
            self._layer_cache.clear()
        first = max(1, total_new - total_new % _LAYER_BLOCK)
        tokens = np.arange(first, first + _LAYER_BLOCK, dtype=np.float64)
        if self._layer_stack is not None:
            linear_s, communication_s, compute_bound = self._layer_stack.cost_many(tokens)
        else:
            linear_s, compute_bound = self._layer_gemms.cost_many(tokens)
            communication_s = np.zeros_like(tokens)
        if self._allreduce_count and self._layer_stack is None:
            communication_s = self._allreduce_count * group_allreduce_seconds(
                tokens * self._allreduce_bytes_per_token,
                group_span(self.gpu, self.tensor_parallel),
                gpu=self.gpu,
                eff=self.gpu.efficiency,
            )
        for count, linear, communication, bound in zip(
            range(first, first + _LAYER_BLOCK), linear_s.tolist(), communication_s.tolist(),
            compute_bound.tolist(), strict=True,
        ):
            self._layer_cache[count] = (linear, communication, bound)
        return self._layer_cache[total_new]

    def _lm_head_cost(self, num_emitting: int) -> float:
        emitting = float(num_emitting)
        if self._layer_stack is not None:  # data-parallel: the busiest rank's sequences
            emitting = float(self._layer_stack.local_tokens(np.array([emitting]))[0])
        lm_head_s, _ = self._lm_head_gemm.cost(emitting)
        if len(self._lm_head_cache) >= _MAX_CACHE_ENTRIES:
            self._lm_head_cache.clear()
        self._lm_head_cache[num_emitting] = lm_head_s
        return lm_head_s


def _hybrid_cost(model: ModelSpec, gpu: GpuProfile, layout: Parallelism) -> HybridAttentionCost:
    """The hybrid layers' constants on one GPU: linear layers' heads split like attention's
    (whole sequences per rank under data-parallel attention, which `local_share` prices)."""
    kinds = model.layer_kinds
    assert kinds is not None
    spec = kinds.linear_spec
    split = 1 if layout.data_parallel_attention else layout.attention_split
    state = 0.0 if spec is None else spec.state_elements() * STATE_ELEMENT_BYTES / split
    flops = 0.0 if spec is None else spec.flops_per_token() / split
    return HybridAttentionCost(
        sliding_layers=float(kinds.sliding), window=kinds.window,
        linear_layers=float(kinds.linear), state_bytes_per_layer=state,
        linear_flops_per_token=flops, launch_s=gpu.efficiency.attention_launch_s,
        memory_bw=gpu.memory_bandwidth_bytes_per_s, peak_flops=gpu.peak_flops.bf16,
        eff=gpu.efficiency)


def _adds_up_past(durations: list[float], within_s: float) -> bool:
    """Whether `durations`, added up in order as `decode_attention_step_list` adds them,
    exceed `within_s`."""
    total_s = 0.0
    for duration in durations:
        total_s += duration
    return total_s > within_s


class _PrefillSums(NamedTuple):
    """Integer sums over a step's prefill sequences (q > 1 new tokens on c cached ones)."""

    new: int  # Σ q
    context: int  # Σ c
    new_times_context: int  # Σ q·c
    new_squared: int  # Σ q²
    num_prefills: int
    all_context: int  # Σ c over every sequence of the step


# Up to this many sequences the sums are taken in plain Python: for the small batches of most
# steps numpy's per-call cost exceeds the arithmetic. The sums are exact integers either way.
_PYTHON_SUMS_MAX_SEQS = 64


def _prefill_sums(new_tokens: np.ndarray, context_tokens: np.ndarray) -> _PrefillSums:
    if new_tokens.shape[0] > _PYTHON_SUMS_MAX_SEQS:
        is_prefill = new_tokens > 1
        q, c = new_tokens[is_prefill], context_tokens[is_prefill]
        return _PrefillSums(int(q.sum()), int(c.sum()), int(np.dot(q, c)), int(np.dot(q, q)),
                            int(q.shape[0]), int(context_tokens.sum()))
    return _prefill_sums_of_lists(new_tokens.tolist(), context_tokens.tolist())


def _prefill_sums_of_lists(new_tokens: list[int], context_tokens: list[int]) -> _PrefillSums:
    """`_prefill_sums` in plain Python (exact integers, as numpy's)."""
    new = context = new_times_context = new_squared = count = all_context = 0
    for q, c in zip(new_tokens, context_tokens, strict=True):
        all_context += c
        if q > 1:
            new += q
            context += c
            new_times_context += q * c
            new_squared += q * q
            count += 1
    return _PrefillSums(new, context, new_times_context, new_squared, count, all_context)
