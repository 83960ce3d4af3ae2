"""Lesson 3, memory sets the limit: throughput grows with the users in flight until their KV
cache fills; past that the extra users wait, the scheduler preempts and recomputes, output
throughput holds level and goodput collapses."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from batchsim.apps.lessons.lesson import Claim, Lesson, LessonRun
from batchsim.apps.lessons.plotting import panels
from batchsim.apps.lessons.records import arm_rows
from batchsim.apps.report.style import arm_colour

USERS = "workload.arrivals.concurrency"
PREEMPTING, RESERVING = "recompute", "reserve"
ARMS = (PREEMPTING, RESERVING)
FEW = 32  # users whose KV fits the cache with room to spare


def numbers(run: LessonRun) -> pd.DataFrame:
    rows = run.rows.sort_values([USERS, "arm"], kind="stable")
    return pd.DataFrame({
        "users": rows[USERS],
        "arm": rows["arm"],
        "output tok/s": rows["output_throughput_tps"].map("{:,.0f}".format),
        "goodput req/s": rows["goodput_rps"].map("{:.2f}".format),
        "SLO met": rows["slo_attainment"].map("{:.0%}".format),
        "TTFT p99 s": rows["ttft_s.p99"].map("{:.2f}".format),
        "TPOT p99 ms": (rows["tpot_s.p99"] * 1e3).map("{:.1f}".format),
        "preemptions per 1000 req": rows["preemptions_per_1000_requests"].map("{:,.0f}".format),
        "recomputed share": rows["recomputed_token_fraction"].map("{:.0%}".format),
        "KV use mean": rows["kv_utilization.mean"].map("{:.0%}".format),
        "in flight (mean)": rows["mean_batch_size"].map("{:.0f}".format),
    })


def draw(run: LessonRun) -> Figure:
    figure, (tokens, requests, memory) = panels(
        3, "Memory sets the limit: llama-3.1-8b on one H100 with a 48k-token KV cache, "
           "SLO TTFT p99 2 s, TPOT p99 100 ms")
    for index, arm in enumerate(ARMS):
        rows = arm_rows(run, arm, USERS)
        colour, users = arm_colour(index), rows.index
        tokens.plot(users, rows["output_throughput_tps"], marker="o", color=colour, label=arm)
        requests.plot(users, rows["goodput_rps"], marker="o", color=colour,
                      label=f"{arm}: goodput")
        memory.plot(users, rows["kv_utilization.mean"] * 100, marker="o", color=colour,
                    label=f"{arm}: KV use")
        if arm == PREEMPTING:
            requests.plot(users, rows["request_throughput_rps"], color=colour,
                          linestyle=(0, (4, 3)), label=f"{arm}: all completed")
            memory.plot(users, rows["recomputed_token_fraction"] * 100, marker="s",
                        color=colour, linestyle=(0, (4, 3)), label=f"{arm}: recomputed tokens")
    tokens.set(title="Output throughput", ylabel="output tokens/s")
    requests.set(title="Requests: completed vs within SLO", ylabel="requests/s")
    memory.set(title="KV cache and recompute", ylabel="% (KV blocks used; computed tokens)",
               ylim=(0, 100))
    for axis in (tokens, requests, memory):
        axis.set(xlabel="concurrent users")
        axis.set_ylim(bottom=0)
        axis.legend(fontsize=7)
    return figure


def claims(run: LessonRun) -> list[Claim]:
    preempting, reserving = (arm_rows(run, arm, USERS) for arm in ARMS)
    most = preempting.index.max()
    tokens = preempting["output_throughput_tps"]
    held = tokens[most] / tokens.max()
    goodput = preempting["goodput_rps"]
    kept = goodput[most] / goodput.max()
    reserve_kept = reserving["goodput_rps"][most] / reserving["goodput_rps"].max()
    recomputed = preempting["recomputed_token_fraction"]
    stall = preempting["tpot_s.p99"][most] / reserving["tpot_s.p99"][most]
    return [
        Claim(f"at {FEW} users nothing is preempted", bool(preempting["preemptions"][FEW] == 0),
              f"{preempting['preemptions'][FEW]:.0f} preemptions"),
        Claim(f"at {most} users over 20% of the computed tokens are recomputed",
              bool(recomputed[most] > 0.2), f"{recomputed[most]:.0%}"),
        Claim(f"yet output throughput at {most} users stays within 15% of its peak",
              bool(held > 0.85), f"{held:.0%} of the peak"),
        Claim(f"while goodput at {most} users falls below half its peak",
              bool(kept < 0.5), f"{kept:.0%} of the peak"),
        Claim(f"with almost no preemptions (reserve) goodput at {most} users collapses too, "
              "under half its peak", bool(reserve_kept < 0.5), f"{reserve_kept:.0%} of the peak"),
        Claim(f"recompute's TPOT p99 at {most} users is over 1.5 times reserve's",
              bool(stall > 1.5), f"{stall:.1f}x"),
    ]


LESSON = Lesson("memory_limit", "Memory sets the limit", numbers, draw, claims,
                quick=("sweep.values=[32,128]",))
