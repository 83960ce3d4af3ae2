"""The weighted router in whole runs (docs/design.md §2): without delay, one scorer routes every
request where the matching single-signal router does; with a stale snapshot a burst herds onto
one replica, and counting the router's own assignments spreads it again."""

from __future__ import annotations

from pathlib import Path

import pytest

from batchsim.experiment.loader import ConfigError
from tests.validation.experiment_builder import base_experiment, run_dict


def _bursty(router: object) -> dict:
    return base_experiment(
        replicas=3, router=router, kv_cache={"num_blocks": 300},
        workload={"arrivals": {"kind": "gamma", "rate": 30.0, "cv": 3.0},
                  "prompt_tokens": {"kind": "lognormal", "mean": 300, "cv": 1.0},
                  "output_tokens": {"kind": "geometric", "mean": 60}, "num_requests": 150},
        policies=[{"name": "arm", "kind": "chunked_prefill", "token_budget": 512}])


def _weighted(*kinds: str, **settings: object) -> dict:
    return {"kind": "weighted", "scorers": [{"kind": kind} for kind in kinds], **settings}


@pytest.mark.parametrize(("single", "scorer"), [("least_outstanding", "queue_depth"),
                                                ("least_kv", "kv_use")])
def test_one_scorer_without_delay_routes_as_the_single_signal_router(
        tmp_path: Path, single: str, scorer: str) -> None:
    plain = run_dict(tmp_path, _bursty(single)).arms[0].requests
    weighted = run_dict(tmp_path, _bursty(_weighted(scorer))).arms[0].requests
    assert plain["replica"].tolist() == weighted["replica"].tolist()
    assert plain["ttft_s"].tolist() == weighted["ttft_s"].tolist()


def _largest_share(requests, window_s: float) -> float:
    """Mean over windows of the share of a window's arrivals sent to its busiest replica."""
    window = (requests["arrival_s"] // window_s).astype(int)
    counts = requests.groupby([window, "replica"]).size().unstack(fill_value=0)
    counts = counts[counts.sum(axis=1) >= 4]
    return float((counts.max(axis=1) / counts.sum(axis=1)).mean())


def test_stale_signals_herd_and_own_assignments_spread(tmp_path: Path) -> None:
    stale = _weighted("queue_depth", "kv_use", signal_delay_s=1.0)
    counted = {**stale, "count_own_assignments": True}
    herded = run_dict(tmp_path, _bursty(stale)).arms[0].requests
    spread = run_dict(tmp_path, _bursty(counted)).arms[0].requests
    assert _largest_share(herded, 1.0) > 0.9  # a refresh interval's arrivals on one replica
    assert _largest_share(spread, 1.0) < 0.6


@pytest.mark.parametrize(("router", "message"), [
    ("least_kvv", "router: expected one of: round_robin"),
    (_weighted("kv_use", "kv_use"), "router.scorers.1.kind: kv_use is already scorers.0"),
    ({**_weighted("kv_use"), "signal_delay": 1}, "router.signal_delay: unknown key"),
    (_weighted("kv_use", signal_delay_s=-1), "router.signal_delay_s: expected a value >= 0"),
    ({"kind": "weighted", "scorers": []}, "router.scorers: expected at least 1 item"),
])
def test_router_errors_name_the_key(tmp_path: Path, router: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        run_dict(tmp_path, _bursty(router))
