"""Timing one operator: warm-up, then the median of repeats, L2 flushed between them on CUDA.

On CUDA each repeat is bracketed by CUDA events after writing a buffer twice the size of the L2
cache, so the operator reads its weights and KV from HBM as it does in a real step (a serving
step's weights never fit in L2). On CPU a synchronous `perf_counter` brackets each repeat and
caches are not flushed (stated in device.json).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Timer:
    """Times callables on one torch device."""

    torch: Any  # the torch module, imported by the caller
    device: str  # "cuda" or "cpu"
    warmup: int
    repeats: int
    flush_buffer: Any = None  # a CUDA tensor larger than L2, or None

    def median_s(self, op: Callable[[], object]) -> float:
        """Median wall time of `op` in seconds."""
        for _ in range(self.warmup):
            op()
        self._synchronize()
        samples = [self._once(op) for _ in range(self.repeats)]
        return statistics.median(samples)

    def _once(self, op: Callable[[], object]) -> float:
        if self.device != "cuda":
            start = time.perf_counter()
            op()
            return time.perf_counter() - start
        if self.flush_buffer is not None:
            self.flush_buffer.zero_()
        start_event = self.torch.cuda.Event(enable_timing=True)
        end_event = self.torch.cuda.Event(enable_timing=True)
        start_event.record()
        op()
        end_event.record()
        end_event.synchronize()
        return float(start_event.elapsed_time(end_event)) * 1e-3

    def _synchronize(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()


def make_timer(torch: Any, device: str, *, warmup: int, repeats: int) -> Timer:
    """A timer for `device`, with an L2-flush buffer on CUDA."""
    flush = None
    if device == "cuda":
        l2_bytes = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0)) or 1 << 26
        flush = torch.empty(2 * l2_bytes, dtype=torch.uint8, device="cuda")
    return Timer(torch=torch, device=device, warmup=warmup, repeats=repeats, flush_buffer=flush)
