"""Lesson 2, static vs continuous batching: a static batch decodes every slot until its longest
answer is done, so the more ragged the answers, the more of its work is padding; continuous
batching refills a slot the step it frees."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from batchsim.apps.lessons.lesson import Claim, Lesson, LessonRun
from batchsim.apps.lessons.plotting import panels
from batchsim.apps.lessons.records import arm_rows
from batchsim.apps.report.style import arm_colour
from batchsim.experiment.schema.arms import StaticArm

CV = "workload.output_tokens.cv"
ARMS = ("continuous", "static")
# The picture's batch of eight answers, from 20 to 2,000 tokens (geometric steps): an
# illustration of the mechanism, drawn from these lengths, not a simulated run.
PICTURE = np.geomspace(20, 2000, 8).round().astype(int)


def _by_arm(run: LessonRun) -> dict[str, pd.DataFrame]:
    return {arm: arm_rows(run, arm, CV) for arm in ARMS}


def _static_slots(run: LessonRun) -> int:
    arm = next(arm for arm in run.experiment.policies if isinstance(arm, StaticArm))
    return arm.max_batch_size


def numbers(run: LessonRun) -> pd.DataFrame:
    rows = _by_arm(run)
    cont, static = rows["continuous"], rows["static"]
    gain = cont["output_throughput_tps"] / static["output_throughput_tps"]
    slots = _static_slots(run)
    return pd.DataFrame({
        "output-length cv": cont.index.map("{:g}".format),
        "continuous tok/s": cont["output_throughput_tps"].map("{:,.0f}".format),
        "static tok/s": static["output_throughput_tps"].map("{:,.0f}".format),
        "continuous / static": gain.map("{:.2f}x".format),
        "static: padding share of decode slots": static["padding_fraction"].map(
            "{:.0%}".format),
        f"static: sequences decoding (of {slots})": static["mean_batch_size"].map(
            "{:.1f}".format),
    })


def _draw_picture(axis: Axes) -> None:
    """Eight slots of one static batch: each answer's tokens, then the padding its slot
    computes until the longest is done."""
    longest = int(PICTURE.max())
    slots = np.arange(PICTURE.size)
    axis.barh(slots, PICTURE, color=arm_colour(0), label="answer tokens")
    axis.barh(slots, longest - PICTURE, left=PICTURE, color="0.85", hatch="///",
              edgecolor="0.6", linewidth=0, label="padding (slot held)")
    share = 1 - PICTURE.sum() / (PICTURE.size * longest)
    axis.set(xlabel="decode step", ylabel="slot: its answer's tokens", yticks=slots,
             yticklabels=[f"{n:,}" for n in PICTURE],
             title=f"Example: one static batch, {share:.0%} padding")
    axis.legend(fontsize=8, loc="lower right")


def draw(run: LessonRun) -> Figure:
    rows = _by_arm(run)
    figure, (picture, rates, padding) = panels(
        3, "Static vs continuous batching: llama-3.1-8b on one H100, 8 slots, answers of "
           "128 tokens on average")
    _draw_picture(picture)
    for index, arm in enumerate(ARMS):
        rates.plot(rows[arm].index, rows[arm]["output_throughput_tps"], marker="o",
                   color=arm_colour(index), label=arm)
    rates.set(xlabel="output-length cv (std / mean)", ylabel="output tokens/s",
              title="Throughput", ylim=(0, None))
    rates.legend(fontsize=8)
    static = rows["static"]
    padding.plot(static.index, static["padding_fraction"] * 100, marker="o",
                 color=arm_colour(1), label="static")
    padding.plot(rows["continuous"].index, rows["continuous"]["padding_fraction"] * 100,
                 marker="o", color=arm_colour(0), label="continuous")
    padding.set(xlabel="output-length cv (std / mean)", ylabel="% of decode slots",
                title="Padding computed", ylim=(0, 100))
    padding.legend(fontsize=8)
    return figure


def claims(run: LessonRun) -> list[Claim]:
    rows = _by_arm(run)
    cont, static = rows["continuous"], rows["static"]
    gain = cont["output_throughput_tps"] / static["output_throughput_tps"]
    low, high = gain.index.min(), gain.index.max()
    padding = static["padding_fraction"][high]
    return [
        Claim(f"with nearly uniform answers (cv {low:g}) continuous batching adds under 20%",
              bool(gain[low] < 1.2), f"{gain[low]:.2f}x"),
        Claim(f"with ragged answers (cv {high:g}) it gives more than 2.5 times the throughput",
              bool(gain[high] > 2.5), f"{gain[high]:.2f}x"),
        Claim(f"at cv {high:g} over half of the static batch's decode slots are padding",
              bool(padding > 0.5), f"{padding:.0%}"),
        Claim("continuous batching computes no padding",
              bool((cont["padding_fraction"] == 0).all()),
              f"{cont['padding_fraction'].max():.0%} at most"),
    ]


LESSON = Lesson("static_vs_continuous", "Static vs continuous, ragged vs uniform", numbers, draw,
                claims, quick=("sweep.values=[0.05,2.0]", "workload.duration_s=60"))
