"""The console table's ITL rows: the gap percentiles, their max, each request's longest."""

from batchsim.apps.console import _rows

_DIST = {"mean": 0.02, "p50": 0.01, "p90": 0.015, "p99": 0.03, "p999": 0.05}


def _metrics() -> dict[str, object]:
    return {"completed": 10, "rejected": 0, "request_throughput_rps": 1.0,
            "output_throughput_tps": 100.0, "ttft_s": _DIST, "tpot_s": _DIST, "e2e_s": _DIST,
            "itl_s": {**_DIST, "max": 1.0805},
            "max_gap_s": {**_DIST, "p50": 0.5, "p99": 1.0, "max": 1.0805},
            "preemptions": 0, "kv_utilization": {"mean": 0.4, "max": 1.0},
            "goodput_rps": 1.0, "slo_attainment": 1.0}


def test_itl_rows_beside_ttft_and_tpot() -> None:
    rows = dict(_rows(_metrics()))
    assert rows["ITL p50 / p99 (ms)"] == "10.0 / 30.0"
    assert rows["ITL max (ms)"] == "1,080.5"
    assert rows["req max gap p50 / p99 (ms)"] == "500.0 / 1,000.0"
    labels = [label for label, _ in _rows(_metrics())]
    assert labels.index("ITL p50 / p99 (ms)") == labels.index("TPOT p50 / p99 (ms)") + 1


def test_a_run_without_gaps_prints_dashes() -> None:
    metrics = _metrics()
    metrics["itl_s"] = {**_DIST, "max": None}
    del metrics["max_gap_s"]  # a summary written before the per-request figure
    rows = dict(_rows(metrics))
    assert rows["ITL max (ms)"] == "-"
    assert rows["req max gap p50 / p99 (ms)"] == "- / -"
