"""Multi-tenant traffic: each tenant's stream from its own seed, merged by arrival time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from batchsim.experiment.schema import WorkloadConfig
from batchsim.experiment.traffic import build_traffic
from batchsim.sim.traffic import OpenLoopTraffic


def _tenant(name: str, rate: float, prompt: int, **extra: Any) -> dict[str, Any]:
    return {"name": name, "arrivals": {"kind": "poisson", "rate": rate},
            "prompt_tokens": {"kind": "fixed", "value": prompt},
            "output_tokens": {"kind": "geometric", "mean": 20}, **extra}


def _build(tenants: list[dict[str, Any]], seed: int = 7, **stop: Any) -> OpenLoopTraffic:
    config = WorkloadConfig.model_validate({"tenants": tenants, **(stop or {"duration_s": 50})})
    built = build_traffic(config, seed=seed, base_dir=Path("."), max_model_len=4096)
    assert isinstance(built.traffic, OpenLoopTraffic)
    assert built.source.startswith("tenants chat (poisson 4/s), docs (poisson 1/s)")
    return built.traffic


def _two() -> list[dict[str, Any]]:
    return [_tenant("chat", 4.0, 100), _tenant("docs", 1.0, 3000, priority=2)]


def test_requests_are_merged_by_time_and_keep_their_tenant_and_priority():
    traffic = _build(_two())
    assert traffic.tenant is not None and traffic.priority is not None
    assert (np.diff(traffic.arrival_s) >= 0).all()
    chat = traffic.tenant == 0
    assert (traffic.prompt_tokens[chat] == 100).all()
    assert (traffic.prompt_tokens[~chat] == 3000).all()
    assert (traffic.priority == np.where(chat, 0, 2)).all()
    # Poisson counts over 50 s: about 200 and 50.
    assert 150 < chat.sum() < 250 and 30 < (~chat).sum() < 75


def test_same_seed_same_stream_and_a_tenant_does_not_depend_on_the_others():
    first, again = _build(_two()), _build(_two())
    for name in ("arrival_s", "prompt_tokens", "output_tokens", "tenant", "priority"):
        assert np.array_equal(getattr(first, name), getattr(again, name)), name
    three = _build([*_two(), _tenant("batch", 2.0, 500)])
    for traffic in (first, three):
        assert traffic.tenant is not None
    mine = first.tenant == 0
    same = three.tenant == 0
    assert np.array_equal(first.arrival_s[mine], three.arrival_s[same])
    assert np.array_equal(first.output_tokens[mine], three.output_tokens[same])
    other_seed = _build(_two(), seed=8)
    assert not np.array_equal(first.arrival_s[:10], other_seed.arrival_s[:10])


def test_num_requests_keeps_the_first_of_the_merged_stream():
    whole = _build(_two(), num_requests=300)
    cut = _build(_two(), num_requests=40)
    assert whole.arrival_s.size == 300 and cut.arrival_s.size == 40
    assert np.array_equal(whole.arrival_s[:40], cut.arrival_s)
    assert whole.tenant is not None and cut.tenant is not None
    assert np.array_equal(whole.tenant[:40], cut.tenant)
