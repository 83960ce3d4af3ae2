"""`plan.objective`: the candidates that meet the SLO ranked by dollars, GPUs or joules per
output token; the top-level `pricing` prices a plan that gives none of its own."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest
import yaml

from batchsim.apps.executors import InProcess
from batchsim.apps.plan.planner import run_plan
from batchsim.apps.plan.records import plan_document
from batchsim.experiment.loader import ConfigError
from tests.plan.tiny import write_experiment

# H100 at $1/GPU-hour, H200 at $3: on one GPU each both meet the SLO at 10 req/s.
CANDIDATES = {"hardware": ["h100-sxm", "h200-sxm"], "replicas": [1, 2],
              "policies": ["vllm"]}


def _ranked(tmp_path: Path, plan: dict[str, Any], **changes: Any) -> dict[str, Any]:
    file = write_experiment(tmp_path, {"target_rate": 10, "candidates": CANDIDATES, **plan},
                            **changes)
    document = plan_document(run_plan(file, [], tmp_path / "plan", InProcess()), {})
    candidates = document["variants"][0]["candidates"]
    assert isinstance(candidates, dict)
    return candidates


def _meeting(candidates: dict[str, Any]) -> list[dict[str, Any]]:
    rows = [row for row in candidates["ranked"] if row["status"] == "meets"]
    assert len(rows) == 4  # every candidate meets: the order is the objective's alone
    return rows


def test_cost_objective_from_top_level_pricing_picks_the_cheapest(tmp_path: Path) -> None:
    candidates = _ranked(tmp_path, {"objective": "cost"},
                         pricing={"h100": 1.0, "h200-sxm": 3.0})
    rows = _meeting(candidates)
    # $/hour = GPUs × price by hardware (priced by alias and by name).
    price = {"h100-sxm": 1.0, "h200-sxm": 3.0}
    for row in rows:
        assert row["usd_per_hour"] == pytest.approx(row["gpus"] * price[row["hardware"]])
    assert [row["label"] for row in rows] == [
        "vllm h100-sxm tp1 x1", "vllm h100-sxm tp1 x2", "vllm h200-sxm tp1 x1",
        "vllm h200-sxm tp1 x2"]
    assert candidates["answer"] == "vllm h100-sxm tp1 x1"
    assert candidates["objective"] == "cost"


def test_energy_objective_ranks_by_joules_per_output_token(tmp_path: Path) -> None:
    candidates = _ranked(tmp_path, {"objective": "energy"})
    rows = _meeting(candidates)
    joules = [row["joules_per_output_token"] for row in rows]
    assert joules == sorted(joules) and len(set(joules)) == 4
    # An idle GPU still draws power: two replicas at the same load cost more joules per
    # token than one, on either GPU.
    by_label = {row["label"]: row["joules_per_output_token"] for row in rows}
    for hardware in ("h100-sxm", "h200-sxm"):
        assert by_label[f"vllm {hardware} tp1 x1"] < by_label[f"vllm {hardware} tp1 x2"]
    assert candidates["answer"] == rows[0]["label"]


def test_gpus_objective_ignores_prices(tmp_path: Path) -> None:
    rows = _meeting(_ranked(tmp_path, {"objective": "gpus",
                                       "price_per_gpu_hour": {"h100-sxm": 9.0,
                                                              "h200-sxm": 1.0}}))
    assert [row["gpus"] for row in rows] == [1, 1, 2, 2]
    assert rows[0]["label"] == "vllm h100-sxm tp1 x1"  # a tie on GPUs goes to the label


def test_cost_objective_without_prices_is_an_error(tmp_path: Path) -> None:
    file = write_experiment(tmp_path, {"target_rate": 10, "objective": "cost"})
    with pytest.raises(ConfigError, match=r"plan\.objective: `cost` needs prices"):
        run_plan(file, [], tmp_path / "plan", InProcess())


def test_energy_objective_on_a_profile_without_power_is_an_error(tmp_path: Path) -> None:
    shipped = Path(str(files("batchsim.hardware_profiles"))) / "gpus" / "h100-sxm.yaml"
    document = yaml.safe_load(shipped.read_text(encoding="utf-8"))
    del document["power"]
    document["name"] = "bare-h100"
    (tmp_path / "bare.yaml").write_text(yaml.safe_dump(document), encoding="utf-8")
    file = write_experiment(tmp_path, {"target_rate": 10, "objective": "energy"},
                            hardware="bare.yaml")
    with pytest.raises(ConfigError, match="`energy` needs GPU profiles with a `power` block; "
                                          "bare-h100 has none"):
        run_plan(file, [], tmp_path / "plan", InProcess())
