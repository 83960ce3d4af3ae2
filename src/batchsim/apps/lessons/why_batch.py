"""Lesson 1, why batch at all: a decode step costs about the same for one sequence as for
dozens, so throughput grows almost linearly with the users in flight."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from batchsim.apps.lessons.lesson import Claim, Lesson, LessonRun
from batchsim.apps.lessons.plotting import log_axis, panels
from batchsim.apps.report.style import arm_colour
from batchsim.gpu.hardware import load_gpu_profile
from batchsim.gpu.model_spec import load_model

USERS = "workload.arrivals.concurrency"
MANY = 64  # the batch the claims compare with one user


def peak_share(run: LessonRun) -> pd.Series:
    """The share of the GPUs' dense peak that the linear layers' FLOPs (2 per active
    parameter per token, prompt and output tokens alike) use over the measured window."""
    exp = run.experiment
    flops_per_token = 2.0 * load_model(exp.model).active_params()
    peak = load_gpu_profile(exp.hardware).peak_flops.for_weights(exp.dtype.weights)
    used = run.rows["total_throughput_tps"] * flops_per_token
    return used / (peak * run.rows["gpus"])


def numbers(run: LessonRun) -> pd.DataFrame:
    rows = run.rows
    return pd.DataFrame({
        "users": rows[USERS],
        "output tok/s": rows["output_throughput_tps"].map("{:,.0f}".format),
        "tok/s per user": (1.0 / rows["tpot_s.mean"]).map("{:,.1f}".format),
        "step (TPOT mean) ms": (rows["tpot_s.mean"] * 1e3).map("{:.1f}".format),
        "share of bf16 peak": peak_share(run).map("{:.2%}".format),
    })


def draw(run: LessonRun) -> Figure:
    rows = run.rows
    figure, (left, right) = panels(2, "One user leaves the GPU idle: llama-3.1-8b on one H100, "
                                      "128-token prompts, 512-token answers")
    users = rows[USERS]
    left.plot(users, rows["output_throughput_tps"], marker="o", color=arm_colour(0),
              label="simulated")
    one = rows["output_throughput_tps"].iloc[0]
    left.plot(users, one * users, linestyle=(0, (4, 3)), color="0.45",
              label="one user's rate × users")
    left.set(xlabel="concurrent users", ylabel="output tokens/s", title="Throughput")
    left.legend(fontsize=8)
    right.plot(users, rows["tpot_s.mean"] * 1e3, marker="o", color=arm_colour(1))
    right.set(xlabel="concurrent users", ylabel="ms per decode step (TPOT mean)",
              title="Step time", ylim=(0, None))
    for axis in (left, right):
        log_axis(axis, "x")
    log_axis(left, "y")
    return figure


def claims(run: LessonRun) -> list[Claim]:
    rows = run.rows.set_index(USERS)
    one, many = rows.loc[rows.index.min()], rows.loc[MANY]
    speedup = many["output_throughput_tps"] / one["output_throughput_tps"]
    slower = many["tpot_s.mean"] / one["tpot_s.mean"]
    idle = float(peak_share(run).iloc[0])
    return [
        Claim(f"{MANY} users get more than 30 times one user's output throughput", speedup > 30,
              f"{speedup:.0f}x"),
        Claim(f"a decode step with {MANY} users takes less than twice one user's",
              slower < 2, f"{slower:.2f}x"),
        Claim("one user uses under 1% of the GPU's dense bf16 peak", idle < 0.01,
              f"{idle:.2%}"),
    ]


LESSON = Lesson("why_batch", "Why batch at all", numbers, draw, claims,
                quick=("sweep.values=[1,64]", "workload.duration_s=20", "warmup_s=5"))
