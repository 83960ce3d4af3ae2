"""One arm's timeline in the Chrome Trace Event Format, which Perfetto and chrome://tracing open
(docs/reference/outputs.md, "trace.json").

A process per pool of replicas with a thread per replica, holding one complete event per
engine step; a process of requests with a thread per request, holding its spans: queued,
prefill, decode, preempted and, disaggregated, the wait for a decode replica and the KV
transfer. Timestamps are microseconds of simulated time.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import pandas as pd

from batchsim.sim.step_trace import Preemption, StepTrace

_US = 1e6
Event = dict[str, Any]


def timeline(requests: pd.DataFrame, steps: StepTrace, pools: Sequence[tuple[str, int]],
             arm: str) -> dict[str, Any]:
    """The trace document of one arm: `requests` its request table (with the transfer columns
    when disaggregated), `steps` what the run kept, `pools` each pool's name and replica count
    in replica order (the record's replica indices run through them)."""
    kept = _kept_requests(requests, steps)
    requests_pid = len(pools) + 1
    events = [*_pool_names(pools), _name("process_name", requests_pid, 0, "requests")]
    events += _step_events(steps, pools)
    by_request: dict[int, list[Preemption]] = {}
    for preemption in steps.preemptions:
        by_request.setdefault(preemption.request_id, []).append(preemption)
    for row in kept.itertuples(index=False):
        request_id: Any = row.request_id
        events.append(_name("thread_name", requests_pid, int(request_id),
                            f"request {request_id}"))
        events += _request_events(row, requests_pid, by_request.get(int(request_id), []))
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": _kept_summary(arm, requests, kept, steps)}


def _kept_requests(requests: pd.DataFrame, steps: StepTrace) -> pd.DataFrame:
    bounds = steps.bounds
    arrival = requests["arrival_s"].to_numpy()
    inside = requests[(arrival >= bounds.start_s) & (arrival <= bounds.end_s)]
    return inside.sort_values("arrival_s", kind="stable").head(bounds.max_requests)


def _name(kind: str, pid: int, tid: int, name: str) -> Event:
    return {"name": kind, "ph": "M", "ts": 0, "pid": pid, "tid": tid, "args": {"name": name}}


def _pool_names(pools: Sequence[tuple[str, int]]) -> Iterator[Event]:
    """A process per pool, a thread per replica, named by the pool and the record's index."""
    colocated = len(pools) == 1
    first = 0
    for pid, (pool, count) in enumerate(pools, start=1):
        yield _name("process_name", pid, 0, "replicas" if colocated else f"{pool} pool")
        for tid in range(count):
            yield _name("thread_name", pid, tid, f"replica {tid}" if colocated
                        else f"{pool} {tid} (replica {first + tid})")
        first += count


def _step_events(steps: StepTrace, pools: Sequence[tuple[str, int]]) -> list[Event]:
    """One complete event per kept step, on its pool's process and replica's thread."""
    track = [(pid, tid) for pid, (_, count) in enumerate(pools, start=1) for tid in range(count)]
    events = []
    for start, duration, replica, batch, prefill, decode, preempted in zip(
            steps.start_s, steps.duration_s, steps.replica, steps.batch_size,
            steps.prefill_tokens, steps.decode_tokens, steps.preempted, strict=True):
        pid, tid = track[replica]
        kind = "decode" if prefill == 0 else "prefill" if decode == 0 else "mixed"
        events.append({
            "name": f"{kind} step", "cat": "step", "ph": "X", "ts": start * _US,
            "dur": duration * _US, "pid": pid, "tid": tid,
            "args": {"batch_size": batch, "prefill_tokens": prefill, "decode_tokens": decode,
                     "preemptions": preempted}})
    return events


def _span(name: str, pid: int, row: Any, start: float, end: float,
          args: dict[str, Any] | None = None) -> Event:
    return {"name": name, "cat": "request", "ph": "X", "ts": start * _US,
            "dur": (end - start) * _US, "pid": pid, "tid": int(row.request_id),
            "args": {"prompt_tokens": int(row.prompt_tokens),
                     "output_tokens": int(row.output_tokens),
                     **(args or {})}}


def _request_events(row: Any, pid: int, preemptions: list[Preemption]) -> list[Event]:
    """A finished request's phases one after another (its preemptions within them); a
    rejected one is an instant event at its arrival."""
    if not row.finished:
        return [{"name": "rejected", "cat": "request", "ph": "i", "s": "t",
                 "ts": row.arrival_s * _US, "pid": pid, "tid": int(row.request_id),
                 "args": {"reason": row.reject_reason}}]
    # Disaggregated: the prefill ends with the prefill stage's token, which the client may see
    # only later, through the decode replica (docs/background/engines.md).
    prefill_end = getattr(row, "prefill_token_s", math.nan)
    prefill_end = row.first_token_s if math.isnan(prefill_end) else prefill_end
    events = [_span("queued", pid, row, row.arrival_s, row.first_scheduled_s),
              _span("prefill", pid, row, row.first_scheduled_s, prefill_end)]
    decode_from = prefill_end
    kv_arrival = getattr(row, "kv_arrival_s", math.nan)
    if not math.isnan(kv_arrival):
        # A layer-wise transfer starts during the prefill step: drawn from the first token
        # on, so the request's spans stay one after another; its true start is in args.
        sent = max(row.kv_transfer_start_s, prefill_end)
        events.append(_span("waiting_for_decode", pid, row, prefill_end, sent))
        events.append(_span("transferred", pid, row, sent, kv_arrival,
                            {"transfer_start_us": row.kv_transfer_start_s * _US,
                             "prefill_replica": int(row.prefill_replica)}))
        decode_from = kv_arrival
    if row.output_tokens > 1:
        events.append(_span("decode", pid, row, decode_from, row.finish_s))
    for preemption in preemptions:
        end = row.finish_s if math.isnan(preemption.end_s) else preemption.end_s
        events.append(_span("preempted", pid, row, preemption.start_s, end,
                            {"replica": preemption.replica}))
    return events


def _kept_summary(arm: str, requests: pd.DataFrame, kept: pd.DataFrame,
                  steps: StepTrace) -> dict[str, Any]:
    """What the file holds and what it left out (the trace's `otherData`)."""
    bounds = steps.bounds
    arrival = requests["arrival_s"].to_numpy()
    in_window = int(((arrival >= bounds.start_s) & (arrival <= bounds.end_s)).sum())

    def finite(value: float) -> float | None:
        return value if math.isfinite(value) else None
    return {
        "arm": arm,
        "clock": "microseconds of simulated time",
        "window_s": [bounds.start_s, finite(bounds.end_s)],
        "steps": {"kept": len(steps), "dropped": steps.steps_dropped,
                  "complete_until_s": finite(steps.complete_until_s),
                  "fast_path": "each step of a fast-path stretch is its own event"},
        "requests": {"in_window": in_window, "kept": len(kept),
                     "max_requests": bounds.max_requests},
        "preemptions": {"kept": len(steps.preemptions), "dropped": steps.preemptions_dropped},
    }
