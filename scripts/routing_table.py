"""The tables of docs/how-to/routing.md from the two routing sweeps' folders.

    batchsim sweep experiments/routing_herding.yaml --jobs 1
    batchsim sweep experiments/routing_scorers.yaml --jobs 1
    batchsim sweep experiments/routing_scorers_tiered.yaml --jobs 2
    python scripts/routing_table.py results/routing_herding results/routing_scorers \
        results/routing_scorers_tiered
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd


def router_label(router: object) -> str:
    if isinstance(router, str):
        return f"`{router}`"
    assert isinstance(router, dict)
    scorers = " + ".join(
        s["kind"] if s.get("weight", 1.0) == 1.0 else f"{s['weight']:g}·{s['kind']}"
        for s in router["scorers"])
    extras = []
    if router.get("signal_delay_s"):
        extras.append(f"{router['signal_delay_s']:g} s old")
    if router.get("count_own_assignments"):
        extras.append("own counted")
    if router.get("load_balance_ties"):
        extras.append("ties in turn")
    return scorers + (f" ({', '.join(extras)})" if extras else "")


def largest_share(requests: pd.DataFrame, window_s: float = 1.0) -> float:
    """Mean over 1-s windows (of 4 or more arrivals) of the share of the window's arrivals
    sent to its busiest replica: 1 is herding, 1/replicas a perfect spread."""
    window = (requests["arrival_s"] // window_s).astype(int)
    counts = requests.groupby([window, "replica"]).size().unstack(fill_value=0)
    counts = counts[counts.sum(axis=1) >= 4]
    return float((counts.max(axis=1) / counts.sum(axis=1)).mean())


def table(folder: Path) -> str:
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    lines = ["| router | TTFT p50 | TTFT p99 | E2E p99 | prefix hit rate | busiest replica's "
             "share of a second's arrivals |", "|---|---:|---:|---:|---:|---:|"]
    for row in summary["rows"]:
        metrics = row["metrics"]
        requests = pd.read_parquet(folder / row["folder"] / "requests.parquet")
        hit = (metrics.get("prefix_cache") or {}).get("hit_rate_tokens")
        lines.append(
            f"| {router_label(row['point']['router'])} | {metrics['ttft_s']['p50']:.2f} s | "
            f"{metrics['ttft_s']['p99']:.2f} s | {metrics['e2e_s']['p99']:.1f} s | "
            f"{'–' if hit is None else f'{hit:.1%}'} | {largest_share(requests):.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    for name in sys.argv[1:]:
        print(f"{name}:\n\n{table(Path(name))}\n")
