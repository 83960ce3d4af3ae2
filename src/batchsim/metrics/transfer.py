"""What a disaggregated arm adds to the outputs: each request's KV transfer, the distribution of
transfer times, the link's utilisation, and each pool's busy fraction and KV use."""

from __future__ import annotations

import numpy as np
import pandas as pd

from batchsim.metrics.summary import distribution, measured_mask
from batchsim.sim.disaggregated import DisaggregatedSimulation
from batchsim.sim.recorder import RunRecord


def transfer_columns(sim: DisaggregatedSimulation) -> dict[str, np.ndarray]:
    """Per request, in record order: the prefill replica that served it (-1: none), when its
    prefill stage computed its first token, when its KV started to cross the link and when it
    arrived, the transfer time, and the handoff time from the prefill's first token to its KV
    at the decode replica (waiting for blocks included). NaN where there was no transfer
    (rejected, or a one-token answer)."""
    requests = sim.record.requests
    count = len(requests)
    prefill = np.full(count, -1, dtype=np.int32)
    start = np.full(count, np.nan)
    arrival = np.full(count, np.nan)
    prefill_token = np.full(count, np.nan)
    for row, request in enumerate(requests):
        handoff = sim.handoffs.get(request.request_id)
        if handoff is None:
            continue
        prefill[row] = handoff.prefill_replica
        start[row] = handoff.transfer_start_s
        arrival[row] = handoff.transfer_end_s
        prefill_token[row] = handoff.prefill_token_s
    return {"prefill_replica": prefill, "prefill_token_s": prefill_token,
            "kv_transfer_start_s": start, "kv_arrival_s": arrival,
            "kv_transfer_s": arrival - start, "kv_handoff_s": arrival - prefill_token}


def transfer_metrics(requests: pd.DataFrame, sim: DisaggregatedSimulation, *, warmup_s: float,
                     cooldown_s: float, start: float, end: float) -> dict[str, object]:
    """Transfer and handoff times of the measured requests that finished after a transfer;
    the link's busy fraction over the measurement window [start, end] (the mean of the
    prefill replicas' links where each has its own)."""
    measured = measured_mask(requests, warmup_s, cooldown_s)
    transfer = requests["kv_transfer_s"].to_numpy()
    moved = measured & requests["finished"].to_numpy() & ~np.isnan(transfer)
    prompt_tokens = requests["prompt_tokens"].to_numpy()[moved]
    return {
        "kv_transfer_s": distribution(transfer[moved]),
        "kv_handoff_s": distribution(requests["kv_handoff_s"].to_numpy()[moved]),
        "kv_link_utilization": sim.links.utilization(start, end),
        "kv_transferred_gb": float(prompt_tokens.sum()) * sim.spec.kv_bytes_per_token / 1e9,
    }


def pool_step_stats(record: RunRecord, replicas: range, start: float,
                    end: float) -> dict[str, object]:
    """GPU busy fraction and KV utilisation {mean, max} of some replicas over [start, end]."""
    sums = record.steps.window_sums(start, end, replicas)
    span = max(end - start, 1e-12) * len(replicas)
    return {
        "gpu_busy_fraction": sums.busy_s / span,
        "kv_utilization": {"mean": sums.kv_s / span, "max": sums.kv_max},
    }
