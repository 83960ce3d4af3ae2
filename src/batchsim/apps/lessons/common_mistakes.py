"""Lesson 9, the common mistakes: each one measured on one point of a single sweep (the points
are named in the experiment's header, in the sweep's order)."""

from __future__ import annotations

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from batchsim.apps.lessons.lesson import Claim, Lesson, LessonRun
from batchsim.apps.lessons.plotting import grouped_bars, headroom, log_axis, panels
from batchsim.apps.lessons.records import by_key
from batchsim.apps.report.style import arm_colour
from batchsim.experiment.schema.lengths import LognormalLength

# The sweep's points, in the order experiments/lessons/common_mistakes.yaml lists them.
POINTS = ("flooded", "base", "avg-real", "avg-uniform", "one-user", "short-prompt",
          "short-answer", "few-users")
DESCRIBED = {
    "flooded": "512 users at once", "base": "32 users", "avg-real": "182 users, real lengths",
    "avg-uniform": "182 users, uniform lengths", "one-user": "1 user",
    "short-prompt": "32 users, half the prompt", "short-answer": "32 users, half the answer",
    "few-users": "8 users",
}
KNOBS = ("base", "short-prompt", "short-answer", "few-users")  # the API user's section
CONTINUOUS, STATIC = "continuous", "static"


def named(run: LessonRun) -> pd.DataFrame:
    """The rows indexed by (point, arm), with the billed tokens of a completed request."""
    rows = run.rows.copy()
    per_arm = rows.groupby("arm", sort=False).cumcount()
    if per_arm.max() + 1 != len(POINTS):
        raise ValueError(f"{len(POINTS)} points expected, the run has {per_arm.max() + 1}")
    rows["point"] = per_arm.map(dict(enumerate(POINTS)))
    rows["prompt_per_request"] = rows["input_throughput_tps"] / rows["request_throughput_rps"]
    rows["answer_per_request"] = rows["output_throughput_tps"] / rows["request_throughput_rps"]
    return rows.set_index(["point", "arm"], drop=False)


def average_estimate(run: LessonRun) -> tuple[float, int]:
    """KV tokens per replica and the sequences they hold at the mean lengths (the estimate
    the avg points test): the means are the lognormal's, as the file gives them."""
    workload = run.experiment.workload
    prompt, answer = workload.prompt_tokens, workload.output_tokens
    if not (isinstance(prompt, LognormalLength) and isinstance(answer, LognormalLength)):
        raise ValueError("the file's workload must give lognormal prompt and output lengths")
    mean = prompt.mean + answer.mean
    tokens = float(run.rows["deployment.kv_tokens_per_replica"].iloc[0])
    return tokens, int(tokens // mean)


def _shown(rows: pd.DataFrame) -> pd.DataFrame:
    """The table's rows: every continuous point, and the static arm for one user."""
    keep = [(point, CONTINUOUS) for point in POINTS]
    keep.insert(POINTS.index("one-user") + 1, ("one-user", STATIC))
    return rows.loc[keep]


def numbers(run: LessonRun) -> pd.DataFrame:
    rows = _shown(named(run))
    return pd.DataFrame({
        "workload (point)": [f"{DESCRIBED[point]} ({point})" for point in rows["point"]],
        "arm": rows["arm"],
        "output tok/s": rows["output_throughput_tps"].map("{:,.0f}".format),
        "TTFT p50 / p99 s": [f"{p50:.2f} / {p99:.2f}" for p50, p99 in
                             zip(rows["ttft_s.p50"], rows["ttft_s.p99"], strict=True)],
        "TPOT mean ms": (rows["tpot_s.mean"] * 1e3).map("{:.1f}".format),
        "E2E p50 s": rows["e2e_s.p50"].map("{:.1f}".format),
        "peak KV": rows["kv_utilization.max"].map("{:.1%}".format),
        "preemptions per 1,000 req.": rows["preemptions_per_1000_requests"].map(
            "{:.0f}".format),
        "tokens recomputed": rows["recomputed_token_fraction"].map("{:.1%}".format),
        "requests/s": rows["request_throughput_rps"].map("{:.2f}".format),
        "billed tokens per request (prompt + answer)": [
            f"{prompt:,.0f} + {answer:,.0f}" for prompt, answer in
            zip(rows["prompt_per_request"], rows["answer_per_request"], strict=True)],
    }).reset_index(drop=True)


def draw(run: LessonRun) -> Figure:
    rows = named(run)
    continuous = rows[rows["arm"] == CONTINUOUS].set_index("point")
    figure, (tradeoff, wasted, knobs) = panels(3, "Common mistakes, measured: llama-3.1-8b on "
                                                  "one H100, continuous batching")
    _draw_tradeoff(tradeoff, continuous)
    grouped_bars(wasted, ["512 users", "182 users\nreal lengths", "182 users\nuniform"], {
        "preemptions per 1,000 requests": list(
            continuous.loc[["flooded", "avg-real", "avg-uniform"],
                           "preemptions_per_1000_requests"]),
        "tokens recomputed (‰)": list(
            continuous.loc[["flooded", "avg-real", "avg-uniform"],
                           "recomputed_token_fraction"] * 1e3)}, labels="{:.0f}")
    wasted.set(ylabel="per 1,000", title="Preemption (a cost throughput hides)")
    headroom(wasted, 1.35)
    wasted.legend(fontsize=7)
    base = continuous.loc["base"]
    knob = continuous.loc[list(KNOBS[1:])]
    grouped_bars(knobs, ["half the\nprompt", "half the\nanswer", "8 users,\nnot 32"], {
        "TTFT p99": list(knob["ttft_s.p99"] / base["ttft_s.p99"]),
        "E2E p50": list(knob["e2e_s.p50"] / base["e2e_s.p50"]),
        "billed tokens": list((knob["prompt_per_request"] + knob["answer_per_request"])
                              / (base["prompt_per_request"] + base["answer_per_request"])),
    }, labels="{:.2f}")
    knobs.axhline(1.0, color="0.45", linewidth=0.8)
    knobs.set(ylabel="× the 32-user baseline", title="What an API user controls")
    headroom(knobs, 1.3)
    knobs.legend(fontsize=7, ncols=3, loc="upper center")
    return figure


def _draw_tradeoff(axis: Axes, continuous: pd.DataFrame) -> None:
    """Output throughput against median TTFT, one labelled dot per point: the flooded
    benchmark sits far right at no more throughput."""
    shown = ["flooded", "base", "avg-real", "avg-uniform", "few-users"]
    points = continuous.loc[shown]
    axis.scatter(points["ttft_s.p50"], points["output_throughput_tps"], color=arm_colour(0))
    for point, row in points.iterrows():
        axis.annotate(DESCRIBED[str(point)], (row["ttft_s.p50"], row["output_throughput_tps"]),
                      fontsize=7, xytext=(0, 6), textcoords="offset points", ha="center")
    log_axis(axis, "x")
    # Room either side for the labels, which are centred on their dots.
    axis.set_xlim(points["ttft_s.p50"].min() / 3, points["ttft_s.p50"].max() * 6)
    headroom(axis)
    axis.set(xlabel="TTFT p50 (s)", ylabel="output tokens/s", title="Throughput without latency")


def claims(run: LessonRun) -> list[Claim]:
    points = by_key(named(run), "point", "arm")
    flooded, base, real, uniform, short_prompt, short_answer, one = (
        points[(point, CONTINUOUS)] for point in ("flooded", "base", "avg-real", "avg-uniform",
                                                  "short-prompt", "short-answer", "one-user"))
    tokens, estimate = average_estimate(run)
    more = flooded["output_throughput_tps"] / base["output_throughput_tps"]
    wait = flooded["ttft_s.p50"] / base["ttft_s.p50"]
    overstated = uniform["output_throughput_tps"] / real["output_throughput_tps"]
    tail = real["ttft_s.p99"] / uniform["ttft_s.p99"]
    alone = points[("one-user", STATIC)]["tpot_s.mean"] / one["tpot_s.mean"]
    prompt = short_prompt["ttft_s.p99"] / base["ttft_s.p99"]
    answer = short_answer["e2e_s.p50"] / base["e2e_s.p50"]
    return [
        Claim("512 users at once get under 1.2 times the output tokens/s of 32 users, at over "
              "100 times their median TTFT", more < 1.2 and wait > 100,
              f"{more:.2f}x at {wait:.0f}x ({flooded['ttft_s.p50']:.1f} s)"),
        Claim(f"at the {estimate} users the mean lengths fit ({tokens:,.0f} KV tokens), real "
              "lengths fill the KV cache and preempt, uniform ones do not",
              real["kv_utilization.max"] > 0.999 and real["preemptions"] > 0
              and uniform["preemptions"] == 0,
              f"peak {real['kv_utilization.max']:.1%}, {real['preemptions']:.0f} preemptions "
              f"against {uniform['preemptions']:.0f}"),
        Claim("uniform lengths overstate the throughput by over 1.3 times and understate the "
              "TTFT p99 by over 1.5 times", overstated > 1.3 and tail > 1.5,
              f"{overstated:.2f}x and {tail:.2f}x"),
        Claim("512 users at once recompute over 5% of their tokens after preemptions, 32 none",
              flooded["recomputed_token_fraction"] > 0.05 and base["preemptions"] == 0,
              f"{flooded['recomputed_token_fraction']:.1%} and {base['preemptions']:.0f}"),
        Claim("one user's TPOT is the same, within 1%, with static and continuous batching",
              abs(alone - 1) < 0.01, f"{alone:.3f}x"),
        Claim("halving the prompt cuts the TTFT p99 by over 30%; halving the answer cuts the "
              "median E2E by over 30%", prompt < 0.7 and answer < 0.7,
              f"{prompt:.2f}x and {answer:.2f}x"),
    ]


LESSON = Lesson("common_mistakes", "The common mistakes", numbers, draw, claims)
