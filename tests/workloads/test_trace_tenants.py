"""Traces spliced as tenants: each trace's requests keep their times, lengths and tenant."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

import batchsim.workloads as wl
from batchsim.experiment.schema import WorkloadConfig
from batchsim.experiment.traffic import build_traffic
from batchsim.sim.traffic import OpenLoopTraffic

CODE = {"kind": "trace", "path": "azure2023-code", "format": "azure2023"}
CONV = {"kind": "trace", "path": "azure2023-conv", "format": "azure2023"}


def _build(workload: dict[str, Any]) -> OpenLoopTraffic:
    config = WorkloadConfig.model_validate(workload)
    built = build_traffic(config, seed=1, base_dir=Path("."), max_model_len=1_000_000)
    assert isinstance(built.traffic, OpenLoopTraffic)
    return built.traffic


def test_two_traces_splice_into_one_stream_by_time() -> None:
    traffic = _build({"tenants": [{"name": "code", "arrivals": CODE},
                                  {"name": "conv", "arrivals": CONV}], "duration_s": 120})
    assert traffic.tenant is not None
    assert (np.diff(traffic.arrival_s) >= 0).all()
    for index, name in enumerate(("azure2023-code", "azure2023-conv")):
        trace = wl.load_trace(wl.resolve_trace_path(name, Path(".")), "azure2023")
        first = trace.arrival_s < 120
        mine = traffic.tenant == index
        assert np.array_equal(traffic.prompt_tokens[mine], trace.prompt_tokens[first])
        assert np.array_equal(traffic.arrival_s[mine], trace.arrival_s[first])


def test_a_trace_tenant_mixes_with_a_synthetic_one() -> None:
    synthetic = {"name": "chat", "arrivals": {"kind": "poisson", "rate": 2.0},
                 "prompt_tokens": {"kind": "fixed", "value": 64},
                 "output_tokens": {"kind": "fixed", "value": 8}}
    traffic = _build({"tenants": [synthetic, {"name": "code", "arrivals": CODE}],
                      "duration_s": 60})
    assert traffic.tenant is not None
    assert (traffic.prompt_tokens[traffic.tenant == 0] == 64).all()
    assert (traffic.arrival_s < 60).all() and (traffic.tenant == 1).any()


@pytest.mark.parametrize(("tenant", "message"), [
    ({"name": "code", "arrivals": CODE, "prompt_tokens": {"kind": "fixed", "value": 8}},
     "tenants.0.prompt_tokens"),
    ({"name": "chat", "arrivals": {"kind": "poisson", "rate": 1.0},
      "output_tokens": {"kind": "fixed", "value": 8}}, "tenants.0.prompt_tokens"),
])
def test_lengths_come_from_the_trace_or_from_distributions(tenant: dict[str, Any],
                                                           message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        WorkloadConfig.model_validate({"tenants": [tenant], "duration_s": 10})
