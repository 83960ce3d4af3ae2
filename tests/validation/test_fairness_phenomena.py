"""The shipped fairness experiment shows what each ordering does (docs/how-to/fairness.md)."""

from __future__ import annotations

from pathlib import Path

from batchsim.experiment.loader import load_experiment
from batchsim.experiment.runner import run_experiment

REPO = Path(__file__).resolve().parents[2]


def test_orderings_move_the_wait_between_tenants_as_documented():
    exp, base_dir = load_experiment(REPO / "experiments" / "fairness.yaml")
    arms = {arm.name: arm.metrics for arm in run_experiment(exp, base_dir).arms}

    def tenant(arm: str, name: str, metric: str, stat: str) -> float:
        return arms[arm]["tenants"][name][metric][stat]  # type: ignore[index]

    def jain(arm: str) -> float:
        return arms[arm]["fairness"]["jain_index"]  # type: ignore[index]

    completed = {m["completed"] for m in arms.values()}
    assert len(completed) == 1  # every ordering serves the same requests; only waits move
    # Shortest prompt first: chat jumps the queue, documents starve.
    assert tenant("spf", "chat", "ttft_s", "p50") < 0.1 * tenant("fcfs", "chat", "ttft_s", "p50")
    assert tenant("spf", "docs", "ttft_s", "p99") > 4 * tenant("fcfs", "docs", "ttft_s", "p99")
    # Aging bounds the documents' wait.
    assert tenant("spf-aging", "docs", "ttft_s", "p99") < 0.5 * tenant("spf", "docs", "ttft_s",
                                                                       "p99")
    # Fair share isolates the tenant that asks for less than its share.
    assert tenant("fair-share", "docs", "ttft_s", "p99") < 0.5 * tenant("fcfs", "docs",
                                                                        "ttft_s", "p99")
    assert jain("spf") < 0.8 < 0.99 < jain("fair-share")
    long_bucket = arms["spf"]["fairness"]["slowdown_by_prompt_bucket"]  # type: ignore[index]
    short_bucket = long_bucket["1-255"]["mean"]
    assert long_bucket["4096-16383"]["mean"] > 5 * short_bucket
