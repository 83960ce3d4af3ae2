"""The rich comparison table printed at the end of a run."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from batchsim.apps.gpu_note import gpus_per_arm_note
from batchsim.experiment.deployment_size import gpus_per_replica
from batchsim.experiment.runner import ExperimentResult


def _ms(dist: object, key: str) -> str:
    value = dist.get(key) if isinstance(dist, dict) else None
    return "-" if value is None else f"{1000.0 * value:,.1f}"


def _ms_each(dist: object, *keys: str) -> str:
    return " / ".join(_ms(dist, key) for key in keys)


def _num(value: object, fmt: str = ",.1f") -> str:
    return "-" if value is None else format(value, fmt)


def _rows(m: dict[str, object]) -> list[tuple[str, str]]:
    """(label, formatted value) for each line of the comparison table."""
    kv = m["kv_utilization"]
    e2e = m["e2e_s"]
    attainment = m["slo_attainment"]
    return [
        ("completed / rejected", f"{m['completed']:,} / {m['rejected']:,}"),
        ("requests/s", _num(m["request_throughput_rps"], ",.2f")),
        ("output tokens/s", _num(m["output_throughput_tps"], ",.0f")),
        ("TTFT p50 / p99 (ms)", _ms_each(m["ttft_s"], "p50", "p99")),
        ("TPOT p50 / p99 (ms)", _ms_each(m["tpot_s"], "p50", "p99")),
        ("ITL p50 / p99 (ms)", _ms_each(m["itl_s"], "p50", "p99")),
        # A rare stall (a long prefill) hides below p99 of the gaps: their max shows it, and
        # each request's longest gap says how many requests saw one. One row each, so that
        # three arms' values still fit 100 columns.
        ("ITL max (ms)", _ms(m["itl_s"], "max")),
        ("req max gap p50 / p99 (ms)", _ms_each(m.get("max_gap_s"), "p50", "p99")),
        ("E2E p50 / p99 (s)", f"{_s(e2e, 'p50')} / {_s(e2e, 'p99')}"),
        ("preemptions", _num(m["preemptions"], ",")),
        ("KV use mean / max", f"{_pct(kv, 'mean')} / {_pct(kv, 'max')}"),
        ("goodput (req/s)", _num(m["goodput_rps"], ",.2f")),
        ("SLO attainment", "-" if not isinstance(attainment, float) else f"{attainment:.1%}"),
        *_energy_rows(m),
        *_tenant_rows(m),
    ]


def _energy_rows(m: dict[str, object]) -> list[tuple[str, str]]:
    """Energy and cost over the window ("-" where the profile has no power or no price)."""
    energy, cost = m.get("energy"), m.get("cost")
    energy = energy if isinstance(energy, dict) else {}
    cost = cost if isinstance(cost, dict) else {}
    return [
        ("joules / output token", _num(energy.get("joules_per_output_token"), ",.3f")),
        ("mean power per GPU (W)", _num(energy.get("mean_power_per_gpu_w"), ",.0f")),
        ("$ / M output tokens", _num(cost.get("usd_per_million_output_tokens"), ",.3f")),
    ]


def _tenant_rows(m: dict[str, object]) -> list[tuple[str, str]]:
    """Per-tenant latency and SLO attainment, and Jain's index (multi-tenant workloads)."""
    tenants = m.get("tenants")
    if not isinstance(tenants, dict):
        return []
    rows: list[tuple[str, str]] = []
    for name, t in tenants.items():
        attainment = t["slo_attainment"]
        rows += [
            (f"{name}: TTFT p50 / p99 (s)", f"{_s(t['ttft_s'], 'p50')} / {_s(t['ttft_s'], 'p99')}"),
            (f"{name}: slowdown mean / p99",
             f"{_s(t['slowdown'], 'mean')} / {_s(t['slowdown'], 'p99')}"),
            (f"{name}: SLO attainment",
             "-" if not isinstance(attainment, float) else f"{attainment:.1%}"),
            (f"{name}: goodput (req/s)", _num(t.get("goodput_rps"), ",.2f")),
            (f"{name}: preemptions / shed", _preempted_and_shed(t)),
        ]
    fairness = m.get("fairness")
    jain = fairness.get("jain_index") if isinstance(fairness, dict) else None
    rows.append(("Jain's index (service)", _num(jain, ".3f")))
    return rows


def _preempted_and_shed(tenant: dict[str, object]) -> str:
    """A tenant's preemptions and requests the gateway shed (docs/how-to/slo-classes.md)."""
    rejected = tenant.get("rejected_by_reason")
    shed = rejected.get("shed_overload", 0) if isinstance(rejected, dict) else 0
    return f"{_num(tenant.get('preemptions'), ',')} / {_num(shed, ',')}"


def _replica_span(scaler: dict[str, object]) -> str:
    return f"{scaler['serving_min']} / {scaler['active_mean']:.2f} / {scaler['serving_max']}"


def _autoscaler_rows(m: dict[str, object]) -> list[tuple[str, str]]:
    """Replicas over the window and GPU-hours (docs/how-to/autoscaling.md); a fixed arm's
    replicas serve throughout."""
    scaler, cost, layout = m.get("autoscaler"), m.get("cost"), m.get("deployment")
    if isinstance(scaler, dict) and "prefill" in scaler:  # a disaggregated arm's two pools
        replicas = " · ".join(f"{role[0].upper()} {_replica_span(scaler[role])}"
                              for role in ("prefill", "decode"))
    elif isinstance(scaler, dict):
        replicas = _replica_span(scaler)
    elif isinstance(layout, dict):
        replicas = f"{layout['replicas']} fixed"
    elif isinstance(pools := m.get("pools"), dict):  # a fixed disaggregated arm
        replicas = f"P {pools['prefill']['replicas']} · D {pools['decode']['replicas']} fixed"
    else:
        replicas = "-"
    hours = cost.get("gpu_hours") if isinstance(cost, dict) else None
    return [("replicas min / mean paid / max", replicas), ("GPU-hours", _num(hours, ",.3f"))]


def _s(dist: object, key: str) -> str:
    value = dist.get(key) if isinstance(dist, dict) else None
    return "-" if value is None else f"{value:,.2f}"


def _pct(dist: object, key: str) -> str:
    value = dist.get(key) if isinstance(dist, dict) else None
    return "-" if value is None else f"{value:.0%}"


def _layout_rows(m: dict[str, object]) -> list[tuple[str, str]]:
    """GPUs, and the layout of a colocated arm ("-" for a disaggregated one)."""
    layout = m.get("deployment")
    text = "-"
    if isinstance(layout, dict):
        parts = [f"{layout['replicas']}×TP{layout['tensor_parallel']}"]
        parts += [f"{key}{layout[name]}" for key, name in
                  (("PP", "pipeline_parallel"), ("EP", "expert_parallel")) if layout[name] > 1]
        parts += ["DPattn"] if layout["data_parallel_attention"] else []
        text = " ".join([*parts, str(layout["hardware"])])
    return [("GPUs", _num(m.get("gpus"), ",")), ("layout", text)]


def _transfer_rows(m: dict[str, object]) -> list[tuple[str, str]]:
    """The KV transfer time and link use of a disaggregated arm ("-" for others)."""
    transfer = m.get("kv_transfer_s")
    link = m.get("kv_link_utilization")
    return [
        ("KV transfer p50 / p99 (ms)", f"{_ms(transfer, 'p50')} / {_ms(transfer, 'p99')}"),
        ("KV link utilisation", "-" if not isinstance(link, float) else f"{link:.1%}"),
    ]


def _prefix_rows(m: dict[str, object]) -> list[tuple[str, str]]:
    """Prefix-cache hit rates; "-" for an arm without prefix caching."""
    cache = m.get("prefix_cache")
    if not isinstance(cache, dict):
        return [("prefix hit tokens / blocks", "-")]
    rates = [cache["hit_rate_tokens"], cache["hit_rate_blocks"]]
    text = [f"{r:.1%}" if isinstance(r, float) else "-" for r in rates]
    return [("prefix hit tokens / blocks", " / ".join(text))]


def _caption(result: ExperimentResult) -> str:
    """The memory plan the simulation used, and each arm's GPUs where that is more."""
    note = gpus_per_arm_note(gpus_per_replica(result.experiment),
                             [(arm.name, arm.metrics.get("gpus")) for arm in result.arms])
    return result.deployment.describe_memory() + ("" if note is None else f"\n{note}")


def comparison_table(result: ExperimentResult) -> Table:
    """Metrics down the side, one column per arm (fits a narrow terminal).

    Names and labels come from the user (arm, tenant and experiment names): escaped, so that
    brackets in them are printed, not read as markup.
    """
    table = Table(title=escape(result.experiment.name), caption=escape(_caption(result)))
    table.add_column("metric")
    for arm in result.arms:
        table.add_column(escape(arm.name), justify="right")
    transfers = any("kv_transfer_s" in arm.metrics for arm in result.arms)
    layouts = transfers or len({str(arm.metrics.get("deployment")) for arm in result.arms}) > 1
    caching = any("prefix_cache" in arm.metrics for arm in result.arms)
    scaling = any("autoscaler" in arm.metrics for arm in result.arms)
    per_arm = [_rows(arm.metrics) + (_layout_rows(arm.metrics) if layouts else [])
               + (_transfer_rows(arm.metrics) if transfers else [])
               + (_prefix_rows(arm.metrics) if caching else [])
               + (_autoscaler_rows(arm.metrics) if scaling else []) for arm in result.arms]
    for i, (label, _) in enumerate(per_arm[0] if per_arm else []):
        table.add_row(escape(label), *(escape(rows[i][1]) for rows in per_arm))
    return table


def print_summary(result: ExperimentResult, console: Console) -> None:
    console.print(comparison_table(result))
    if not result.deployment.gpu.efficiency.calibrated:
        console.print(f"[yellow]note:[/] {escape(result.deployment.gpu.name)} uses "
                      "uncalibrated efficiency priors", highlight=False)
    for note in result.traffic.notes:  # e.g. trace rows dropped: never silently
        console.print("[yellow]note:[/] " + escape(note), highlight=False)
    if result.traffic.clipped.count:
        console.print(
            f"[yellow]note:[/] {result.traffic.clipped.count} requests were clipped to "
            f"max_model_len={result.deployment.max_model_len}"
        )
