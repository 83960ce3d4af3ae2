"""`batchsim calibrate measure`: time every family on one device and write the tables."""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from batchsim.calibration.measure.benchmarks import (
    allreduce_rows,
    copy_bandwidth,
    decode_rows,
    gemm_rows,
    prefill_rows,
)
from batchsim.calibration.measure.forward import forward_rows, quick_model
from batchsim.calibration.measure.grids import Grid, full_grid, quick_grid
from batchsim.calibration.measure.timing import make_timer
from batchsim.gpu.model_spec import ModelSpec

TABLE_NAMES = {
    "gemm": "gemm_perf_bf16.csv",
    "prefill_attention": "context_attention_perf_bf16.csv",
    "decode_attention": "generation_attention_perf_bf16.csv",
    "allreduce": "nccl_perf.csv",
    "forward_steps": "forward_steps_bf16.csv",
}


class MeasureError(RuntimeError):
    """Measurement cannot start (no torch, no such device); the message says what to do."""


@dataclass(frozen=True, slots=True)
class MeasureOptions:
    device: str  # "cuda" or "cpu"
    model: ModelSpec
    out: Path
    quick: bool
    repeats: int
    warmup: int
    forward_steps: bool = True  # also time whole decode and prefill steps (dense models)
    forward_compile: bool = False  # ... also with each layer through torch.compile (fused)


def import_torch() -> Any:
    """torch, or a MeasureError that says how to install it."""
    try:
        return importlib.import_module("torch")
    except ImportError:
        raise MeasureError(
            "calibrate measure needs torch: pip install 'batchsim[calibrate]'"
        ) from None


def default_device() -> str:
    """cuda when torch sees a GPU, else cpu."""
    torch = import_torch()
    return "cuda" if torch.cuda.is_available() else "cpu"


def measure(options: MeasureOptions, progress: Callable[[str], None] = print) -> list[Path]:
    """Run the benchmarks and write one CSV per family plus device.json; returns the paths."""
    torch = import_torch()
    if options.device not in ("cuda", "cpu"):
        raise MeasureError(f"unknown device {options.device!r}; expected cuda or cpu")
    if options.device == "cuda" and not torch.cuda.is_available():
        raise MeasureError("--device cuda but torch sees no CUDA GPU; use --device cpu")
    torch.manual_seed(0)
    if options.device == "cpu":
        # One thread: waking a pool of intra-op threads costs milliseconds on some machines,
        # which would swamp every small operator.
        torch.set_num_threads(1)
    grid = quick_grid() if options.quick else full_grid(options.model)
    timer = make_timer(torch, options.device, warmup=options.warmup, repeats=options.repeats)
    timer.warm_clocks()
    options.out.mkdir(parents=True, exist_ok=True)
    # Each table is written as soon as it is measured: a long GPU run that fails late keeps
    # what it finished.
    paths: list[Path] = []

    def write(family: str, rows: list[dict[str, object]]) -> None:
        paths.append(_write_table(options.out / TABLE_NAMES[family], rows))

    with torch.inference_mode():
        for family, bench in (("gemm", gemm_rows), ("prefill_attention", prefill_rows),
                              ("decode_attention", decode_rows)):
            progress(f"timing {family}")
            write(family, bench(torch, timer, grid, options.device))
        bandwidth = copy_bandwidth(torch, timer, grid, options.device)
        allreduce_note = _allreduce_note(torch, options.device)
        if allreduce_note.startswith("measured"):
            progress("timing all-reduce")
            write("allreduce", allreduce_rows(torch, grid, options.repeats))
        steps_note = _forward_note(options)
        if steps_note.startswith("measured"):
            progress("timing whole forward steps")
            step_model = quick_model() if options.quick else options.model
            steps = forward_rows(
                torch, timer, step_model, options.device, quick=options.quick,
                compiled=options.forward_compile, free_bytes=_free_bytes(torch, options.device),
                progress=progress)
            if steps.rows:
                write("forward_steps", steps.rows)
            if steps.skipped:
                steps_note += "; skipped, not enough device memory: " + "; ".join(steps.skipped)
    paths.append(_write_device(options, torch, grid, bandwidth, allreduce_note, steps_note))
    return paths


def _free_bytes(torch: Any, device: str) -> Callable[[], int] | None:
    """Free device memory, read afresh each time (CUDA); None on the CPU (nothing checked)."""
    if device != "cuda":
        return None
    return lambda: int(torch.cuda.mem_get_info()[0])


def _forward_note(options: MeasureOptions) -> str:
    if not options.forward_steps:
        return "skipped: --no-forward-steps"
    layers = ("eager layers, and layers through torch.compile" if options.forward_compile
              else "eager layers")
    if options.quick:
        return f"measured: a two-layer toy model (quick grid), {layers}"
    if options.model.moe is not None or options.model.mla is not None:
        return f"skipped: {options.model.name} is not a dense model"
    graphs = "replayed from CUDA graphs" if options.device == "cuda" else "run directly"
    return f"measured: {options.model.name}, random bf16 weights, {layers}, {graphs}"


def _allreduce_note(torch: Any, device: str) -> str:
    if device != "cuda":
        return "skipped: all-reduce is measured across CUDA GPUs over NCCL"
    count = torch.cuda.device_count()
    if count < 2:
        return f"skipped: {count} CUDA GPU visible; all-reduce needs at least 2"
    return f"measured over NCCL on up to {min(count, 8)} GPUs"


def _write_table(path: Path, rows: list[dict[str, object]]) -> Path:
    pd.DataFrame(rows).to_csv(path, index=False, float_format="%.6g")
    return path


def _write_device(
    options: MeasureOptions, torch: Any, grid: Grid, bandwidth: float, allreduce: str,
    forward_steps: str,
) -> Path:
    cuda = options.device == "cuda"
    info = {
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "device_type": options.device,
        "torch": str(torch.__version__),
        "cuda": str(torch.version.cuda) if cuda else None,
        "dtype": "bfloat16",
        "grid": "quick" if options.quick else f"full ({options.model.name} shapes + generic)",
        "timing": (
            "CUDA events around each repeat, all repeats queued behind a spin kernel and read "
            "after one synchronisation; median of repeats after warm-up"
            if cuda else "time.perf_counter around each (synchronous) repeat; median"
        ),
        "l2_flush": (
            "yes: a buffer twice the L2 size is written before every repeat"
            if cuda else "no: CPU caches are not flushed"
        ),
        "cpu_threads": None if cuda else 1,
        "warmup": options.warmup,
        "repeats": options.repeats,
        "copy_bandwidth_bytes_per_s": float(f"{bandwidth:.3g}"),
        "copy_bytes": grid.copy_bytes,
        "allreduce": allreduce,
        "forward_steps": forward_steps,
    }
    path = options.out / "device.json"
    path.write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return path
