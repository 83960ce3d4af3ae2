"""The time series of a run: one row per bin of the run record's step statistics.

The bins were filled as the run went (sim/time_bins.py): each holds Σ value × seconds of the
step-level signals (piecewise constant in time, so the sums are exact) and of the occupancy
trace, the tokens of the steps that ended in it, and their largest KV use. Here each sum
becomes a time average over its bin.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from batchsim.sim.recorder import RunRecord
from batchsim.sim.time_bins import MAX_BINS

__all__ = ["MAX_BINS", "bin_timeseries"]


def bin_timeseries(record: RunRecord, end_s: float) -> pd.DataFrame:
    """One row per bin from 0 to `end_s` (the last event of the run), bins as wide as the
    record was measured for (`RunRecord.measure`), doubled as often as a run longer than
    MAX_BINS of them needs (each row's `t_start_s` says where it starts), so the table's
    memory stays bounded."""
    series = record.steps.series(end_s)
    widths = np.diff(series.edges)
    average = {name: values / widths for name, values in series.spans.items()}
    for per_replica in ("busy", "batch", "kv"):  # in place: a run may have a million bins
        average[per_replica] /= record.num_replicas
    return pd.DataFrame({
        "t_start_s": series.edges[:-1],
        "busy_fraction": average["busy"],
        "batch_size": average["batch"],
        "num_waiting": average["waiting"],
        "in_system": average["in_system"],
        "kv_utilization_mean": average["kv"],
        "kv_utilization_max": series.kv_max,
        "new_tokens": series.counts["new_tokens"],
        "output_tokens": series.counts["output_tokens"],
        "preemptions": series.counts["preemptions"],
    })
