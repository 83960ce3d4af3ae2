"""Turn the `workload` section into the engine's traffic, from one seed (DESIGN §5).

Lengths drawn from distributions are clipped so that prompt + output fits `max_model_len`
(DESIGN §5); the number clipped is reported. Trace requests are never altered: one that does not
fit is rejected by the engine with a reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import workloads as wl
from batchsim import config as cfg
from batchsim.config import (
    ClosedLoopArrivals,
    ConstantArrivals,
    GammaArrivals,
    LengthConfig,
    PoissonArrivals,
    TraceArrivals,
    WorkloadConfig,
)
from sim.engine import ClosedLoopTraffic, OpenLoopTraffic, Traffic

# Closed-loop lengths are drawn in chunks of this many requests, as they are needed.
_LENGTH_CHUNK = 4096


@dataclass(slots=True)
class ClipTally:
    """Synthetic requests shortened to fit max_model_len (closed loop: in the latest run)."""

    count: int = 0


@dataclass(frozen=True, slots=True)
class BuiltTraffic:
    traffic: Traffic
    clipped: ClipTally
    source: str  # a short description for the summary


def length_distribution(config: LengthConfig, base_dir: Path) -> wl.LengthDistribution:
    """The sampler for one `prompt_tokens` / `output_tokens` section."""
    if isinstance(config, cfg.MixtureLength):
        parts = tuple(length_distribution(c, base_dir) for c in config.components)
        return wl.MixtureLength(parts, tuple(c.weight for c in config.components))
    if isinstance(config, cfg.FixedLength):
        return wl.FixedLength(config.value)
    if isinstance(config, cfg.UniformLength):
        return wl.UniformLength(config.low, config.high)
    if isinstance(config, cfg.LognormalLength):
        return wl.LognormalLength(mean_tokens=config.mean, cv=config.cv)
    if isinstance(config, cfg.GeometricLength):
        return wl.GeometricLength(mean_tokens=config.mean)
    path = (base_dir / config.path).resolve()
    return wl.EmpiricalLength(wl.load_empirical_column(path, config.column))


def clip_to_context(prompt: np.ndarray, output: np.ndarray,
                    max_model_len: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Prompt at most max_model_len − 1 tokens, then output at most what is left."""
    new_prompt = np.minimum(prompt, max_model_len - 1)
    new_output = np.minimum(output, max_model_len - new_prompt)
    clipped = int(np.count_nonzero((new_prompt != prompt) | (new_output != output)))
    return new_prompt, new_output, clipped


class _Rngs:
    """Independent streams for arrivals, prompt lengths and output lengths, from one seed."""

    def __init__(self, seed: int) -> None:
        arrivals, prompts, outputs = np.random.SeedSequence(seed).spawn(3)
        self.arrivals = np.random.default_rng(arrivals)
        self.prompt_seed = prompts
        self.output_seed = outputs


def build_traffic(config: WorkloadConfig, *, seed: int, base_dir: Path,
                  max_model_len: int) -> BuiltTraffic:
    rngs = _Rngs(seed)
    arrivals = config.arrivals
    if isinstance(arrivals, TraceArrivals):
        return _trace_traffic(config, arrivals, base_dir)
    assert config.prompt_tokens is not None and config.output_tokens is not None
    prompts = length_distribution(config.prompt_tokens, base_dir)
    outputs = length_distribution(config.output_tokens, base_dir)
    if isinstance(arrivals, ClosedLoopArrivals):
        return _closed_loop(config, arrivals, prompts, outputs, rngs, max_model_len)
    times = _open_loop_times(config, arrivals, rngs.arrivals)
    n = times.size
    prompt = prompts.sample(np.random.default_rng(rngs.prompt_seed), n)
    output = outputs.sample(np.random.default_rng(rngs.output_seed), n)
    prompt, output, clipped = clip_to_context(prompt, output, max_model_len)
    traffic = OpenLoopTraffic(times, prompt, output)
    return BuiltTraffic(traffic, ClipTally(clipped), f"{arrivals.kind} arrivals")


def _open_loop_times(config: WorkloadConfig,
                     arrivals: PoissonArrivals | GammaArrivals | ConstantArrivals,
                     rng: np.random.Generator) -> np.ndarray:
    duration, count = config.duration_s, config.num_requests
    if isinstance(arrivals, PoissonArrivals):
        return wl.poisson_arrivals(rng, arrivals.rate, duration_s=duration, num_requests=count)
    if isinstance(arrivals, GammaArrivals):
        return wl.gamma_arrivals(rng, arrivals.rate, arrivals.cv, duration_s=duration,
                                 num_requests=count)
    return wl.constant_arrivals(arrivals.rate, duration_s=duration, num_requests=count)


def _trace_traffic(config: WorkloadConfig, arrivals: TraceArrivals,
                   base_dir: Path) -> BuiltTraffic:
    path = wl.resolve_trace_path(arrivals.path, base_dir)
    trace = wl.load_trace(path, arrivals.format)
    times = wl.apply_time_scale(trace.arrival_s, arrivals.time_scale)
    keep = np.ones(times.size, dtype=bool)
    if config.duration_s is not None:
        keep &= times < config.duration_s
    if config.num_requests is not None:
        keep &= np.arange(times.size) < config.num_requests
    traffic = OpenLoopTraffic(times[keep], trace.prompt_tokens[keep], trace.output_tokens[keep])
    source = f"trace {trace.source} (time_scale {arrivals.time_scale})"
    return BuiltTraffic(traffic, ClipTally(0), source)


def _closed_loop(config: WorkloadConfig, arrivals: ClosedLoopArrivals,
                 prompts: wl.LengthDistribution, outputs: wl.LengthDistribution,
                 rngs: _Rngs, max_model_len: int) -> BuiltTraffic:
    tally = ClipTally()

    def lengths() -> Iterator[tuple[int, int]]:
        # Fresh generators per call, so every arm sees the same sequence of lengths.
        prompt_rng = np.random.default_rng(rngs.prompt_seed)
        output_rng = np.random.default_rng(rngs.output_seed)
        tally.count = 0
        while True:
            drawn_prompt = prompts.sample(prompt_rng, _LENGTH_CHUNK)
            drawn_output = outputs.sample(output_rng, _LENGTH_CHUNK)
            prompt, output, _ = clip_to_context(drawn_prompt, drawn_output, max_model_len)
            changed = ((prompt != drawn_prompt) | (output != drawn_output)).tolist()
            for p, o, was_clipped in zip(prompt.tolist(), output.tolist(), changed, strict=True):
                tally.count += was_clipped
                yield p, o

    traffic = ClosedLoopTraffic(arrivals.concurrency, arrivals.think_time_s, lengths,
                                config.num_requests, config.duration_s)
    return BuiltTraffic(traffic, tally, f"closed loop, {arrivals.concurrency} users")
