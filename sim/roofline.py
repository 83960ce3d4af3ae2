"""Per-operator times of the roofline: the one definition the cost model and the fit share.

`sim.cost_model` prices a step by calling these functions with a model's shapes; the
calibration fit (`sim.calibration`) calls the same functions on measured operator rows. So the
held-out error a profile reports is the error of exactly the formulas the simulator runs.

Every function takes plain numbers or numpy arrays (one element per measured row) and uses only
arithmetic and numpy ufuncs, so a scalar call and an array call do the same operations.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sim.dtypes import ACTIVATION_BYTES
from sim.hardware import RooflineEfficiency

Real = Any
"""A float (the cost model prices one step) or a numpy array (the fit: one element per measured
row). numpy's stubs cannot type arithmetic on the union elementwise, hence Any."""


def overlap(a: Real, b: Real, power: float) -> Real:
    """(a^p + b^p)^(1/p): p = 1 runs the two parts back to back, large p overlaps them fully.

    Near the ridge point a kernel is neither purely compute- nor memory-bound and takes longer
    than either bound alone; the fitted power says by how much.
    """
    return (a**power + b**power) ** (1.0 / power)


def gemm_parts(
    m: Real,
    n: Real,
    k: Real,
    *,
    peak_flops: float,
    memory_bw: float,
    weight_bytes: float,
    eff: RooflineEfficiency,
) -> tuple[Real, Real]:
    """(compute seconds, memory seconds) of an (M x K) @ (K x N) GEMM before overlap."""
    flops_rate = peak_flops * eff.gemm_peak_efficiency * m / (m + eff.gemm_ramp_tokens)
    compute_s = 2.0 * m * n * k / flops_rate
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
    eff: RooflineEfficiency,
) -> Real:
    """One GEMM: launch + max(overlapped compute and memory, the serial K loop).

    A thread block walks K serially; with few output tiles that walk, not the FLOPs or the
    bytes, sets the time, until the library splits K across blocks (`gemm_k_split`).
    """
    compute_s, memory_s = gemm_parts(
        m, n, k, peak_flops=peak_flops, memory_bw=memory_bw, weight_bytes=weight_bytes, eff=eff
    )
    busy_s = overlap(compute_s, memory_s, eff.gemm_overlap_power)
    serial_s = eff.gemm_k_step_s * np.minimum(k, eff.gemm_k_split)
    return eff.kernel_launch_s + np.maximum(busy_s, serial_s)


def decode_attention_variable_seconds(
    num_seqs: Real,
    kv_tokens: Real,
    *,
    kv_heads: Real,
    head_dim: Real,
    kv_bytes: float,
    memory_bw: float,
    eff: RooflineEfficiency,
) -> Real:
    """Decode attention over `num_seqs` sequences reading `kv_tokens` cached tokens, no launch.

    A fixed cost per (sequence, KV head) work item (at small contexts the kernel is bound by
    its many tiny blocks, not by bytes) + the K and V bytes at the fitted bandwidth. Linear in
    both counts, so the simulator can price many decode steps at once.
    """
    kv_bytes_read = kv_tokens * (2.0 * kv_heads * head_dim * kv_bytes)
    return eff.decode_per_seq_head_s * (num_seqs * kv_heads) + kv_bytes_read / (
        memory_bw * eff.kv_read_efficiency
    )


def decode_attention_seconds(
    num_seqs: Real,
    kv_tokens: Real,
    *,
    kv_heads: Real,
    head_dim: Real,
    kv_bytes: float,
    memory_bw: float,
    eff: RooflineEfficiency,
) -> Real:
    """One decode-attention kernel: launch + `decode_attention_variable_seconds`."""
    return eff.attention_launch_s + decode_attention_variable_seconds(
        num_seqs, kv_tokens, kv_heads=kv_heads, head_dim=head_dim, kv_bytes=kv_bytes,
        memory_bw=memory_bw, eff=eff,
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
    `traffic_bytes` is Q read, O written and K/V read once.
    """
    ramp = (query_head_tokens + eff.attention_ramp_tokens) / query_head_tokens
    compute_s = flops * ramp / (peak_flops * eff.attention_compute_efficiency)
    memory_s = traffic_bytes / (memory_bw * eff.prefill_memory_efficiency)
    return overlap(compute_s, memory_s, eff.attention_overlap_power)


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
