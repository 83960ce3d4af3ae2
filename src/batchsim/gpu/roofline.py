"""Per-operator times of the roofline: the one definition the cost model and the fit share.

`batchsim.gpu.cost_model` prices a step by calling these functions with a model's shapes; the
calibration fit (`sim.calibration`) calls the same functions on measured operator rows. So the
held-out error a profile reports is the error of exactly the formulas the simulator runs.

Every function takes plain numbers or numpy arrays (one element per measured row) and uses only
arithmetic and numpy ufuncs, so a scalar call and an array call do the same operations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from batchsim.gpu.dtypes import ACTIVATION_BYTES
from batchsim.gpu.hardware import RooflineEfficiency

Real = Any
"""A float (the cost model prices one step) or a numpy array (the fit: one element per measured
row). numpy's stubs cannot type arithmetic on the union elementwise, hence Any."""


GEMM_TILE_M = 128.0
GEMM_TILE_N = 256.0
"""Output tile (tokens x features) the wave term counts: of 64 x 128, 128 x 128, 128 x 256 and
256 x 128 it fits the A100, H100 and H200 tables best, and it reproduces the A100's steps (a
1024 x 4096 GEMM takes twice as long at N = 3584 as at N = 3072: its tiles pass 108, the SMs)."""
GEMM_MAX_K_SPLITS = 16
GEMM_MIN_SPLIT_K = 1024.0
"""The wave term lets the library cut K into at most 16 pieces of at least 1024 to even out
its waves (fixed, not fitted: the count jumps with K, which a gradient fit cannot follow)."""
_K_SPLITS = np.arange(1.0, GEMM_MAX_K_SPLITS + 1.0)

DECODE_SPLIT_MIN_TOKENS = 128.0
"""KV tokens one thread block of a FlashAttention decode kernel reads per tile (head_dim 128):
a context no longer than one tile has nothing to split, so no combine kernel runs."""


def overlap(a: Real, b: Real, power: float) -> Real:
    """(a^p + b^p)^(1/p): p = 1 runs the two parts back to back, large p overlaps them fully.

    Near the ridge point a kernel is neither purely compute- nor memory-bound and takes longer
    than either bound alone; the fitted power says by how much.
    """
    return (a**power + b**power) ** (1.0 / power)


def overlap_linear(a: Real, b: Real, fraction: float) -> Real:
    """max(a, b) + fraction · min(a, b): the smaller part hides under the larger but for
    `fraction` of it.

    Built from selections and IEEE arithmetic only, so a float and a numpy array give
    bit-identical results: the decode path relies on that (numpy's vectorised powers need not
    round like the C library's).
    """
    return _maximum(a, b) + fraction * _minimum(a, b)


def _maximum(a: Real, b: Real) -> Real:
    """Elementwise max: numpy's for arrays, Python's (cheaper) for plain numbers."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.maximum(a, b)
    return max(a, b)


def _minimum(a: Real, b: Real) -> Real:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.minimum(a, b)
    return min(a, b)


def gemm_wave_efficiency(m: Real, n: Real, k: Real, *, sm_count: float) -> Real:
    """Busy fraction of the SMs over the waves of output tiles, in (0, 1].

    Tiles run one per SM in waves: 112 tiles on 108 SMs take two waves, the second nearly
    empty. The library may cut K into pieces (`GEMM_MIN_SPLIT_K`, `GEMM_MAX_K_SPLITS`) to
    even the waves out; the best such split is taken.
    """
    tiles = np.ceil(m / GEMM_TILE_M) * np.ceil(n / GEMM_TILE_N)
    waves = np.asarray(tiles)[..., None] * _K_SPLITS / sm_count
    allowed = np.maximum(1.0, np.floor(np.asarray(k) / GEMM_MIN_SPLIT_K))[..., None]
    return np.max(np.where(allowed >= _K_SPLITS, waves / np.ceil(waves), 0.0), axis=-1)


def gemm_parts(
    m: Real,
    n: Real,
    k: Real,
    *,
    peak_flops: float,
    memory_bw: float,
    weight_bytes: float,
    sm_count: float,
    eff: RooflineEfficiency,
) -> tuple[Real, Real]:
    """(compute seconds, memory seconds) of an (M x K) @ (K x N) GEMM before overlap.

    The FLOP rate ramps with M (small M cannot fill the tensor cores) and with K (each tile
    pays a fixed pipeline fill and epilogue, worth `gemm_ramp_k` steps of its K loop), and
    the last, partly empty wave of tiles costs a fitted share of a full one.
    """
    flops_rate = (
        peak_flops * eff.gemm_peak_efficiency * m / (m + eff.gemm_ramp_tokens)
        * k / (k + eff.gemm_ramp_k)
    )
    waves = gemm_wave_efficiency(m, n, k, sm_count=sm_count)
    compute_s = 2.0 * m * n * k / flops_rate * waves ** (-eff.gemm_wave_exponent)
    # The weights stream once; activations go in (M x K) and out (M x N).
    memory_s = (n * k * weight_bytes + m * (n + k) * ACTIVATION_BYTES) / (
        memory_bw * eff.memory_efficiency
    )
    return compute_s, memory_s


def gemm_seconds(
    m: Real,
    n: Real,
    k: Real,
    *,
    peak_flops: float,
    memory_bw: float,
    weight_bytes: float,
    sm_count: float,
    eff: RooflineEfficiency,
) -> Real:
    """One GEMM: launch + max(overlapped compute and memory, the serial K loop), after the
    kernel that quantises its activations where the weights' GEMM keys have one.

    A thread block walks K serially; with few output tiles that walk, not the FLOPs or the
    bytes, sets the time, until the library splits K across blocks (`gemm_k_split`).
    """
    compute_s, memory_s = gemm_parts(
        m, n, k, peak_flops=peak_flops, memory_bw=memory_bw, weight_bytes=weight_bytes,
        sm_count=sm_count, eff=eff,
    )
    busy_s = overlap(compute_s, memory_s, eff.gemm_overlap_power)
    serial_s = eff.gemm_k_step_s * np.minimum(k, eff.gemm_k_split)
    seconds = eff.kernel_launch_s + np.maximum(busy_s, serial_s)
    if eff.gemm_quant_token_s:  # bf16: nothing added at all
        seconds = seconds + activation_quant_seconds(m, k, memory_bw=memory_bw, eff=eff)
    return seconds


QUANT_BYTES_PER_ELEMENT = ACTIVATION_BYTES + 1.0
"""The quantisation kernel reads each bf16 activation and writes it back as one byte."""


def activation_quant_seconds(m: Real, k: Real, *, memory_bw: float,
                             eff: RooflineEfficiency) -> Real:
    """The kernel a W8A8 GEMM runs first, quantising its (M x K) bf16 input to 8 bits.

    The measured fp8 tables cost a fixed time per token (row) however few bytes a row holds,
    as a kernel with a thread block per row does (`gemm_quant_token_s`); wide rows are bound
    by streaming them. Its launch is in the GEMM's `kernel_launch_s`: two constants that only
    add up could not be fitted apart.
    """
    rows_s = m * eff.gemm_quant_token_s
    bytes_s = m * k * QUANT_BYTES_PER_ELEMENT / (memory_bw * eff.memory_efficiency)
    return np.maximum(rows_s, bytes_s)


@dataclass(frozen=True, slots=True)
class DecodeAttentionTerms:
    """What a decode-attention kernel costs besides its KV reads, for one batch shape: the
    per-step constants of `decode_attention_variable_seconds`, so that a stretch of decode
    steps of one batch prices only the part that grows with the context."""

    fixed_s: Real  # the per (sequence, KV head) work units' own cost
    token_s: Real  # seconds per cached token read
    overlap_fraction: float
    split_threshold: Real  # KV tokens above which a split sequence needs the combine kernel
    combine_s: Real
    regroup_s: Real


def decode_attention_terms(
    num_seqs: Real,
    *,
    q_heads: Real,
    kv_heads: Real,
    head_dim: Real,
    kv_bytes: float,
    memory_bw: float,
    sm_count: float,
    eff: RooflineEfficiency,
) -> DecodeAttentionTerms:
    """The per-step constants of decode attention over `num_seqs` sequences (see below)."""
    units = num_seqs * kv_heads
    grouped = q_heads > kv_heads
    split = grouped | eff.decode_mha_split_kv
    # Seconds per cached token read: its K and V at the fitted bandwidth, times the slowdown.
    token_s = (2.0 * kv_heads * head_dim * kv_bytes) / (
        memory_bw * eff.kv_read_efficiency
    ) * decode_kv_slowdown(units, split, sm_count=sm_count, eff=eff)
    # FlashAttention-2 moves a KV head's query group into the sequence dimension; with more
    # than one sequence and KV head that reshape is not a view: queries are copied in and
    # outputs back. A split sequence's partial results are merged by a second kernel, once
    # the mean context spans more than one KV tile.
    regroup = grouped & (kv_heads > 1.0) & (num_seqs > 1.0)
    return DecodeAttentionTerms(
        fixed_s=eff.decode_per_seq_head_s * units, token_s=token_s,
        overlap_fraction=eff.decode_overlap_fraction,
        split_threshold=DECODE_SPLIT_MIN_TOKENS * num_seqs,
        combine_s=split * eff.decode_combine_s, regroup_s=regroup * eff.decode_regroup_s,
    )


def decode_attention_from_terms(kv_tokens: Real, terms: DecodeAttentionTerms) -> Real:
    """Decode attention reading `kv_tokens` cached tokens, given its batch's `terms`."""
    busy_s = overlap_linear(terms.fixed_s, kv_tokens * terms.token_s, terms.overlap_fraction)
    combine = kv_tokens > terms.split_threshold
    return busy_s + combine * terms.combine_s + terms.regroup_s


def decode_attention_over_steps(kv_tokens: np.ndarray, terms: DecodeAttentionTerms) -> np.ndarray:
    """`decode_attention_from_terms` of a stretch of decode steps, whose `kv_tokens` increase:
    element for element the same numbers, in fewer array operations.

    A stretch is priced at every scheduling event, on arrays of a few dozen steps where each
    numpy call costs more than its arithmetic. With the reads increasing, the side the overlap
    takes and the side of the split threshold usually hold for the whole stretch, so max, min
    and the comparison are known, and adding an absent term (x + 0.0 is x) is skipped.
    """
    # In place on the one new array: `x += y` computes exactly `x + y` (and + and * commute).
    busy_s = kv_tokens * terms.token_s  # the reads, until the overlap is added
    fixed, fraction = terms.fixed_s, terms.overlap_fraction
    if busy_s[0] >= fixed:
        busy_s += fraction * fixed
    elif busy_s[-1] <= fixed:
        busy_s *= fraction
        busy_s += fixed
    else:
        return decode_attention_from_terms(kv_tokens, terms)
    if kv_tokens[0] > terms.split_threshold:
        busy_s += terms.combine_s
    elif kv_tokens[-1] > terms.split_threshold:
        busy_s += (kv_tokens > terms.split_threshold) * terms.combine_s
    if terms.regroup_s:
        busy_s += terms.regroup_s
    return busy_s


class StepAround(NamedTuple):
    """What a step adds around its per-layer decode attention: `before_s + layers · (launch_s
    + attention) + communication_s + overhead_s`, summed in that order (`step_time`'s)."""

    before_s: float  # the linear layers and the LM head
    layers: float
    launch_s: float
    communication_s: float
    overhead_s: float


def decode_attention_step_list(
    first_kv_tokens: int, kv_tokens_per_step: int, num_steps: int, terms: DecodeAttentionTerms,
    around: StepAround | None = None, within_s: float = math.inf,
) -> list[float]:
    """`decode_attention_from_terms` of a stretch of decode steps reading `first_kv_tokens`,
    then that many more per step, as plain Python floats; with `around`, each step's whole
    duration (the same operations as pricing the attention first, in one pass), stopping one
    step after the durations add up to more than `within_s` (the caller needs none later).

    For a short stretch: a few dozen steps cost less in Python than the dozen numpy calls of
    `decode_attention_over_steps`. Each element is the general formula's, operation for
    operation (Python floats are IEEE doubles like numpy's, and a bool times a float is 1.0
    or 0.0 times it in both), so the numbers are the same bit for bit.
    """
    fixed, token_s, fraction = terms.fixed_s, terms.token_s, terms.overlap_fraction
    threshold, combine_s, regroup_s = terms.split_threshold, terms.combine_s, terms.regroup_s
    hidden_fixed = fraction * fixed  # overlap_linear's term when the reads are the larger
    seconds = []
    stop = first_kv_tokens + kv_tokens_per_step * num_steps
    if around is None:
        for kv_tokens in range(first_kv_tokens, stop, kv_tokens_per_step):
            reads = kv_tokens * token_s
            # overlap_linear(fixed, reads): max + fraction · min (at a tie both sides are equal)
            busy_s = reads + hidden_fixed if reads >= fixed else fixed + fraction * reads
            seconds.append(busy_s + (kv_tokens > threshold) * combine_s + regroup_s)
        return seconds
    before_s, layers, launch_s = around.before_s, around.layers, around.launch_s
    communication_s, overhead_s = around.communication_s, around.overhead_s
    # The running total is only compared, never returned: the spare step past `within_s`
    # covers its rounding against the caller's own sums.
    total_s = 0.0
    for kv_tokens in range(first_kv_tokens, stop, kv_tokens_per_step):
        reads = kv_tokens * token_s
        busy_s = reads + hidden_fixed if reads >= fixed else fixed + fraction * reads
        attention_s = busy_s + (kv_tokens > threshold) * combine_s + regroup_s
        step_s = before_s + layers * (launch_s + attention_s) + communication_s + overhead_s
        seconds.append(step_s)
        if total_s > within_s:  # the steps before this one already add up past it
            break
        total_s += step_s
    return seconds


def decode_attention_variable_seconds(
    num_seqs: Real,
    kv_tokens: Real,
    *,
    q_heads: Real,
    kv_heads: Real,
    head_dim: Real,
    kv_bytes: float,
    memory_bw: float,
    sm_count: float,
    eff: RooflineEfficiency,
) -> Real:
    """Decode attention over `num_seqs` sequences reading `kv_tokens` cached tokens, no launch.

    Two parts overlap (`decode_overlap_fraction` of the smaller one shows): a fixed cost per
    (sequence, KV head) work unit — at small contexts the kernel is bound by its many tiny
    blocks — and the K and V bytes at the fitted bandwidth, slowed when too few thread
    blocks stream them (`decode_kv_slowdown`). Then the fixed costs of the kernel's layout:
    the combine kernel of a split sequence and the regrouping copies of grouped queries.
    Nonlinear only in per-step constants (sequences, heads) and in comparisons of the mean
    context, so the simulator can price many decode steps at once, exactly.
    """
    terms = decode_attention_terms(
        num_seqs, q_heads=q_heads, kv_heads=kv_heads, head_dim=head_dim, kv_bytes=kv_bytes,
        memory_bw=memory_bw, sm_count=sm_count, eff=eff,
    )
    return decode_attention_from_terms(kv_tokens, terms)


def decode_kv_slowdown(
    units: Real, split: Real, *, sm_count: float, eff: RooflineEfficiency
) -> Real:
    """How much slower than the fitted bandwidth `units` (sequence x KV head) pairs read KV.

    A thread block streams only so fast: a kernel that gives each unit one block
    (FlashAttention-2 with one query head per KV head) needs `decode_unsplit_fill` units per SM
    to saturate HBM, and with fewer the bandwidth falls in proportion. A kernel that splits
    each sequence over several blocks (`split`) needs only `decode_split_fill` units per SM.
    """
    fill = eff.decode_split_fill * split + eff.decode_unsplit_fill * (1.0 - split)
    return _maximum(1.0, fill * sm_count / units)


def decode_attention_seconds(
    num_seqs: Real,
    kv_tokens: Real,
    *,
    q_heads: Real,
    kv_heads: Real,
    head_dim: Real,
    kv_bytes: float,
    memory_bw: float,
    sm_count: float,
    eff: RooflineEfficiency,
) -> Real:
    """One decode-attention kernel: launch + `decode_attention_variable_seconds`."""
    return eff.attention_launch_s + decode_attention_variable_seconds(
        num_seqs, kv_tokens, q_heads=q_heads, kv_heads=kv_heads, head_dim=head_dim,
        kv_bytes=kv_bytes, memory_bw=memory_bw, sm_count=sm_count, eff=eff,
    )


def prefill_attention_variable_seconds(
    flops: Real,
    query_head_tokens: Real,
    traffic_bytes: Real,
    *,
    peak_flops: float,
    memory_bw: float,
    eff: RooflineEfficiency,
) -> Real:
    """Prefill attention without its launch: overlapped FLOP time and per-token traffic time.

    `query_head_tokens` (new tokens x query heads) is the kernel's parallelism: with few of them
    the tiles do not fill the GPU, so the efficiency ramps up like `e · W / (W + ramp)`.
    `traffic_bytes` is Q read, O written and K/V read once. `prefill_setup_s` is what the
    prefill path pays on top of the launch it shares with decode (FlashAttention-3's varlen
    prefill: about 2 µs; FlashAttention-2: nothing).
    """
    ramp = (query_head_tokens + eff.attention_ramp_tokens) / query_head_tokens
    compute_s = flops * ramp / (peak_flops * eff.attention_compute_efficiency)
    memory_s = traffic_bytes / (memory_bw * eff.prefill_memory_efficiency)
    return eff.prefill_setup_s + overlap(compute_s, memory_s, eff.attention_overlap_power)


def prefill_attention_seconds(
    flops: Real,
    query_head_tokens: Real,
    traffic_bytes: Real,
    *,
    peak_flops: float,
    memory_bw: float,
    eff: RooflineEfficiency,
) -> Real:
    """One prefill-attention kernel: launch + `prefill_attention_variable_seconds`."""
    return eff.attention_launch_s + prefill_attention_variable_seconds(
        flops, query_head_tokens, traffic_bytes, peak_flops=peak_flops, memory_bw=memory_bw,
        eff=eff,
    )


def prefill_attention_shape(
    new_sum: Real,
    context_sum: Real,
    new_times_context_sum: Real,
    new_squared_sum: Real,
    *,
    q_heads: Real,
    kv_heads: Real,
    head_dim: Real,
    kv_bytes: float,
) -> tuple[Real, Real, Real]:
    """(FLOPs, query-head tokens, traffic bytes) of one layer's prefill attention kernel.

    Takes sums over the prefill sequences of q, c, q·c and q² (q new tokens on c cached ones),
    so one call prices a whole batch. Each new token attends to the cached tokens and,
    causally, to half of the new ones: FLOPs = 4·d·n_q·Σ q·(c + q/2). Traffic: K/V of all
    c + q tokens once, Q in and O out.
    """
    flops = 4.0 * head_dim * q_heads * (new_times_context_sum + 0.5 * new_squared_sum)
    kv_traffic = (context_sum + new_sum) * (2.0 * kv_heads * head_dim * kv_bytes)
    qo_traffic = new_sum * (2.0 * q_heads * head_dim * ACTIVATION_BYTES)
    return flops, new_sum * q_heads, kv_traffic + qo_traffic


def allreduce_seconds(
    message_bytes: Real,
    num_gpus: Real,
    *,
    link_bw: float,
    eff: RooflineEfficiency,
) -> Real:
    """One ring all-reduce of `message_bytes` over `num_gpus` GPUs.

    α grows with the ring's length; the bus moves 2·(t−1)/t of the message at the link's
    bandwidth times a fitted efficiency, scaled by (2/t)^γ: γ ≈ 0 on a non-blocking NVLink
    switch, large where GPUs share a PCIe path (the L40S).
    """
    latency_s = eff.allreduce_latency_s + eff.allreduce_latency_per_gpu_s * (num_gpus - 1.0)
    bus_bytes = 2.0 * (num_gpus - 1.0) / num_gpus * message_bytes
    bus_rate = link_bw * eff.allreduce_bandwidth_efficiency * (2.0 / num_gpus) ** (
        eff.allreduce_scaling_exponent
    )
    return latency_s + bus_bytes / bus_rate
