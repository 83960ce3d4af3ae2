"""Lesson 5, paged vs contiguous reservation: reserving each sequence's whole life up front
leaves memory reserved but unwritten and free memory in holes too small to use, so the same
cache holds fewer sequences and serves fewer tokens."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from batchsim.apps.lessons.lesson import Claim, Lesson, LessonRun
from batchsim.apps.lessons.plotting import grouped_bars, panels
from batchsim.apps.lessons.records import by_key

PAGED, CONTIGUOUS = "paged", "contiguous"
_FRAGMENTATION = "kv_fragmentation."


def _share(rows: pd.DataFrame, column: str) -> pd.Series:
    return rows[_FRAGMENTATION + column].map("{:.1%}".format)


def numbers(run: LessonRun) -> pd.DataFrame:
    rows = run.rows
    return pd.DataFrame({
        "arm": rows["arm"],
        "sequences holding KV, mean / max": [
            f"{mean:.1f} / {peak:.0f}" for mean, peak in zip(
                rows[_FRAGMENTATION + "mean_sequences"], rows[_FRAGMENTATION + "max_sequences"],
                strict=True)],
        "reserved but unwritten (mean)": _share(rows, "internal_share_mean"),
        "free but in holes too small (mean)": _share(rows, "external_share_mean"),
        "admissions refused for holes": rows[_FRAGMENTATION
                                             + "requests_refused_by_fragmentation"].map(
                                                 "{:,.0f}".format),
        "output tok/s": rows["output_throughput_tps"].map("{:,.0f}".format),
        "preemptions": rows["preemptions"].map("{:,.0f}".format),
        "TTFT p99, s": rows["ttft_s.p99"].map("{:.1f}".format),
    })


def draw(run: LessonRun) -> Figure:
    rows = run.rows
    figure, (waste, held, served) = panels(3, "The same 32,768-token KV cache handed out two "
                                               "ways: llama-3.1-8b, 96 users, one H100")
    arms = list(rows["arm"])
    grouped_bars(waste, arms, {
        "reserved, unwritten": list(rows[_FRAGMENTATION + "internal_share_mean"] * 100),
        "free, in holes too small": list(rows[_FRAGMENTATION + "external_share_mean"] * 100),
    }, labels="{:.1f}")
    waste.set(ylabel="% of the KV cache (time mean)", title="Memory that serves nobody")
    waste.set_ylim(top=max(rows[_FRAGMENTATION + "internal_share_mean"].max() * 100 * 1.5, 1))
    waste.legend(fontsize=8, loc="upper left")
    grouped_bars(held, arms, {
        "mean": list(rows[_FRAGMENTATION + "mean_sequences"]),
        "max": list(rows[_FRAGMENTATION + "max_sequences"]),
    }, labels="{:.0f}")
    held.set(ylabel="sequences holding KV", title="Sequences in flight")
    held.legend(fontsize=8, loc="upper right")
    grouped_bars(served, arms, {"output": list(rows["output_throughput_tps"])},
                 labels="{:,.0f}")
    served.set(ylabel="output tokens/s", title="Throughput")
    return figure


def claims(run: LessonRun) -> list[Claim]:
    rows = by_key(run.rows, "arm")
    paged, contiguous = rows[PAGED], rows[CONTIGUOUS]
    fewer = contiguous[_FRAGMENTATION + "mean_sequences"] / paged[_FRAGMENTATION
                                                                 + "mean_sequences"]
    slower = contiguous["output_throughput_tps"] / paged["output_throughput_tps"]
    unused = contiguous[_FRAGMENTATION + "internal_share_mean"]
    holes = contiguous[_FRAGMENTATION + "external_share_mean"]
    return [
        Claim("contiguous reservation keeps at most 80% of paged's sequences in flight on the "
              "same memory", fewer <= 0.8, f"{fewer:.0%}"),
        Claim("and serves at most 85% of its output tokens", slower <= 0.85, f"{slower:.0%}"),
        Claim("a tenth or more of the contiguous cache is reserved but unwritten, under 2% of "
              "the paged one", unused >= 0.1 and paged[_FRAGMENTATION + "internal_share_mean"]
              < 0.02, f"{unused:.1%} vs "
              f"{paged[_FRAGMENTATION + 'internal_share_mean']:.1%}"),
        Claim("free memory in holes too small turns admissions away (contiguous only)",
              holes > 0 and contiguous[_FRAGMENTATION + "requests_refused_by_fragmentation"] > 0
              and paged[_FRAGMENTATION + "external_share_mean"] == 0,
              f"{holes:.1%} of the cache, "
              f"{contiguous[_FRAGMENTATION + 'requests_refused_by_fragmentation']:.0f} "
              "requests"),
    ]


LESSON = Lesson("paged_vs_contiguous", "Paged vs contiguous reservation", numbers, draw,
                claims, quick=("workload.duration_s=25", "warmup_s=5"))
