"""GPU counts (both pools of a disaggregated arm), costs, and the Pareto front."""

from __future__ import annotations

import pytest

from batchsim.apps.plan.cost import cost_per_hour, usd_per_million_tokens
from batchsim.apps.plan.pareto import ParetoPoint, pareto_front
from batchsim.apps.plan.setups import gpus_by_hardware
from batchsim.experiment.loader import ConfigError
from batchsim.experiment.schema import DisaggregatedArm, Experiment
from tests.plan.tiny import EXPERIMENT


def test_gpus_are_replicas_times_tensor_parallel_or_both_pools() -> None:
    exp = Experiment.model_validate({**EXPERIMENT, "tensor_parallel": 2, "replicas": 3})
    assert gpus_by_hardware(exp, exp.policies[0]) == {"h100-sxm": 6}
    arm = DisaggregatedArm(name="split", prefill_replicas=2, decode_replicas=3,
                           decode_hardware="h200-sxm", decode_tensor_parallel=4)
    # prefill: 2 replicas x the experiment's TP 2 on its H100s; decode: 3 x 4 on H200s
    assert gpus_by_hardware(exp, arm) == {"h100-sxm": 4, "h200-sxm": 12}
    assert cost_per_hour({"h100-sxm": 4, "h200-sxm": 12},
                         {"h100-sxm": 2.0, "h200-sxm": 3.0}) == 44.0


def test_costs_need_every_price_or_none() -> None:
    assert cost_per_hour({"h100-sxm": 4}, {}) is None
    with pytest.raises(ConfigError, match="no price for l40s"):
        cost_per_hour({"l40s": 1}, {"h100-sxm": 2.0})
    # $8/hour over 1,000 tokens/s = 3.6 M tokens/hour
    assert usd_per_million_tokens(8.0, 1000.0) == pytest.approx(8.0 / 3.6)


def _point(label: str, per_gpu: float, per_user: float, meets: bool = True) -> ParetoPoint:
    return ParetoPoint(label, "arm", 1, 1.0, per_gpu, per_user, meets)


def test_the_front_keeps_the_points_no_other_beats_on_both_axes() -> None:
    points = [_point("a", 100, 10), _point("b", 80, 20), _point("c", 70, 15),  # c < b
              _point("d", 40, 40), _point("e", 200, 50, meets=False)]  # e misses the SLO
    assert [p.label for p in pareto_front(points)] == ["a", "b", "d"]
