"""What a run keeps of its steps does not grow with the number of steps (issue #18, item 14):
over the same span with the same bins, ten times as many steps leave the recorder's
accumulators the same size, where a step log grew by about 20 bytes a step
(docs/performance.md, "What a run keeps")."""

from __future__ import annotations

import gc
import weakref

from batchsim.sim.recorder import RunRecord
from batchsim.sim.request import Request, RequestStatus
from batchsim.sim.step_stats import DRAIN_ROWS, Measurement

_SPAN_S = 200.0  # a request arrives every second and finishes a second later


def _kept_bytes(num_steps: int, replicas: int = 2) -> tuple[int, int]:
    """Bytes the step statistics hold at the end of a run of `num_steps` steps per replica
    (stretches of 50 steps, a few token counts), and their most during it."""
    record = RunRecord(kv_blocks_per_replica=1000, num_replicas=replicas)
    record.measure(Measurement(warmup_s=10.0, cooldown_s=0.0, bin_s=1.0))
    duration = _SPAN_S / num_steps
    stretch = 50
    peak, second = 0, 0
    requests: list[Request] = []
    for first in range(0, num_steps, stretch):
        start = first * duration
        while second <= start:  # the traffic: one arrival a second, each served in a second
            if requests:
                done = requests[-1]
                done.status, done.finish_s = RequestStatus.FINISHED, float(second)
                record.request_done(done)
            requests.append(Request(second, float(second), 100, 10))
            record.add_request(requests[-1])
            record.record_occupancy(float(second), 1 + second % 3)
            second += 1
        starts = [start + k * duration for k in range(stretch)]
        for replica in range(replicas):
            record.steps.extend(start_s=starts, duration_s=[duration] * stretch,
                                replica=replica, num_seqs=8, new_tokens=8 + first % 4,
                                emitted=8, kv_used=list(range(stretch)), waiting=first % 5)
        peak = max(peak, record.steps.nbytes())
    last = requests[-1]
    last.status, last.finish_s = RequestStatus.FINISHED, _SPAN_S
    record.request_done(last)
    record.steps.totals()  # folds what was still in the log
    assert record.steps.totals().steps == num_steps * replicas
    return record.steps.nbytes(), peak


def test_the_step_statistics_do_not_grow_with_the_steps():
    few, few_peak = _kept_bytes(20_000)
    many, many_peak = _kept_bytes(200_000)
    # The bins (nine numbers each, their arrays grown by a quarter and 1,024 bins at a
    # time), the replicas' sums and token counts, however many steps.
    budget = 9 * 8 * (int(1.25 * _SPAN_S) + 1024) + 8192
    assert few <= budget and many <= budget
    assert many < 20 * 2 * 200_000 / 100  # a hundredth of what a log of its steps held
    # During the run: the chunk not yet folded (a fixed number of rows) and the steps since
    # the last finish (a second of them here), not the run's.
    assert few_peak < many_peak <= 60 * 2 * DRAIN_ROWS + 64 * 2 * 200_000 / _SPAN_S


def test_a_record_goes_with_its_last_reference():
    """The step statistics read the record's KV capacities through a weak reference: no
    cycle, so a finished record (its bins and gaps) is freed at once, not by the collector."""
    record = RunRecord(kv_blocks_per_replica=8)
    record.measure(Measurement(bin_s=1.0))
    record.steps.append(0.0, 1.0, 0, 1, 1, 1, 4, 0, 0)
    assert record.steps.totals().steps == 1  # the capacity was read while folding
    gone = weakref.ref(record)
    gc.disable()
    try:
        del record
        assert gone() is None
    finally:
        gc.enable()
