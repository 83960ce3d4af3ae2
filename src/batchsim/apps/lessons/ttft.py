"""Lesson 10, does batching hurt TTFT: a new request waits for the step in progress, then for
room in the batch; below capacity that is a step or two, past it the queue grows without
bound unless admission control turns requests away."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from batchsim.apps.lessons.lesson import Claim, Lesson, LessonRun
from batchsim.apps.lessons.plotting import arm_lines, log_axis, panels
from batchsim.apps.lessons.records import by_key

RATE = "workload.arrivals.rate"
CONTINUOUS, CHUNKED, ADMISSION = "continuous", "chunked", "chunked-admission"
MODERATE = 20  # req/s: the busiest load the server still keeps up with (the table shows it)


def turned_away(rows: pd.DataFrame) -> pd.Series:
    """The share of measured arrivals that admission control rejected."""
    return rows["rejected"] / rows["measured_requests"]


def numbers(run: LessonRun) -> pd.DataFrame:
    rows = run.rows
    return pd.DataFrame({
        "arrivals/s": rows[RATE],
        "arm": rows["arm"],
        "TTFT p50 ms": (rows["ttft_s.p50"] * 1e3).map("{:,.0f}".format),
        "TTFT p99 ms": (rows["ttft_s.p99"] * 1e3).map("{:,.0f}".format),
        "queue wait p50 ms": (rows["queue_delay_s.p50"] * 1e3).map("{:,.0f}".format),
        "TPOT mean ms": (rows["tpot_s.mean"] * 1e3).map("{:.1f}".format),
        "ITL p99 ms": (rows["itl_s.p99"] * 1e3).map("{:.0f}".format),
        "completed req/s": rows["request_throughput_rps"].map("{:.1f}".format),
        "turned away": turned_away(rows).map("{:.0%}".format),
    })


def draw(run: LessonRun) -> Figure:
    rows = run.rows.assign(turned_away=turned_away(run.rows))
    figure, (median, tail, away) = panels(3, "TTFT against load: llama-3.1-8b on one H100, "
                                             "Poisson arrivals, ~1,000-token prompts")
    arm_lines(median, rows, RATE, "ttft_s.p50", 1e3)
    median.set(ylabel="TTFT p50 (ms)", title="Median time to first token")
    arm_lines(tail, rows, RATE, "ttft_s.p99", 1e3)
    tail.set(ylabel="TTFT p99 (ms)", title="TTFT p99")
    arm_lines(away, rows, RATE, "turned_away", 100)
    away.set(ylabel="arrivals rejected (%)", title="Rejected on arrival",
             ylim=(0, None))
    for axis in (median, tail):
        log_axis(axis, "y")
    for axis in (median, tail, away):
        axis.set_xlabel("arrivals per second")
    median.legend(fontsize=8)
    return figure


def claims(run: LessonRun) -> list[Claim]:
    points = by_key(run.rows, "arm", RATE)
    light, heavy = run.rows[RATE].min(), run.rows[RATE].max()
    first = points[(CONTINUOUS, light)]
    steps = first["queue_delay_s.p50"] / first["tpot_s.mean"]
    growth = points[(CONTINUOUS, MODERATE)]["ttft_s.p50"] / first["ttft_s.p50"]
    blown = min(points[(arm, heavy)]["ttft_s.p99"] / points[(arm, light)]["ttft_s.p99"]
                for arm in (CONTINUOUS, CHUNKED))
    guarded = points[(ADMISSION, heavy)]
    rejected = guarded["rejected"] / guarded["measured_requests"]
    itl = points[(CHUNKED, MODERATE)]["itl_s.p99"] / points[(CONTINUOUS, MODERATE)]["itl_s.p99"]
    ttft = points[(CHUNKED, light)]["ttft_s.p50"] / first["ttft_s.p50"]
    return [
        Claim("at the lightest load the median request waits under three decode steps to "
              "start", steps < 3, f"{steps:.1f} steps"),
        Claim(f"at {MODERATE} arrivals/s the median TTFT is under 3 times the lightest load's",
              growth < 3, f"{growth:.1f}x"),
        Claim("past capacity the TTFT p99 without admission control is over 20 times the "
              "lightest load's", blown > 20, f"{blown:.0f}x at least"),
        Claim("admission control keeps the TTFT p99 past capacity under 3 s by turning away "
              "over 5% of arrivals", guarded["ttft_s.p99"] < 3 and rejected > 0.05,
              f"{guarded['ttft_s.p99']:.2f} s, {rejected:.0%} turned away"),
        Claim("chunked prefill leaves the light-load median TTFT within 10% and cuts the ITL p99 "
              f"at {MODERATE} arrivals/s by over 30%", abs(ttft - 1) < 0.1 and itl < 0.7,
              f"{ttft:.2f}x and {itl:.2f}x"),
    ]


LESSON = Lesson("ttft", "Does it hurt TTFT?", numbers, draw, claims,
                quick=("sweep.values=[5,20,30]", "workload.duration_s=30", "warmup_s=5"))
