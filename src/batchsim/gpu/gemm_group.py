"""The GEMMs of a layer stack (or the LM head) priced together at one token count."""

from __future__ import annotations

import numpy as np

from batchsim.gpu.hardware import GpuProfile, RooflineEfficiency
from batchsim.gpu.roofline import gemm_parts, gemm_seconds


class GemmGroup:
    """GEMMs of fixed (N, K) shapes run `repeats` times with the same token count M."""

    __slots__ = (
        "_efficiency",
        "_gpu",
        "_peak_flops",
        "_repeats",
        "_shapes",
        "_weight_bytes",
    )

    def __init__(
        self,
        *,
        shapes: tuple[tuple[int, int], ...],
        repeats: int,
        peak_flops: float,
        weight_bytes: float,
        gpu: GpuProfile,
        efficiency: RooflineEfficiency,
    ) -> None:
        """`efficiency`: the GEMM keys of these weights (`RooflineEfficiency.for_weights`)."""
        self._efficiency = efficiency
        self._shapes = shapes
        self._repeats = repeats
        self._peak_flops = peak_flops
        self._weight_bytes = weight_bytes
        self._gpu = gpu

    def cost(self, num_tokens: float) -> tuple[float, bool]:
        """(seconds for all repeats, whether FLOP time exceeded memory time overall).

        Each shape is priced by `roofline.gemm_seconds`, the function the fit uses; the
        caller caches the result per token count.
        """
        seconds, compute_bound = self.cost_many(np.array([float(num_tokens)]))
        return float(seconds[0]), bool(compute_bound[0])

    def cost_many(self, num_tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`cost` at each of several token counts (one row of shapes per count)."""
        m = num_tokens.astype(np.float64)[:, None]
        n = np.array([shape[0] for shape in self._shapes], dtype=np.float64)
        k = np.array([shape[1] for shape in self._shapes], dtype=np.float64)
        peak, eff, sms = self._peak_flops, self._efficiency, self._gpu.parallel_units
        bw = self._gpu.memory_bandwidth_bytes_per_s
        seconds = gemm_seconds(
            m, n, k, peak_flops=peak, memory_bw=bw, weight_bytes=self._weight_bytes,
            sm_count=sms, eff=eff,
        )
        compute_s, memory_s = gemm_parts(
            m, n, k, peak_flops=peak, memory_bw=bw, weight_bytes=self._weight_bytes,
            sm_count=sms, eff=eff,
        )
        # Summed per row in shape order, as the one-count sum adds them.
        total = seconds[:, 0].copy()
        compute, memory = compute_s[:, 0].copy(), memory_s[:, 0].copy()
        for j in range(1, n.size):
            total += seconds[:, j]
            compute += compute_s[:, j]
            memory += memory_s[:, j]
        return total * self._repeats, compute > memory
