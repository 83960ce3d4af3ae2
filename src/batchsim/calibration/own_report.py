"""The fidelity report's section on our own H200 measurements (markdown)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from batchsim.calibration.measure.run import TABLE_NAMES
from batchsim.calibration.own_measurements import (
    MEASURED_PROFILE,
    PUBLIC_PROFILE,
    REPEAT_FOLDER,
    RUN_FOLDER,
    device_facts,
    operator_errors,
    repeatability,
    step_table,
)
from batchsim.calibration.report import FAMILY_NAMES
from batchsim.gpu.calibration_record import FAMILIES
from batchsim.gpu.hardware import GpuProfile, load_gpu_profile


def render_own_measurements(samples_root: Path) -> str:
    """The section, from `samples_root`/h200-sxm-measured and `samples_root`/h200-sxm."""
    folder = samples_root / MEASURED_PROFILE
    if not (folder / RUN_FOLDER).is_dir():
        return (
            "## Our own measurements\n\nNot found: this section is rendered from "
            f"`{folder}/{RUN_FOLDER}` in a checkout of the project.\n"
        )
    measured, public = load_gpu_profile(MEASURED_PROFILE), load_gpu_profile(PUBLIC_PROFILE)
    run = folder / RUN_FOLDER
    parts = [
        _introduction(run, measured),
        _repeatability_section(run, folder / REPEAT_FOLDER),
        _operator_section([measured, public], folder, samples_root / PUBLIC_PROFILE),
        _steps_section(step_table(run / TABLE_NAMES["forward_steps"], [measured, public])),
    ]
    return "\n".join(parts)


def _introduction(run: Path, measured: GpuProfile) -> str:
    facts = device_facts(run)
    copy_bw = float(str(facts["copy_bandwidth_bytes_per_s"]))
    share = copy_bw / measured.memory_bandwidth_bytes_per_s
    return (
        f"## Our own measurements ({facts['device']})\n\n"
        f"One {facts['device']} was lent to the project on 2026-11-29. "
        "`batchsim calibrate measure --model llama-3.1-8b --forward-compile` timed the operator "
        f"grid and whole forward steps on it (torch {facts['torch']}, CUDA {facts['cuda']}, "
        f"{facts['repeats']} repeats after {facts['warmup']} warm-ups, L2 flushed before each). "
        f"A 1 GiB copy moved {copy_bw / 1e12:.2f} TB/s, {share:.0%} of the datasheet's "
        f"{measured.memory_bandwidth_bytes_per_s / 1e12:.1f} TB/s. The tables and `device.json` "
        f"are in `src/batchsim/hardware_profiles/measurements/{MEASURED_PROFILE}/{RUN_FOLDER}/`. "
        "The profile "
        f"`{MEASURED_PROFILE}` is fitted to them as the public-table profiles are to theirs (a "
        "random fifth held out). The two sets of measurements differ in their kernels: "
        "torch's (cuBLAS, `scaled_dot_product_attention` over contiguous caches) for "
        f"`{MEASURED_PROFILE}`, the public tables' for `{PUBLIC_PROFILE}` (vLLM's "
        "FlashAttention-3 over paged caches for attention). They also differ in range: our "
        "grid is narrow (every GEMM dimension but the token count is at least 1024; three "
        "head layouts), so on the public rows outside it (smaller GEMMs, other head layouts) "
        f"`{MEASURED_PROFILE}` extrapolates.\n"
    )


def _repeatability_section(run: Path, repeat: Path) -> str:
    lines = [
        "### Repeatability",
        "",
        f"The same grid timed again on the same machine (`{REPEAT_FOLDER}/`): "
        "|first / second − 1| per shape.",
        "",
        "| operator family | shapes | median | p90 |",
        "|---|---:|---:|---:|",
    ]
    for family, summary in repeatability(run, repeat).items():
        lines.append(f"| {FAMILY_NAMES[family]} | {summary.rows} | {summary.median:.1%} | "
                     f"{summary.p90:.1%} |")
    return "\n".join(lines) + "\n"


def _operator_section(profiles: list[GpuProfile], own: Path, public: Path) -> str:
    lines = [
        "### Each profile on each set of measurements",
        "",
        "Median / p90 absolute percentage error (rows) on held-out rows that neither profile "
        "was fitted on.",
        "",
        "| profile | operator family | our H200 measurements | public H200 tables |",
        "|---|---|---:|---:|",
    ]
    for gpu in profiles:
        on_own, on_public = operator_errors(gpu, own), operator_errors(gpu, public)
        for family in FAMILIES:
            if family in on_own:
                lines.append(f"| {gpu.name} | {FAMILY_NAMES[family]} | "
                             f"{on_own[family].cell()} | {on_public[family].cell()} |")
    return "\n".join(lines) + "\n"


def _steps_section(table: pd.DataFrame) -> str:
    names = [c for c in table.columns if c not in
             ("phase", "batch_size", "new_tokens", "context", "eager_ms", "compiled_ms")]
    header = " | ".join(f"{n} (vs compiled)" for n in names)
    lines = [
        "### Whole steps: Llama-3.1-8B, one H200",
        "",
        "A forward step of the whole model (random bf16 weights, every layer with its own KV "
        "cache, replayed from a CUDA graph) timed with eager layers, where every element-wise "
        "operation is its own kernel, and with each layer through `torch.compile`, which fuses "
        "them; beside them each profile's GPU time for the same step (its step time less the "
        "per-step and per-sequence engine overheads, which a bare forward pass does not run). "
        "Milliseconds.",
        "",
        f"| step | sequences x new tokens | context | eager | compiled | {header} |",
        "|---|---|---:|---:|---:|" + "---:|" * len(names),
    ]
    for values in table.to_dict("records"):
        cells = [f"{values[n]:.2f} ({values[n] / values['compiled_ms'] - 1:+.0%})" for n in names]
        lines.append(
            f"| {values['phase']} | {values['batch_size']} x {values['new_tokens']} | "
            f"{values['context']} | {values['eager_ms']:.2f} | {values['compiled_ms']:.2f} | "
            + " | ".join(cells) + " |"
        )
    lines += ["", *_step_summary(table, names), "", _STEP_READING]
    return "\n".join(lines) + "\n"


def _step_summary(table: pd.DataFrame, names: list[str]) -> list[str]:
    lines = []
    for name in names:
        for phase in ("decode", "prefill"):
            rows = table[table["phase"] == phase]
            compiled = (rows[name] / rows["compiled_ms"] - 1).to_numpy()
            eager = (rows[name] / rows["eager_ms"] - 1).to_numpy()
            lines.append(
                f"- `{name}`, {phase} steps: {_spread(compiled)} against compiled, "
                f"{_spread(eager)} against eager."
            )
    return lines


def _spread(errors: np.ndarray) -> str:
    return (f"median {np.median(errors):+.0%} (from {errors.min():+.0%} "
            f"to {errors.max():+.0%})")


_STEP_READING = """\
What the cost model prices is the GEMMs, the attention kernels and the LM head (and all-reduce
with tensor parallelism). A real step also runs element-wise work: two RMSNorms, the rotary
embedding, SiLU-and-multiply, residual additions and the KV-cache write, in every layer. Its
cost is proportional to the tokens in the step, so it is small beside the weight and KV reads of
a decode step and shows in prefill steps, where the model comes out below the measured steps.
Eager layers run each element-wise operation as its own kernel; serving engines fuse them, as
`torch.compile` does here, with hand-written kernels for the norms and the rotary embedding
besides. So the compiled column is the nearer reference for a serving engine, and what the
model leaves below it in prefill steps is the element-wise work it does not price.
"""
