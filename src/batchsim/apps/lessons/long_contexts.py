"""Lesson 4, long contexts reduce concurrency: a sequence's KV cache grows with its context, so
the same GPU holds dozens of 2k-token sequences but only a handful of 100k-token ones."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from batchsim.apps.lessons.lesson import Claim, Lesson, LessonRun
from batchsim.apps.lessons.plotting import log_axis, panels
from batchsim.apps.lessons.records import arm_rows
from batchsim.apps.report.style import arm_colour
from batchsim.experiment.schema.arrivals import ClosedLoopArrivals
from batchsim.experiment.schema.lengths import FixedLength

PROMPT = "workload.prompt_tokens.value"
ARM = "vllm"


def _rows(run: LessonRun) -> pd.DataFrame:
    return arm_rows(run, ARM, PROMPT)


def _users(run: LessonRun) -> int:
    arrivals = run.experiment.workload.arrivals
    assert isinstance(arrivals, ClosedLoopArrivals), "the lesson runs a closed loop of users"
    return arrivals.concurrency


def _answer_tokens(run: LessonRun) -> int:
    answers = run.experiment.workload.output_tokens
    assert isinstance(answers, FixedLength), "the lesson's answers have one length"
    return answers.value


def fit_in_cache(run: LessonRun) -> pd.Series:
    """Whole sequences (prompt and answer) the deployment's KV cache holds at once."""
    rows = _rows(run)
    return rows["deployment.kv_tokens_per_replica"] / (rows.index + _answer_tokens(run))


def numbers(run: LessonRun) -> pd.DataFrame:
    rows = _rows(run)
    return pd.DataFrame({
        "prompt tokens": rows.index.map("{:,}".format),
        "fit in the KV cache": fit_in_cache(run).map("{:.1f}".format),
        "in flight (mean)": rows["mean_batch_size"].map("{:.1f}".format),
        "KV use mean": rows["kv_utilization.mean"].map("{:.0%}".format),
        "output tok/s": rows["output_throughput_tps"].map("{:,.0f}".format),
        "prompt tok/s": rows["input_throughput_tps"].map("{:,.0f}".format),
        "preemptions per 1000 req": rows["preemptions_per_1000_requests"].map("{:,.0f}".format),
        "recomputed share": rows["recomputed_token_fraction"].map("{:.0%}".format),
        "TTFT p50 s": rows["ttft_s.p50"].map("{:.1f}".format),
    })


def draw(run: LessonRun) -> Figure:
    rows = _rows(run)
    prompts = rows.index
    figure, (flight, memory, rates) = panels(
        3, f"Long contexts reduce concurrency: llama-3.1-8b on one H100, {_users(run)} users, "
           f"{_answer_tokens(run)}-token answers")
    flight.plot(prompts, rows["mean_batch_size"], marker="o", color=arm_colour(0),
                label="in flight (simulated)")
    flight.plot(prompts, fit_in_cache(run).clip(upper=_users(run)), linestyle=(0, (4, 3)),
                color="0.45", label="fit in the KV cache (at most the users)")
    flight.set(title="Sequences in flight", ylabel="sequences", ylim=(0, None))
    memory.plot(prompts, rows["kv_utilization.mean"] * 100, marker="o", color=arm_colour(0),
                label="KV blocks used (mean)")
    memory.plot(prompts, rows["recomputed_token_fraction"] * 100, marker="s",
                color=arm_colour(1), label="computed tokens that are recomputes")
    memory.set(title="KV cache and recompute", ylabel="%", ylim=(0, 100))
    rates.plot(prompts, rows["input_throughput_tps"], marker="o", color=arm_colour(2),
               label="prompt tokens/s")
    rates.plot(prompts, rows["output_throughput_tps"], marker="o", color=arm_colour(0),
               label="output tokens/s")
    rates.set(title="Throughput", ylabel="tokens/s (completed requests)")
    log_axis(rates, "y")
    for axis in (flight, memory, rates):
        log_axis(axis, "x")
        axis.set_xticks(list(prompts))  # the swept lengths themselves, not powers of ten
        axis.minorticks_off()
        axis.set(xlabel="prompt tokens")
        axis.legend(fontsize=7)
    return figure


def claims(run: LessonRun) -> list[Claim]:
    rows = _rows(run)
    short, long = rows.index.min(), rows.index.max()
    users = _users(run)
    flight = rows["mean_batch_size"]
    kv = rows["kv_utilization.mean"]
    slower = rows["output_throughput_tps"][long] / rows["output_throughput_tps"][short]
    preempted = rows["preemptions_per_1000_requests"]
    return [
        Claim(f"with {short:,}-token prompts nearly all {users} users are in flight",
              bool(flight[short] > 0.9 * users), f"{flight[short]:.1f}"),
        Claim(f"with {long:,}-token prompts fewer than a third are", bool(flight[long] < users / 3),
              f"{flight[long]:.1f}"),
        Claim(f"the KV cache is under 20% used at {short:,} tokens and over 80% at {long:,}",
              bool(kv[short] < 0.2 and kv[long] > 0.8), f"{kv[short]:.0%} and {kv[long]:.0%}"),
        Claim(f"output throughput at {long:,} tokens is under 5% of that at {short:,}",
              bool(slower < 0.05), f"{slower:.1%}"),
        Claim(f"no preemptions at {short:,} tokens; at {long:,}, more than one per request",
              bool(preempted[short] == 0 and preempted[long] > 1000),
              f"{preempted[short]:,.0f} and {preempted[long]:,.0f} per 1000 requests"),
    ]


LESSON = Lesson("long_contexts", "Long contexts reduce concurrency", numbers, draw, claims,
                quick=("sweep.values=[2000,100000]", "workload.duration_s=600", "warmup_s=60"))
