"""Lesson 8, quantisation raises concurrency: fp8 weights and an fp8 KV cache on a 70B model
free memory for KV, so more sequences run at once and throughput under load grows by more
than the single-user step speed-up suggests."""

from __future__ import annotations

from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from batchsim.apps.lessons.lesson import Claim, Lesson, LessonRun
from batchsim.apps.lessons.plotting import grouped_bars, headroom, panels
from batchsim.apps.lessons.records import by_key

WEIGHTS, KV, USERS = "dtype.weights", "dtype.kv_cache", "workload.arrivals.concurrency"
BASE = ("bf16", "bf16")  # the (weights, KV) everything is compared with


def formats(run: LessonRun) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (weights, KV) format, in the sweep's order: its memory, its single-user step, its
    run under load, and the gains of both against bf16 weights with a bf16 KV cache (the step
    speed-up a single-request benchmark shows, and the throughput under load)."""
    points = by_key(run.rows, WEIGHTS, KV, USERS)
    one, many = run.rows[USERS].min(), run.rows[USERS].max()
    combos = {(w, kv): {"one": points[(w, kv, one)], "many": points[(w, kv, many)]}
              for w, kv, users in points if users == one}
    base = combos[BASE]
    for combo in combos.values():
        combo["kv_gain"] = (combo["one"]["deployment.kv_tokens_per_replica"]
                            / base["one"]["deployment.kv_tokens_per_replica"])
        combo["step_gain"] = base["one"]["tpot_s.mean"] / combo["one"]["tpot_s.mean"]
        combo["throughput_gain"] = (combo["many"]["output_throughput_tps"]
                                    / base["many"]["output_throughput_tps"])
    return combos


def _label(combo: tuple[str, str]) -> str:
    return f"{combo[0]} W\n{combo[1]} KV"  # the panels' x label says W is the weights


def numbers(run: LessonRun) -> pd.DataFrame:
    many = int(run.rows[USERS].max())
    return pd.DataFrame([{
        "weights": weights,
        "KV cache": kv,
        "weights GB per GPU": f"{c['one']['deployment.weights_bytes_per_gpu'] / 1e9:.1f}",
        "KV tokens (×bf16)": f"{c['one']['deployment.kv_tokens_per_replica']:,.0f} "
                             f"({c['kv_gain']:.2f}x)",
        "1-user TPOT ms (step speed-up)": f"{c['one']['tpot_s.mean'] * 1e3:.1f} "
                                          f"({c['step_gain']:.2f}x)",
        f"sequences in flight, {many} users": f"{c['many']['mean_batch_size']:.0f}",
        f"preemptions, {many} users": f"{c['many']['preemptions']:.0f}",
        f"TTFT p50 s, {many} users": f"{c['many']['ttft_s.p50']:.2f}",
        f"output tok/s, {many} users (×bf16)": f"{c['many']['output_throughput_tps']:,.0f} "
                                               f"({c['throughput_gain']:.2f}x)",
    } for (weights, kv), c in formats(run).items()])


def draw(run: LessonRun) -> Figure:
    combos = formats(run)
    labels = [_label(combo) for combo in combos]
    many = int(run.rows[USERS].max())

    def each(run_of: str, column: str, scale: float = 1.0) -> list[float]:
        return [c[run_of][column] * scale for c in combos.values()]

    figure, (room, flight, speed) = panels(3, "Llama-3.1-70B on two H200s (TP 2): what fp8 "
                                              "weights and an fp8 KV cache change")
    grouped_bars(room, labels, {"KV tokens": each("one", "deployment.kv_tokens_per_replica",
                                                  1e-3)}, labels="{:,.0f}")
    room.set(ylabel="KV cache capacity (thousand tokens)", title="KV room")
    grouped_bars(flight, labels, {"sequences": each("many", "mean_batch_size")},
                 labels="{:.0f}")
    flight.set(ylabel="mean sequences per step", title=f"Sequences in flight, {many} users")
    grouped_bars(speed, labels, {
        "one user's step (1 / TPOT)": [c["step_gain"] for c in combos.values()],
        f"output tok/s, {many} users": [c["throughput_gain"] for c in combos.values()]},
        labels="{:.2f}")
    speed.axhline(1.0, color="0.45", linewidth=0.8)
    speed.set(ylabel="× bf16 weights, bf16 KV", title="Speed-up")
    speed.legend(fontsize=7, loc="upper left")
    for axis in (room, flight, speed):
        axis.set_xlabel("formats of weights (W) and KV cache")
        headroom(axis)
    return figure


def claims(run: LessonRun) -> list[Claim]:
    combos = formats(run)
    fp8_w, fp8_kv, both = combos[("fp8", "bf16")], combos[("bf16", "fp8")], combos[("fp8", "fp8")]
    flight = {combo: c["many"]["mean_batch_size"] for combo, c in combos.items()}
    more = min(flight[combo] for combo in flight if combo != BASE) / flight[BASE]
    return [
        Claim("fp8 weights give the KV cache over 1.4 times the room, fp8 weights and KV over 3 "
              "times", fp8_w["kv_gain"] > 1.4 and both["kv_gain"] > 3,
              f"{fp8_w['kv_gain']:.2f}x and {both['kv_gain']:.2f}x"),
        Claim("fp8 weights make one user's step less than 1.5 times faster, an fp8 KV cache "
              "less than 1.05 times", fp8_w["step_gain"] < 1.5 and fp8_kv["step_gain"] < 1.05,
              f"{fp8_w['step_gain']:.2f}x and {fp8_kv['step_gain']:.2f}x"),
        Claim("under load fp8 weights raise throughput by more than one user's step speed-up",
              fp8_w["throughput_gain"] > fp8_w["step_gain"],
              f"{fp8_w['throughput_gain']:.2f}x against {fp8_w['step_gain']:.2f}x"),
        Claim("an fp8 KV cache alone raises throughput under load by over 1.2 times",
              fp8_kv["throughput_gain"] > 1.2, f"{fp8_kv['throughput_gain']:.2f}x"),
        Claim("fp8 weights and KV together raise throughput under load by over 1.6 times",
              both["throughput_gain"] > 1.6, f"{both['throughput_gain']:.2f}x"),
        Claim("every fp8 variant runs over 1.3 times the sequences at once of bf16", more > 1.3,
              f"{more:.2f}x at least"),
    ]


LESSON = Lesson("quantisation", "Quantisation raises concurrency", numbers, draw, claims,
                quick=("workload.duration_s=150",))
