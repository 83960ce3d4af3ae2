"""Turn the `workload` section into the engine's traffic, from one seed (docs/design.md §5).

Lengths drawn from distributions are clipped so that prompt + output fits `max_model_len`
(docs/design.md §5); the number clipped is reported. Trace requests are never altered: one that
does not
fit is rejected by the engine with a reason. Several tenants are generated independently (each
from its own child seed) and merged by arrival time, each request keeping its tenant's index
and priority.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import batchsim.workloads as wl
from batchsim.experiment import schema as cfg
from batchsim.experiment.corpus_lengths import corpus_samplers
from batchsim.experiment.load_shapes import SHAPED_KINDS, shaped_arrival_times
from batchsim.experiment.schema import (
    ClosedLoopArrivals,
    ConstantArrivals,
    GammaArrivals,
    LengthConfig,
    PoissonArrivals,
    SessionArrivals,
    TenantConfig,
    TraceArrivals,
    WorkloadConfig,
)
from batchsim.experiment.trace_traffic import replay_trace
from batchsim.sim.traffic import ClosedLoopTraffic, OpenLoopTraffic, SessionTraffic, Traffic
from batchsim.workloads.corpus import InOrderColumn
from batchsim.workloads.sessions import SessionShape, generate_sessions
from batchsim.workloads.traces.transforms import splice_tenants

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
    notes: tuple[str, ...] = ()  # what the console must say, e.g. trace rows dropped


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

    def __init__(self, seed: int | np.random.SeedSequence) -> None:
        root = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
        arrivals, prompts, outputs = root.spawn(3)
        self.arrivals = np.random.default_rng(arrivals)
        self.prompt_seed = prompts
        self.output_seed = outputs
        # A fourth child, made apart so that the three above stay what they always were.
        self.pool_seed = np.random.SeedSequence(root.entropy, spawn_key=(*root.spawn_key, 3))


def build_traffic(config: WorkloadConfig, *, seed: int, base_dir: Path,
                  max_model_len: int) -> BuiltTraffic:
    if config.tenants is not None:
        return _tenant_traffic(config, config.tenants, seed, base_dir, max_model_len)
    rngs = _Rngs(seed)
    arrivals = config.arrivals
    assert arrivals is not None  # the schema requires arrivals or tenants
    if isinstance(arrivals, TraceArrivals):
        return _trace_traffic(config, arrivals, base_dir, rngs.arrivals)
    prompts, outputs = _lengths(config, base_dir, rngs)
    if isinstance(arrivals, ClosedLoopArrivals):
        return _closed_loop(config, arrivals, prompts, outputs, rngs, max_model_len)
    if isinstance(arrivals, SessionArrivals):
        return _sessions(config, arrivals, (prompts, outputs), rngs, base_dir, max_model_len)
    if isinstance(arrivals, SHAPED_KINDS):
        times = shaped_arrival_times(arrivals, duration_s=config.duration_s,
                                     num_requests=config.num_requests, rng=rngs.arrivals,
                                     base_dir=base_dir)
    else:
        times = _open_loop_times(config, arrivals, rngs.arrivals)
    n = times.size
    prompt = prompts.sample(np.random.default_rng(rngs.prompt_seed), n)
    output = outputs.sample(np.random.default_rng(rngs.output_seed), n)
    prompt, output, clipped = clip_to_context(prompt, output, max_model_len)
    traffic = OpenLoopTraffic(times, prompt, output)
    return BuiltTraffic(traffic, ClipTally(clipped), f"{arrivals.kind} arrivals")


def _lengths(config: WorkloadConfig, base_dir: Path,
             rngs: _Rngs) -> tuple[wl.LengthDistribution, wl.LengthDistribution]:
    if config.lengths is not None:
        # One seed for both columns: they then draw the same corpus rows, keeping each
        # request's prompt and output together.
        rngs.output_seed = rngs.prompt_seed
        return corpus_samplers(config.lengths, base_dir)
    assert config.prompt_tokens is not None and config.output_tokens is not None
    return (length_distribution(config.prompt_tokens, base_dir),
            length_distribution(config.output_tokens, base_dir))


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


def _tenant_traffic(config: WorkloadConfig, tenants: list[TenantConfig], seed: int,
                    base_dir: Path, max_model_len: int) -> BuiltTraffic:
    """Each tenant's stream from its own child seed, spliced by arrival time (ties: tenant
    order). With `num_requests` each tenant draws that many and the merge keeps the first;
    `duration_s` also cuts trace tenants."""
    streams = np.random.SeedSequence(seed).spawn(len(tenants))
    parts = [_one_tenant(config, tenant, stream, base_dir, max_model_len)
             for tenant, stream in zip(tenants, streams, strict=True)]
    merged, tenant = splice_tenants([trace for trace, _ in parts])
    clipped = np.concatenate([mask for _, mask in parts])[
        np.argsort(np.concatenate([trace.arrival_s for trace, _ in parts]), kind="stable")]
    keep = np.arange(len(merged)) < (config.num_requests or len(merged))
    if config.duration_s is not None:
        keep &= merged.arrival_s < config.duration_s
    rows = np.flatnonzero(keep)
    priority = np.array([t.priority for t in tenants], dtype=np.int64)[tenant]
    blocks = merged.prefix_blocks
    traffic = OpenLoopTraffic(merged.arrival_s[rows], merged.prompt_tokens[rows],
                              merged.output_tokens[rows], tenant[rows], priority[rows],
                              prefix_blocks=None if blocks is None else blocks.take(rows))
    names = ", ".join(f"{t.name} ({_tenant_source(t)})" for t in tenants)
    return BuiltTraffic(traffic, ClipTally(int(clipped[rows].sum())), f"tenants {names}",
                        merged.notes)


def _tenant_source(tenant: TenantConfig) -> str:
    arrivals = tenant.arrivals
    if isinstance(arrivals, TraceArrivals):
        return f"trace {arrivals.path}"
    return f"{arrivals.kind} {arrivals.rate:g}/s"


def _one_tenant(config: WorkloadConfig, tenant: TenantConfig, stream: np.random.SeedSequence,
                base_dir: Path, max_model_len: int) -> tuple[wl.TraceRequests, np.ndarray]:
    """One tenant's requests as a trace, and which of them were clipped to the context."""
    rngs = _Rngs(stream)
    if isinstance(tenant.arrivals, TraceArrivals):  # replayed as is, like a one-stream trace
        trace = replay_trace(tenant.arrivals, base_dir, rngs.arrivals).trace
        return trace, np.zeros(len(trace), dtype=bool)
    assert tenant.prompt_tokens is not None and tenant.output_tokens is not None  # config rule
    times = _open_loop_times(config, tenant.arrivals, rngs.arrivals)
    drawn_prompt = length_distribution(tenant.prompt_tokens, base_dir).sample(
        np.random.default_rng(rngs.prompt_seed), times.size)
    drawn_output = length_distribution(tenant.output_tokens, base_dir).sample(
        np.random.default_rng(rngs.output_seed), times.size)
    prompt, output, _ = clip_to_context(drawn_prompt, drawn_output, max_model_len)
    trace = wl.TraceRequests(times, prompt, output, source=tenant.name)
    return trace, (prompt != drawn_prompt) | (output != drawn_output)


def _trace_traffic(config: WorkloadConfig, arrivals: TraceArrivals, base_dir: Path,
                   rng: np.random.Generator) -> BuiltTraffic:
    replayed = replay_trace(arrivals, base_dir, rng)  # loaded and transformed
    trace, times = replayed.trace, replayed.trace.arrival_s
    keep = np.ones(times.size, dtype=bool)
    if config.duration_s is not None:
        keep &= times < config.duration_s
    if config.num_requests is not None:
        keep &= np.arange(times.size) < config.num_requests
    blocks = trace.prefix_blocks
    traffic = OpenLoopTraffic(
        times[keep], trace.prompt_tokens[keep], trace.output_tokens[keep],
        prefix_blocks=None if blocks is None else blocks.take(np.flatnonzero(keep)))
    source = "; ".join((replayed.description, *trace.notes))
    return BuiltTraffic(traffic, ClipTally(0), source, trace.notes)


def _closed_loop(config: WorkloadConfig, arrivals: ClosedLoopArrivals,
                 prompts: wl.LengthDistribution, outputs: wl.LengthDistribution,
                 rngs: _Rngs, max_model_len: int) -> BuiltTraffic:
    tally = ClipTally()

    pool = arrivals.prompt_pool

    def lengths() -> Iterator[tuple[int, int]]:
        # Fresh generators per call, so every arm sees the same sequence of lengths.
        prompt_chunks = _chunks(prompts, np.random.default_rng(rngs.prompt_seed))
        output_chunks = _chunks(outputs, np.random.default_rng(rngs.output_seed))
        if pool is not None:
            prompt_chunks = _pooled(prompt_chunks, pool, entries())
        tally.count = 0
        for drawn_prompt, drawn_output in zip(prompt_chunks, output_chunks, strict=True):
            prompt, output, _ = clip_to_context(drawn_prompt, drawn_output, max_model_len)
            changed = ((prompt != drawn_prompt) | (output != drawn_output)).tolist()
            for p, o, was_clipped in zip(prompt.tolist(), output.tolist(), changed, strict=True):
                tally.count += was_clipped
                yield p, o

    def entries() -> Iterator[int]:
        assert pool is not None
        return (int(entry) for chunk in _pool_order(pool, rngs.pool_seed) for entry in chunk)

    traffic = ClosedLoopTraffic(arrivals.concurrency, arrivals.think_time_s, lengths,
                                config.num_requests, config.duration_s,
                                prompt_entries=None if pool is None else entries,
                                drain_after=arrivals.drain_after)
    users = f"closed loop, {arrivals.concurrency} users"
    return BuiltTraffic(traffic, tally, users if pool is None
                        else f"{users} drawing from {pool} distinct prompts")


def _pool_order(pool: int, seed: np.random.SeedSequence) -> Iterator[np.ndarray]:
    """The pool entries in the order requests take them: a fresh shuffle of every entry per
    pass, without end."""
    rng = np.random.default_rng(seed)
    while True:
        yield rng.permutation(pool)


def _pooled(prompt_chunks: Iterator[np.ndarray], pool: int,
            entries: Iterator[int]) -> Iterator[np.ndarray]:
    """Prompt lengths of requests drawing from a pool, `_LENGTH_CHUNK` at a time as every
    length stream: entry k keeps the k-th length drawn."""
    drawn: list[np.ndarray] = []
    while sum(chunk.size for chunk in drawn) < pool:
        drawn.append(next(prompt_chunks))
    entry_lengths = np.concatenate(drawn)[:pool]
    while True:
        yield entry_lengths[np.fromiter(entries, dtype=np.int64, count=_LENGTH_CHUNK)]


def _chunks(lengths: wl.LengthDistribution, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """Lengths `_LENGTH_CHUNK` at a time, without end; a corpus in order keeps its place
    from chunk to chunk."""
    if isinstance(lengths, InOrderColumn):
        yield from lengths.chunks(_LENGTH_CHUNK)
    while True:
        yield lengths.sample(rng, _LENGTH_CHUNK)


def _sessions(config: WorkloadConfig, arrivals: SessionArrivals,
              lengths: tuple[wl.LengthDistribution, wl.LengthDistribution], rngs: _Rngs,
              base_dir: Path, max_model_len: int) -> BuiltTraffic:
    """Session starts, turn counts and message lengths, all from the arrival stream's seed
    (one stream keeps each session's draws together)."""
    shape = SessionShape(
        num_sessions=arrivals.num_sessions, session_rate=arrivals.session_rate,
        turns=length_distribution(arrivals.turns, base_dir), user_tokens=lengths[0],
        output_tokens=lengths[1], system_prompt_tokens=arrivals.system_prompt_tokens,
        max_model_len=max_model_len)
    sessions = generate_sessions(shape, rngs.arrivals)
    traffic = SessionTraffic(sessions, arrivals.think_time_s, config.num_requests,
                             config.duration_s)
    source = (f"{arrivals.num_sessions} sessions, {sessions.prompt_tokens.size} turns "
              f"({sessions.clipped} sessions stopped at max_model_len)")
    return BuiltTraffic(traffic, ClipTally(0), source)
