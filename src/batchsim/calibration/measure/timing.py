"""Timing one operator: warm-up, then the median of repeats, L2 flushed between them on CUDA.

On CUDA each repeat is bracketed by CUDA events after writing a buffer twice the size of the L2
cache, so the operator reads its weights and KV from HBM as it does in a real step (a serving
step's weights never fit in L2). All repeats are queued behind a spin kernel and read back
after one synchronisation: the GPU never waits for Python to launch the next kernel, so an
event pair brackets the operator alone. (Timing each repeat with a synchronisation in between
lets the GPU drain its queue; a microsecond kernel then measured 8 µs on one H200 and 30 µs on
another, the launch gap included.) On CPU a synchronous `perf_counter` brackets each repeat and
caches are not flushed (stated in device.json).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# GPU cycles of spin per queued repeat: about 50 µs at 2 GHz, more than Python needs to queue
# one repeat (flush, two events, the operator's launch).
_SPIN_CYCLES_PER_REPEAT = 100_000
# Seconds of large GEMMs before the first timing, so the clocks have left their idle state.
_CLOCK_WARMUP_S = 1.0


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
        if self.device != "cuda":
            return statistics.median(self._cpu_once(op) for _ in range(self.repeats))
        return statistics.median(self._cuda_samples(op))

    def _cpu_once(self, op: Callable[[], object]) -> float:
        start = time.perf_counter()
        op()
        return time.perf_counter() - start

    def _cuda_samples(self, op: Callable[[], object]) -> list[float]:
        cuda = self.torch.cuda
        cuda.synchronize()
        pairs = [(cuda.Event(enable_timing=True), cuda.Event(enable_timing=True))
                 for _ in range(self.repeats)]
        cuda._sleep(_SPIN_CYCLES_PER_REPEAT * self.repeats)  # head start for the queue below
        for start, end in pairs:
            if self.flush_buffer is not None:
                self.flush_buffer.zero_()
            start.record()
            op()
            end.record()
        cuda.synchronize()
        return [float(start.elapsed_time(end)) * 1e-3 for start, end in pairs]

    def warm_clocks(self) -> None:
        """On CUDA, keep the GPU busy for about a second so it leaves its idle clocks."""
        if self.device != "cuda":
            return
        a = self.torch.randn(8192, 8192, dtype=self.torch.bfloat16, device="cuda")
        deadline = time.perf_counter() + _CLOCK_WARMUP_S
        while time.perf_counter() < deadline:
            for _ in range(10):
                a @ a
            self.torch.cuda.synchronize()


def make_timer(torch: Any, device: str, *, warmup: int, repeats: int) -> Timer:
    """A timer for `device`, with an L2-flush buffer on CUDA."""
    flush = None
    if device == "cuda":
        l2_bytes = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0)) or 1 << 26
        flush = torch.empty(2 * l2_bytes, dtype=torch.uint8, device="cuda")
    return Timer(torch=torch, device=device, warmup=warmup, repeats=repeats, flush_buffer=flush)
