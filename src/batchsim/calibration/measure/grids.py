"""What to time: the shapes of a model's layers plus a generic grid, full or quick (CPU/CI)."""

from __future__ import annotations

from dataclasses import dataclass

from batchsim.gpu.model_spec import ModelSpec

_TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
_GENERIC_DIMS = (1024, 2048, 4096, 8192, 16384)


@dataclass(frozen=True, slots=True)
class AttentionHeads:
    q_heads: int
    kv_heads: int
    head_dim: int


@dataclass(frozen=True, slots=True)
class Grid:
    """Every shape one `measure` run times."""

    gemms: tuple[tuple[int, int, int], ...]  # (m, n, k)
    heads: tuple[AttentionHeads, ...]
    prefill: tuple[tuple[int, int], ...]  # (batch, prompt length)
    decode: tuple[tuple[int, int], ...]  # (batch, KV length)
    allreduce_bytes: tuple[int, ...]
    copy_bytes: int
    max_elements: int  # skip a shape whose largest tensor exceeds this


def model_gemm_shapes(model: ModelSpec) -> tuple[tuple[int, int], ...]:
    """(N, K) of the layer GEMMs and the LM head at tensor_parallel = 1, as the cost model."""
    h, d = model.hidden_size, model.head_dim
    q, kv, f = model.num_heads, model.num_kv_heads, model.intermediate_size
    return ((q + 2 * kv) * d, h), (h, q * d), (2 * f, h), (h, f), (model.vocab_size, h)


def full_grid(model: ModelSpec) -> Grid:
    """For a GPU: the model's shapes over 1–8192 tokens plus square-ish generic shapes."""
    shapes = set(model_gemm_shapes(model))
    shapes |= {(n, k) for n in _GENERIC_DIMS for k in _GENERIC_DIMS}
    gemms = tuple(sorted((m, n, k) for n, k in shapes for m in _TOKENS))
    heads = (
        AttentionHeads(model.num_heads, model.num_kv_heads, model.head_dim),
        AttentionHeads(32, 32, 128),
        AttentionHeads(64, 8, 128),
    )
    prefill = tuple(
        (b, s) for b in (1, 2, 4, 8) for s in (128, 256, 512, 1024, 2048, 4096, 8192, 16384)
        if b * s <= 32768
    )
    decode = tuple(
        (b, s) for b in (1, 2, 4, 8, 16, 32, 64, 128, 256)
        for s in (128, 512, 1024, 2048, 4096, 8192, 16384, 32768) if b * s <= 1 << 20
    )
    return Grid(
        gemms=gemms, heads=heads, prefill=prefill, decode=decode,
        allreduce_bytes=tuple(1 << p for p in range(10, 29, 2)),
        copy_bytes=1 << 30, max_elements=1 << 31,
    )


def quick_grid() -> Grid:
    """A reduced grid that runs in seconds on a CPU: the real code path, small shapes.

    Just enough rows per family for `fit` to accept them (two per fitted key and two more).
    """
    gemms = tuple(
        (m, n, k) for m in (1, 8, 64, 256) for n in (128, 512) for k in (128, 512, 1024)
    )
    return Grid(
        gemms=gemms,
        heads=(AttentionHeads(4, 2, 64), AttentionHeads(4, 4, 64)),
        prefill=((1, 32), (1, 64), (1, 128), (2, 64), (2, 128), (1, 256)),
        decode=(
            (1, 64), (1, 256), (1, 1024), (2, 128), (2, 512), (4, 64), (4, 256), (8, 128),
            (8, 1024),
        ),
        allreduce_bytes=(1 << 10, 1 << 16, 1 << 20),
        copy_bytes=1 << 24, max_elements=1 << 24,
    )
