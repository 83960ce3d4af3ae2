"""Lesson 7, fairness vs throughput: shortest-prompt-first serves short requests fast by
starving long ones; aging bounds their wait, and fair share isolates the lighter tenant, all
at the same throughput."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from batchsim.apps.lessons.lesson import Claim, Lesson, LessonRun
from batchsim.apps.lessons.plotting import grouped_bars, panels
from batchsim.apps.lessons.records import by_key

TENANTS = ("chat", "docs")
BUCKET = "fairness.slowdown_by_prompt_bucket.{}.{}"
SHORT, LONG = "1-255", "4096-16383"  # the prompt buckets of chat's shortest and of docs
MIN_REQUESTS = 10  # a bucket drawn in the figure has at least this many


def _ttft(tenant: str, stat: str) -> str:
    return f"tenants.{tenant}.ttft_s.{stat}"


def numbers(run: LessonRun) -> pd.DataFrame:
    rows = run.rows

    def pair(first: str, second: str, digits: int) -> list[str]:
        return [f"{a:.{digits}f} / {b:.{digits}f}"
                for a, b in zip(rows[first], rows[second], strict=True)]

    table: dict[str, object] = {"arm": rows["arm"]}
    for tenant in TENANTS:
        table[f"{tenant} TTFT p50 / p99 s"] = pair(_ttft(tenant, "p50"), _ttft(tenant, "p99"), 2)
    table[f"slowdown mean, prompts {SHORT}"] = rows[BUCKET.format(SHORT, "mean")].map(
        "{:.1f}".format)
    table[f"slowdown mean / p99, prompts {LONG}"] = pair(BUCKET.format(LONG, "mean"),
                                                         BUCKET.format(LONG, "p99"), 1)
    table["Jain's index"] = rows["fairness.jain_index"].map("{:.3f}".format)
    table["requests/s"] = rows["request_throughput_rps"].map("{:.1f}".format)
    return pd.DataFrame(table)


def _buckets(rows: pd.DataFrame) -> list[str]:
    """The prompt-length buckets with enough requests for a mean to say something (the chat
    tenant's lognormal tail puts one or two prompts past 1024 tokens), shortest first."""
    prefix, suffix = "fairness.slowdown_by_prompt_bucket.", ".requests"
    return [c.removeprefix(prefix).removesuffix(suffix) for c in rows.columns
            if c.startswith(prefix) and c.endswith(suffix) and rows[c].min() >= MIN_REQUESTS]


def draw(run: LessonRun) -> Figure:
    rows = run.rows
    arms = list(rows["arm"])
    figure, (left, right) = panels(2, "Who waits under overload: chat (~256-token prompts) and "
                                      "docs (4-8k tokens) share one H100, four queue orderings")
    grouped_bars(left, arms, {f"{tenant} tenant": list(rows[_ttft(tenant, "p99")])
                              for tenant in TENANTS}, labels="{:.1f}")
    left.set(ylabel="TTFT p99 (s)", title="Time to first token, p99, per tenant")
    left.legend(fontsize=8)
    grouped_bars(right, arms, {
        f"{bucket} tokens ({rows[BUCKET.format(bucket, 'requests')].iloc[0]:.0f} requests)":
            list(rows[BUCKET.format(bucket, "mean")]) for bucket in _buckets(rows)},
        labels="{:.1f}")
    right.set(ylabel="mean slowdown (E2E / E2E alone)", title="Slowdown by prompt length")
    right.legend(title="prompt", fontsize=8, title_fontsize=8)
    return figure


def claims(run: LessonRun) -> list[Claim]:
    arms = by_key(run.rows, "arm")
    fcfs, spf, aging, fair = (arms[arm] for arm in ("fcfs", "spf", "spf-aging", "fair-share"))
    docs_p99 = _ttft("docs", "p99")
    starved = spf[docs_p99] / fcfs[docs_p99]
    chat_gain = spf[_ttft("chat", "p50")] / fcfs[_ttft("chat", "p50")]
    aged = aging[docs_p99] / spf[docs_p99]
    isolated = fair[docs_p99] / fcfs[docs_p99]
    rates = run.rows["request_throughput_rps"]
    spread = float(rates.max() / rates.min()) - 1
    return [
        Claim("shortest prompt first gives the documents a TTFT p99 over 3 times FCFS's",
              starved > 3, f"{starved:.1f}x"),
        Claim("shortest prompt first cuts chat's median TTFT to under a tenth of FCFS's",
              chat_gain < 0.1, f"{chat_gain:.3f}x"),
        Claim("aging cuts the documents' TTFT p99 to under half of shortest-first's",
              aged < 0.5, f"{aged:.2f}x"),
        Claim("fair share gives the documents a TTFT p99 under half of FCFS's", isolated < 0.5,
              f"{isolated:.2f}x"),
        Claim("Jain's index is under 0.8 with shortest first and at least 0.99 with fair share",
              spf["fairness.jain_index"] < 0.8 and fair["fairness.jain_index"] >= 0.99,
              f"{spf['fairness.jain_index']:.3f} and {fair['fairness.jain_index']:.3f}"),
        Claim("every ordering completes requests at the same rate, within 5%", spread < 0.05,
              f"{spread:.1%} apart"),
    ]


LESSON = Lesson("fairness", "Fairness vs throughput", numbers, draw, claims,
                quick=("workload.duration_s=30",))
