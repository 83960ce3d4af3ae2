"""A disaggregated arm's KV link derived from the pools' NICs (`kv_link.bandwidth_gb_s: nics`):
one link per prefill replica, its bandwidth the lower of the two replicas' NICs, and the
refusal where a profile gives none (docs/how-to/multi-node.md)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import simpy
import yaml

from batchsim.experiment.loader import load_experiment
from batchsim.experiment.policy_factory import ArmError
from batchsim.experiment.runner import run_experiment
from batchsim.sim.disaggregated import DisaggregatedSimulation
from batchsim.sim.kv_link import KVLinks
from tests.cli_checks import fails_cleanly
from tests.policies.test_disaggregated import _decode, _link, _prefill, _traffic
from tests.policies.test_invariants import LinearCost


def _two_at_once(per_prefill_replica: bool) -> list[float]:
    """Two 320-token prompts at once on two prefill replicas: each KV takes 1 s alone."""
    link = replace(_link(bandwidth=320e3), per_prefill_replica=per_prefill_replica)
    sim = DisaggregatedSimulation([_prefill(100), _prefill(100)], [_decode(100), _decode(100)],
                                  prefill_cost=LinearCost(), decode_cost=LinearCost(),
                                  link=link, traffic=_traffic([0.0, 0.0], [320, 320], [8, 8]))
    sim.run()
    assert sorted(h.prefill_replica for h in sim.handoffs.values()) == [0, 1]
    return [h.transfer_end_s - h.transfer_start_s for h in sim.handoffs.values()]


def test_each_prefill_replica_sends_over_its_own_link() -> None:
    assert _two_at_once(per_prefill_replica=True) == pytest.approx([1.0, 1.0])
    # One shared link: the two transfers share its bandwidth and both take twice as long.
    assert _two_at_once(per_prefill_replica=False) == pytest.approx([2.0, 2.0])


def _disaggregated(**arm: Any) -> dict[str, Any]:
    return {
        "name": "nics", "seed": 1, "model": "llama-3.1-8b", "hardware": "h200-sxm",
        "max_model_len": 4096,
        "workload": {"arrivals": {"kind": "poisson", "rate": 8.0},
                     "prompt_tokens": {"kind": "lognormal", "mean": 1500, "cv": 0.5},
                     "output_tokens": {"kind": "lognormal", "mean": 100, "cv": 0.5},
                     "num_requests": 200},
        "policies": [{"name": "d", "kind": "disaggregated", "prefill_tensor_parallel": 2,
                      "decode_tensor_parallel": 1, **arm}],
    }


def _run(tmp_path: Path, data: dict[str, Any]) -> dict[str, Any]:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    exp, base_dir = load_experiment(path)
    return dict(run_experiment(exp, base_dir).arms[0].metrics)


def test_one_prefill_replica_on_its_nics_is_the_link_of_their_bandwidth(tmp_path: Path) -> None:
    # Prefill TP2 sends over 2 x 50 GB/s, the TP1 decode replica receives over 1 x 50: 50 GB/s.
    nics = _run(tmp_path, _disaggregated(kv_link={"bandwidth_gb_s": "nics"}))
    named = _run(tmp_path, _disaggregated(kv_link={"bandwidth_gb_s": 50}))
    assert nics == named
    faster = _run(tmp_path, _disaggregated(kv_link={"bandwidth_gb_s": 100}))
    assert faster["kv_transfer_s"]["p50"] < nics["kv_transfer_s"]["p50"]


def test_a_profile_without_nics_is_refused_under_the_key(tmp_path: Path) -> None:
    data = _disaggregated(kv_link={"bandwidth_gb_s": "nics"}, decode_hardware="a100-sxm-80gb")
    with pytest.raises(ArmError, match=r"^policies\.0\.kv_link\.bandwidth_gb_s: nics needs the "
                                       r"decode pool's GPU profile \(a100-sxm-80gb\)"):
        _run(tmp_path, data)
    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    fails_cleanly(["validate", str(path)], "policies.0.kv_link.bandwidth_gb_s: nics needs",
                  "inter_node_bandwidth_bytes_per_s")


def test_anything_else_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump(_disaggregated(kv_link={"bandwidth_gb_s": "fast"})),
                    encoding="utf-8")
    fails_cleanly(["validate", str(path)],
                  "policies.0.kv_link.bandwidth_gb_s: expected a number > 0, nics or null "
                  "(got 'fast')")


def test_a_replica_added_by_scaling_gets_a_link_of_its_own() -> None:
    env = simpy.Environment()
    links = KVLinks(env, bandwidth_bytes_s=1e9, latency_s=0.0, shared=False, prefill_replicas=2)
    assert links.of(0) is not links.of(1)
    added = links.of(3)  # replicas 2 and 3 were started by an autoscaler
    assert len(links.links) == 4 and added is links.of(3)
    added.send(1e9, lambda: None)
    env.run()
    assert links.utilization(0.0, 1.0) == pytest.approx(0.25)  # one link of four busy
    shared = KVLinks(env, bandwidth_bytes_s=1e9, latency_s=0.0, shared=True, prefill_replicas=2)
    assert shared.of(0) is shared.of(7) and len(shared.links) == 1
