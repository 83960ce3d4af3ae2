"""`plan` against brute force: on a case small enough to enumerate, the exhaustive sweep (the
sweep machinery over every rate of a grid, or every candidate) judged by the same rule gives
the same answers as the plan's bisection and candidate search."""

from __future__ import annotations

from pathlib import Path

from batchsim.apps.executors import InProcess
from batchsim.apps.plan.planner import run_plan
from batchsim.apps.plan.records import plan_document
from batchsim.apps.plan.runs import stats_of_folder
from batchsim.apps.plan.verdict import judge
from batchsim.apps.sweep.points import SweepAxis
from batchsim.apps.sweep.runs import SweepPlan, plan_sweep, run_sweep
from batchsim.experiment.loader import load_experiment
from tests.plan.tiny import write_experiment

ARMS = ("vllm", "static")


def _exhaustive(file: Path, out: Path, overrides: list[str],
                axes: list[SweepAxis]) -> tuple[SweepPlan, dict[tuple[int, str], bool]]:
    """Every point of the grid run by the sweep machinery (both arms in each run), each arm
    judged by the plan's rule: {(point index, arm): meets}."""
    sweep = plan_sweep(file, ["plan=null", *overrides], axes, 1, out)
    rows = run_sweep(sweep, InProcess())
    exp, _ = load_experiment(file)
    assert exp.plan is not None
    verdicts = {}
    for point in sweep.points:
        for arm in ARMS:
            metrics = next(r["metrics"] for r in rows
                           if r["arm"] == arm and r["point"] == point.values)
            stats = stats_of_folder(out / point.folder_name(), metrics, exp.warmup_s,
                                    exp.cooldown_s, arm=arm)
            verdicts[point.index, arm] = judge([stats], exp.slo, exp.plan.keep_up).meets
    return sweep, verdicts


def test_max_rate_equals_the_last_rate_before_the_first_miss_on_the_grid(
        tmp_path: Path) -> None:
    file = write_experiment(tmp_path, {"rate": {"low": 2, "high": 66, "tolerance": 4}})
    result = run_plan(file, [], tmp_path / "plan", InProcess())
    # The bisection only visits loads of this grid: (66 - 2) / 4 = 16 halves evenly.
    grid = tuple(2.0 + 4 * k for k in range(17))
    _, verdicts = _exhaustive(file, tmp_path / "sweep", [],
                              [SweepAxis("workload.arrivals.rate", grid)])
    for arm in ARMS:
        meets = [verdicts[i, arm] for i in range(len(grid))]
        first_miss = meets.index(False)
        assert not any(meets[first_miss:]), f"{arm}: not monotone in the rate: {meets}"
        search = next(s for s in result.variants[0].max_rate if s.arm == arm)
        assert search.bisection.answer == grid[first_miss - 1]
        assert search.bisection.failing == grid[first_miss]
        for load, step_meets in search.bisection.steps:  # every step as the grid judged it
            assert step_meets == meets[grid.index(load)]
        assert len(search.bisection.steps) < len(grid)  # and it did not try them all
    answers = {s.arm: s.bisection.answer for s in result.variants[0].max_rate}
    assert answers["vllm"] > answers["static"]  # the case is not degenerate


def test_cheapest_candidate_and_ranking_equal_the_exhaustive_search(tmp_path: Path) -> None:
    plan = {"target_rate": 20, "price_per_gpu_hour": {"h100-sxm": 2.5},
            "candidates": {"tensor_parallel": [1, 2, 3], "replicas": [1, 2, 3]}}
    file = write_experiment(tmp_path, plan)
    document = plan_document(run_plan(file, [], tmp_path / "plan", InProcess()), {})
    ranked = document["variants"][0]["candidates"]["ranked"]
    # Brute force over the candidates that fit (32 heads do not split over 3 GPUs).
    sweep, verdicts = _exhaustive(
        file, tmp_path / "sweep", ["workload.arrivals.rate=20"],
        [SweepAxis("tensor_parallel", (1, 2)), SweepAxis("replicas", (1, 2, 3))])
    meeting = []
    for point in sweep.points:
        tp, replicas = point.values["tensor_parallel"], point.values["replicas"]
        for arm in ARMS:
            if verdicts[point.index, arm]:
                label = f"{arm} h100-sxm tp{tp} x{replicas}"
                meeting.append((tp * replicas * 2.5, tp * replicas, label))
    assert 0 < len(meeting) < 2 * len(sweep.points)  # some meet, some miss
    assert [row["label"] for row in ranked if row["status"] == "meets"] == [
        label for _, _, label in sorted(meeting)]
    assert document["answer"]["cheapest"]["base"] == sorted(meeting)[0][2]
    best = ranked[0]
    assert best["usd_per_hour"] == 2.5 * best["gpus"]
    assert best["usd_per_million_output_tokens"] == best["usd_per_hour"] / (
        best["served_output_tps"] * 3600) * 1e6
    misfits = [row for row in ranked if row["status"] == "does not fit"]
    assert {row["label"] for row in misfits} == {
        f"{arm} h100-sxm tp3 x{r}" for arm in ARMS for r in (1, 2, 3)}
    assert ranked[-len(misfits):] == misfits and "tensor_parallel" in misfits[0]["reasons"][0]
