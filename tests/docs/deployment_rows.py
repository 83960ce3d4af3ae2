"""A run's deployment and latency figures as the how-to tables quote them (weights per GPU,
KV tokens, output tokens per second, TTFT and TPOT p50 / p99, preemptions per 1,000)."""

from __future__ import annotations

from typing import Any


def run_cells(m: dict[str, Any]) -> str:
    """The table cells after a row's own labels, from one arm's metrics `m`."""
    layout, ttft, tpot = m["deployment"], m["ttft_s"], m["tpot_s"]
    return (f"{layout['weights_bytes_per_gpu'] / 1e9:.1f} GB | "
            f"{layout['kv_tokens_per_replica']:,} | {m['output_throughput_tps']:,.0f} | "
            f"{1e3 * ttft['p50']:,.0f} / {1e3 * ttft['p99']:,.0f} ms | "
            f"{1e3 * tpot['p50']:.1f} / {1e3 * tpot['p99']:.1f} ms | "
            f"{m['preemptions_per_1000_requests']:.1f} |")
