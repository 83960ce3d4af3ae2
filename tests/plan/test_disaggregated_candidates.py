"""`plan.candidates.disaggregated`: prefill:decode splits of GPU budgets (or listed pool
sizes) with per-pool tensor parallelism, counted, labelled, run and ranked beside colocated
candidates; bad axes fail in one line naming the key, in `validate` as in `plan`."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from batchsim.apps.cli import app
from batchsim.apps.executors import InProcess
from batchsim.apps.plan.planner import run_plan
from batchsim.apps.plan.pool_splits import pool_splits
from batchsim.apps.plan.records import plan_document
from batchsim.experiment.loader import ConfigError
from batchsim.experiment.schema import DisaggregatedArm, PlanDisaggregatedConfig
from tests.plan.tiny import EXPERIMENT, write_experiment

SPLIT = {"name": "split", "kind": "disaggregated"}


def test_every_split_of_each_budget_uses_exactly_its_gpus() -> None:
    config = PlanDisaggregatedConfig(gpus=[4, 6], prefill_tensor_parallel=[1],
                                     decode_tensor_parallel=[1, 2])
    splits = pool_splits(DisaggregatedArm(name="split"), config, tensor_parallel=1)
    # 4 GPUs: P:D 1:3, 2:2, 3:1 with TP1 decode, 2:1 with TP2; 6 GPUs: 1:5..5:1, and 2:2, 4:1.
    assert len(splits) == 4 + 7
    assert [s.gpus for s in splits] == [4] * 4 + [6] * 7
    assert {(s.prefill_replicas, s.decode_replicas) for s in splits
            if s.gpus == 6 and s.decode_tensor_parallel == 2} == {(2, 2), (4, 1)}


def test_listed_pool_sizes_are_crossed_and_unlisted_ones_are_the_arms() -> None:
    arm = DisaggregatedArm(name="split", decode_replicas=3, prefill_tensor_parallel=2)
    config = PlanDisaggregatedConfig(prefill_replicas=[1, 2], decode_tensor_parallel=[1, 4])
    splits = pool_splits(arm, config, tensor_parallel=1)
    assert [(s.prefill_replicas, s.prefill_tensor_parallel, s.decode_replicas,
             s.decode_tensor_parallel) for s in splits] == [
        (1, 2, 3, 1), (2, 2, 3, 1), (1, 2, 3, 4), (2, 2, 3, 4)]
    assert [s.gpus for s in splits] == [5, 7, 14, 16]


def test_a_budget_with_no_split_is_an_error_naming_the_key() -> None:
    config = PlanDisaggregatedConfig(gpus=[3], prefill_tensor_parallel=[2],
                                     decode_tensor_parallel=[2])
    with pytest.raises(ConfigError, match=r"^plan\.candidates\.disaggregated\.gpus: 3 GPUs"):
        pool_splits(DisaggregatedArm(name="split"), config, tensor_parallel=1)


@pytest.mark.parametrize(("axes", "key"), [
    ({"gpus": [4], "prefill_replicas": [1]}, "gpus"),
    ({"decode_tensor_parallel": [2, 2]}, "decode_tensor_parallel"),
    ({"gpus": [0]}, "gpus.0"),
])
def test_bad_axes_are_refused(axes: dict, key: str) -> None:
    with pytest.raises(ValidationError, match=key):
        PlanDisaggregatedConfig.model_validate(axes)


def test_validate_refuses_what_plan_would(tmp_path: Path) -> None:
    plan = {"target_rate": 10, "candidates": {"policies": ["split"], "disaggregated": {
        "gpus": [3], "prefill_tensor_parallel": [2], "decode_tensor_parallel": [2]}}}
    file = write_experiment(tmp_path, plan, policies=[*EXPERIMENT["policies"], SPLIT])
    done = CliRunner().invoke(app, ["validate", str(file)])
    assert done.exit_code != 0
    assert "plan.candidates.disaggregated.gpus: 3 GPUs do not split" in done.output
    with pytest.raises(ConfigError, match="3 GPUs do not split"):
        run_plan(file, [], tmp_path / "plan", InProcess())


def test_splits_run_and_rank_beside_colocated_candidates(tmp_path: Path) -> None:
    plan = {"target_rate": 10, "price_per_gpu_hour": {"h100-sxm": 2.0},
            "candidates": {"replicas": [1, 2], "policies": ["vllm", "split"],
                           "disaggregated": {"gpus": [2, 3], "decode_tensor_parallel": [1, 2]}}}
    file = write_experiment(tmp_path, plan, policies=[*EXPERIMENT["policies"], SPLIT])
    assert CliRunner().invoke(app, ["validate", str(file)]).exit_code == 0
    document = plan_document(run_plan(file, [], tmp_path / "plan", InProcess()), {})
    ranked = {row["label"]: row for row in document["variants"][0]["candidates"]["ranked"]}
    pools = {label: row for label, row in ranked.items() if row["arm"] == "split"}
    # 2 GPUs: 1:1 (TP1 decode; TP2 leaves no GPU for prefill); 3 GPUs: 1:2, 2:1, and 1:1 TP2.
    assert sorted(pools) == [f"split h100-sxm prefill tp1 x{p} + decode tp{t} x{d}"
                             for p, t, d in ((1, 1, 1), (1, 1, 2), (1, 2, 1), (2, 1, 1))]
    for row in pools.values():
        assert row["gpus"] == (row["prefill_replicas"] * row["prefill_tensor_parallel"]
                               + row["decode_replicas"] * row["decode_tensor_parallel"])
        assert row["usd_per_hour"] == 2.0 * row["gpus"]
        assert row["status"] == "meets"  # light load: every layout serves it
    assert {"vllm h100-sxm tp1 x1", "vllm h100-sxm tp1 x2"} <= set(ranked)
    assert "prefill_replicas" not in ranked["vllm h100-sxm tp1 x1"]
    assert document["answer"]["cheapest"]["base"] == "vllm h100-sxm tp1 x1"
    front = {p["label"] for p in document["variants"][0]["pareto"]["points"]}
    assert set(pools) <= front  # every split that meets is a point of the front's plot
