"""Lesson 6, prefill and decode interfere: one long prompt stalls every running decode for as
long as it is prefilled; chunked prefill bounds the stall, disaggregation removes it, and both
pay in time to first token."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from batchsim.apps.lessons.lesson import Claim, Lesson, LessonRun
from batchsim.apps.lessons.plotting import grouped_bars, log_axis, panels
from batchsim.apps.lessons.records import by_key

COLOCATED, CHUNKED, SPLIT = "continuous", "chunked-2048", "disagg-1p1d"
STALL_S = 0.2  # a gap a reader notices as a pause in the stream
_HEADROOM = 4.0  # room above the tallest bar (log axes) for its label and the legend


def _ms(rows: pd.DataFrame, column: str) -> pd.Series:
    return (rows[column] * 1e3).map("{:,.0f}".format)


def numbers(run: LessonRun) -> pd.DataFrame:
    rows = run.rows
    return pd.DataFrame({
        "arm": rows["arm"],
        "ITL p50 / p99 / max, ms": [f"{a} / {b} / {c}" for a, b, c in zip(
            _ms(rows, "itl_s.p50"), _ms(rows, "itl_s.p99"), _ms(rows, "itl_s.max"),
            strict=True)],
        "each request's longest gap, p50 / p90 / p99, ms": [f"{a} / {b} / {c}" for a, b, c in zip(
            _ms(rows, "max_gap_s.p50"), _ms(rows, "max_gap_s.p90"), _ms(rows, "max_gap_s.p99"),
            strict=True)],
        "TTFT p50 / p99, ms": [f"{a} / {b}" for a, b in zip(
            _ms(rows, "ttft_s.p50"), _ms(rows, "ttft_s.p99"), strict=True)],
        "TPOT p99, ms": _ms(rows, "tpot_s.p99"),
    })


def draw(run: LessonRun) -> Figure:
    rows = run.rows
    figure, (gaps, cost) = panels(2, "A 24k-token document among chat requests, llama-3.1-8b "
                                     "on two H100s")
    arms = list(rows["arm"])
    grouped_bars(gaps, arms, {"ITL p50": list(rows["itl_s.p50"] * 1e3),
                              "ITL p99": list(rows["itl_s.p99"] * 1e3),
                              "ITL max": list(rows["itl_s.max"] * 1e3)}, labels="{:,.0f}")
    log_axis(gaps, "y")
    gaps.set_ylim(top=rows["itl_s.max"].max() * 1e3 * _HEADROOM)
    gaps.set(ylabel="gap between tokens, ms (log)", title="What the streams see")
    gaps.legend(fontsize=8, loc="upper right")
    grouped_bars(cost, arms, {"TTFT p99": list(rows["ttft_s.p99"] * 1e3),
                              "TPOT p99": list(rows["tpot_s.p99"] * 1e3)}, labels="{:,.0f}")
    log_axis(cost, "y")
    cost.set_ylim(top=rows["ttft_s.p99"].max() * 1e3 * _HEADROOM)
    cost.set(ylabel="ms (log)", title="What it costs: slower first tokens")
    cost.legend(fontsize=8, loc="upper right")
    return figure


def claims(run: LessonRun) -> list[Claim]:
    rows = by_key(run.rows, "arm")
    stall, chunked, split = (rows[arm] for arm in (COLOCATED, CHUNKED, SPLIT))
    hidden = stall["itl_s.p99"] / stall["itl_s.max"]
    bounded = stall["itl_s.max"] / chunked["itl_s.max"]
    return [
        Claim("with continuous batching one request in ten or more has its stream stopped "
              f"for over {STALL_S * 1e3:.0f} ms by a document's prefill",
              stall["max_gap_s.p90"] > STALL_S,
              f"longest gap p90 {stall['max_gap_s.p90'] * 1e3:,.0f} ms"),
        Claim("the ITL p99 hides it: under a tenth of the longest gap", hidden < 0.1,
              f"p99 {stall['itl_s.p99'] * 1e3:,.1f} ms of max {stall['itl_s.max'] * 1e3:,.0f}"),
        Claim("chunked prefill cuts the longest gap at least fivefold", bounded >= 5,
              f"{bounded:.1f}x"),
        Claim(f"no request waits over {STALL_S * 1e3:.0f} ms for a token in the split arm",
              split["max_gap_s.p99"] < STALL_S and split["itl_s.max"] < STALL_S,
              f"max {split['itl_s.max'] * 1e3:,.0f} ms"),
        Claim("both fixes pay in TTFT p99", min(chunked["ttft_s.p99"], split["ttft_s.p99"])
              > stall["ttft_s.p99"], f"{stall['ttft_s.p99'] * 1e3:,.0f} ms colocated, "
              f"{chunked['ttft_s.p99'] * 1e3:,.0f} chunked, {split['ttft_s.p99'] * 1e3:,.0f} "
              "split"),
    ]


LESSON = Lesson("prefill_decode_interference", "Prefill and decode interfere", numbers, draw,
                claims, quick=("workload.duration_s=50", "warmup_s=10"))
