"""The microbenchmarks: each returns rows in the columns of the public tables (latency in ms)."""

from __future__ import annotations

import time
from functools import partial
from typing import Any

from batchsim.calibration.measure.grids import Grid
from batchsim.calibration.measure.timing import Timer

Row = dict[str, object]


def gemm_rows(torch: Any, timer: Timer, grid: Grid, device: str) -> list[Row]:
    """`torch.nn.functional.linear`: (m x k) activations times an (n x k) weight."""
    rows: list[Row] = []
    for m, n, k in grid.gemms:
        if max(m * k, n * k, m * n) > grid.max_elements:
            continue
        x = torch.randn(m, k, dtype=torch.bfloat16, device=device)
        w = torch.randn(n, k, dtype=torch.bfloat16, device=device)
        seconds = timer.median_s(partial(torch.nn.functional.linear, x, w))
        rows.append({"gemm_dtype": "bfloat16", "m": m, "n": n, "k": k, "latency": seconds * 1e3})
    return rows


def prefill_rows(torch: Any, timer: Timer, grid: Grid, device: str) -> list[Row]:
    """Causal `scaled_dot_product_attention` over whole prompts (no cached context)."""
    rows: list[Row] = []
    for heads in grid.heads:
        for batch, length in grid.prefill:
            q = _tensor(torch, device, batch, heads.q_heads, length, heads.head_dim)
            k = _tensor(torch, device, batch, heads.kv_heads, length, heads.head_dim)
            v = _tensor(torch, device, batch, heads.kv_heads, length, heads.head_dim)
            seconds = timer.median_s(partial(_sdpa, torch, q, k, v, causal=True))
            rows.append(_attention_row(batch, length, heads, step=0, seconds=seconds))
    return rows


def decode_rows(torch: Any, timer: Timer, grid: Grid, device: str) -> list[Row]:
    """One query token per sequence attending to `step` cached tokens."""
    rows: list[Row] = []
    for heads in grid.heads:
        for batch, step in grid.decode:
            if batch * heads.kv_heads * step * heads.head_dim > grid.max_elements:
                continue
            q = _tensor(torch, device, batch, heads.q_heads, 1, heads.head_dim)
            k = _tensor(torch, device, batch, heads.kv_heads, step, heads.head_dim)
            v = _tensor(torch, device, batch, heads.kv_heads, step, heads.head_dim)
            seconds = timer.median_s(partial(_sdpa, torch, q, k, v, causal=False))
            rows.append(_attention_row(batch, 1, heads, step=step, seconds=seconds))
    return rows


def copy_bandwidth(torch: Any, timer: Timer, grid: Grid, device: str) -> float:
    """Device-memory bandwidth of a large copy: bytes read + written per second."""
    src = torch.empty(grid.copy_bytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    seconds = timer.median_s(lambda: dst.copy_(src))
    return 2.0 * grid.copy_bytes / seconds


def allreduce_rows(torch: Any, grid: Grid, repeats: int) -> list[Row]:
    """NCCL all-reduce across 2, 4, 8 … visible GPUs (single process, `torch.cuda.nccl`)."""
    rows: list[Row] = []
    count = torch.cuda.device_count()
    sizes = [g for g in (2, 4, 8) if g <= count]
    for num_gpus in sizes:
        for size in grid.allreduce_bytes:
            tensors = [
                torch.ones(size // 2, dtype=torch.float16, device=f"cuda:{i}")
                for i in range(num_gpus)
            ]
            seconds = _allreduce_median_s(torch, tensors, repeats)
            # message_size in elements, as the public (aiconfigurator) tables count it.
            rows.append({"op_name": "all_reduce", "nccl_dtype": "half", "num_gpus": num_gpus,
                         "message_size": size // 2, "latency": seconds * 1e3})
    return rows


def _allreduce_median_s(torch: Any, tensors: list[Any], repeats: int) -> float:
    def synchronize() -> None:
        for t in tensors:
            torch.cuda.synchronize(t.device)

    torch.cuda.nccl.all_reduce(tensors)  # warm-up: builds the communicator
    synchronize()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        torch.cuda.nccl.all_reduce(tensors)
        synchronize()
        samples.append(time.perf_counter() - start)
    samples.sort()
    return samples[len(samples) // 2]


def _tensor(torch: Any, device: str, *shape: int) -> Any:
    return torch.randn(*shape, dtype=torch.bfloat16, device=device)


def _sdpa(torch: Any, q: Any, k: Any, v: Any, *, causal: bool) -> Any:
    sdpa = torch.nn.functional.scaled_dot_product_attention
    if q.shape[1] == k.shape[1]:
        return sdpa(q, k, v, is_causal=causal)
    # Grouped-query attention natively (torch >= 2.5) rather than copying K/V per query head;
    # older torch gets the copies, which overstates the KV traffic (noted in device.json).
    try:
        return sdpa(q, k, v, is_causal=causal, enable_gqa=True)
    except TypeError:
        group = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        return sdpa(q, k, v, is_causal=causal)


def _attention_row(batch: int, isl: int, heads: Any, *, step: int, seconds: float) -> Row:
    return {
        "attn_dtype": "bfloat16", "kv_cache_dtype": "bfloat16", "batch_size": batch,
        "isl": isl, "num_heads": heads.q_heads, "num_key_value_heads": heads.kv_heads,
        "head_dim": heads.head_dim, "step": step, "latency": seconds * 1e3,
    }
