"""The report's comparison table shows energy and cost rows when an arm has them."""

from __future__ import annotations

from batchsim.apps.report.table import MISSING, table_rows

BASE = {"measured_requests": 10, "completed": 10, "rejected": 0}


def test_energy_and_cost_rows_appear_with_their_numbers() -> None:
    priced = {**BASE, "energy": {"joules_per_output_token": 0.15511, "mean_power_per_gpu_w":
                                 287.1},
              "cost": {"usd_per_million_output_tokens": 0.37516,
                       "usd_per_million_total_tokens": 0.09237}}
    unpowered = {**BASE, "energy": {"joules_per_output_token": None}, "cost": {}}
    rows = dict(table_rows([priced, unpowered]))
    assert rows["energy per output token (J)"] == [("0.155", False), (MISSING, False)]
    assert rows["mean power per GPU (W)"] == [("287", False), (MISSING, False)]
    assert rows["$ per M output tokens"] == [("0.375", False), (MISSING, False)]
    assert rows["$ per M total tokens"] == [("0.092", False), (MISSING, False)]


def test_rows_are_left_out_when_no_arm_has_the_number() -> None:
    labels = [label for label, _ in table_rows([BASE])]
    assert not any("per output token" in label or "$" in label for label in labels)
