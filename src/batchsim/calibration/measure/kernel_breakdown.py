"""`batchsim calibrate breakdown`: where a whole forward step's GPU time goes, by kernel kind.

The cost model prices a step's GEMMs, attention and LM head; measured prefill steps take about a
fifth longer. This profiles the same random-weight steps as `forward.py` (eager layers, and
layers through `torch.compile` with `--compile`), sums each kernel's device time with
`torch.profiler`, and sorts the kernels by name into a few categories (GEMM, attention, fused
Triton, element-wise, copy, other), so the unpriced share can be read off per step.

What is summed is the time kernels run on the device: the gaps while Python launches the next
kernel are not in it (a CUDA graph removes them in serving), so the categories add up to the
step's busy time. On a CPU (tests) the "kernels" are torch operators and the time is their
self CPU time: the same code path, nothing about a GPU.

torch is imported by the caller (`import_torch`), so batchsim imports without it; this module
imports nothing that needs pydantic or simpy, so it runs where only torch, numpy, pandas,
pyyaml, typer and rich are installed.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from batchsim.calibration.measure.breakdown_defaults import (
    DEFAULT_DECODE_POINTS,
    DEFAULT_PREFILL_LENGTHS,
)
from batchsim.calibration.measure.forward import (
    RandomDenseModel,
    StepShape,
    step_label,
    step_shortfall,
    weights_shortfall,
)
from batchsim.calibration.measure.run import MeasureError, import_torch
from batchsim.gpu.model_spec import ModelSpec

Row = dict[str, object]

TOP_KERNELS = 15
NAME_CHARS = 200  # kernel names are C++ templates, some thousands of characters long

BREAKDOWN_FILE = "kernel_breakdown_bf16.csv"
TOP_FILE = "kernel_top.csv"
INFO_FILE = "breakdown.json"

CATEGORIES = ("gemm", "attention", "fused", "elementwise", "copy", "other")

# Kernel name patterns (case-insensitive, searched anywhere in the name); the first that matches
# decides. The order matters:
# - Triton kernels first: Inductor names them after every op they fuse, so a fused RMSNorm
#   before attention reads `triton_red_fused__scaled_dot_product_flash_attention_..._rsqrt`.
#   Its templates (`triton_tem_`, only with max-autotune) are GEMMs or attention in Triton.
# - attention before gemm: FlashAttention's template names carry `cutlass::bfloat16_t`.
# - copy before elementwise: PyTorch's copies (`direct_copy_kernel_cuda`, dtype casts, the
#   KV-cache write) run inside `elementwise_kernel<...>` templates.
_PATTERNS: tuple[tuple[str, str], ...] = (
    ("gemm", r"^triton_tem_\w*(mm|gemm)"),
    ("attention", r"^triton_tem_\w*(attention|attn)"),
    ("fused", r"^triton_"),
    # CPU only: Inductor's C++ kernels run inside this range and are not recorded one by one,
    # so its self time is theirs. (On CUDA the range is a CPU event or a GPU annotation, both
    # left out.)
    ("fused", r"^## call compiledfxgraph"),
    # vLLM's KV-cache write is named after the attention backend it writes for.
    ("copy", r"reshape_and_cache"),
    ("attention", r"flash|fmha|sdpa|attention|attn|batchprefill|batchdecode"),
    ("gemm", r"gemm|gemv|cublas|cutlass|nvjet|xmma|matmul|splitkreduce|aten::(mm|addmm|bmm)$"),
    # `elementwise_kernel_with_index` is arange's kernel, not an indexing copy.
    ("copy", r"memcpy|memset|copy|catarray|aten::cat$|(?<!with_)index|scatter|gather|fill"),
    ("elementwise", r"elementwise|vectorized|unrolled|reduce_kernel|norm|rope|rotary|silu"
                    r"|act_and_mul|softmax|aten::(mul|add|sub|div|neg|exp|pow|rsqrt|sqrt|mean"
                    r"|sum|cos|sin|where|clamp)_?$"),
)
_COMPILED = tuple((category, re.compile(pattern, re.IGNORECASE)) for category, pattern in _PATTERNS)


def classify(kernel_name: str) -> str:
    """The category of a kernel (CUDA) or torch operator (CPU), from its name."""
    for category, pattern in _COMPILED:
        if pattern.search(kernel_name):
            return category
    return "other"


@dataclass(frozen=True, slots=True)
class BreakdownOptions:
    device: str  # "cuda" or "cpu"
    model: ModelSpec
    out: Path
    prefill_lengths: tuple[int, ...] = DEFAULT_PREFILL_LENGTHS
    decode_points: tuple[tuple[int, int], ...] = DEFAULT_DECODE_POINTS
    compiled: bool = False  # also profile with each layer through torch.compile
    runs: int = 5  # profiled steps, summed then divided
    warmup: int = 3  # unprofiled steps first (torch.compile compiles in the first)

    def shapes(self) -> tuple[StepShape, ...]:
        return tuple(StepShape("prefill", 1, s, 0) for s in self.prefill_lengths) + tuple(
            StepShape("decode", b, 1, c) for b, c in self.decode_points
        )


@dataclass(frozen=True, slots=True)
class KernelTime:
    name: str
    calls: int  # over all profiled runs
    total_us: float  # device time over all profiled runs


@dataclass(frozen=True, slots=True)
class BreakdownResult:
    paths: list[Path]  # the files written
    failed: list[str]  # steps that failed, and why (also in breakdown.json)


def run_breakdown(options: BreakdownOptions,
                  progress: Callable[[str], None] = print) -> BreakdownResult:
    """Profile every step and variant, writing the tables after each step."""
    torch = import_torch()
    _check(options, torch)
    torch.manual_seed(0)
    options.out.mkdir(parents=True, exist_ok=True)
    state = _Results(options, torch)
    state.write()  # breakdown.json exists from the start, so a run killed early says so
    with torch.inference_mode():
        for compiled in (False, True) if options.compiled else (False,):
            _profile_variant(torch, options, compiled, state, progress)
    state.write()
    return BreakdownResult(paths=state.paths(), failed=list(state.failed))


def _check(options: BreakdownOptions, torch: Any) -> None:
    if options.device not in ("cuda", "cpu"):
        raise MeasureError(f"unknown device {options.device!r}; expected cuda or cpu")
    if options.device == "cuda" and not torch.cuda.is_available():
        raise MeasureError("--device cuda but torch sees no CUDA GPU; use --device cpu")
    if options.model.moe is not None or options.model.mla is not None:
        raise MeasureError(f"breakdown profiles dense models; {options.model.name} is not one")
    if options.runs < 1 or options.warmup < 0:
        raise MeasureError("--runs must be at least 1 and --warmup at least 0")


class _Results:
    """The rows so far and what was skipped; rewritten whole after every step (small)."""

    def __init__(self, options: BreakdownOptions, torch: Any) -> None:
        self.options, self.torch = options, torch
        self.breakdown: list[Row] = []
        self.top: list[Row] = []
        self.skipped: list[str] = []
        self.done: list[str] = []
        self.failed: list[str] = []  # steps that raised or recorded no kernels, and why

    def write(self) -> None:
        out = self.options.out
        if self.breakdown:
            pd.DataFrame(self.breakdown).to_csv(out / BREAKDOWN_FILE, index=False,
                                                float_format="%.6g")
            pd.DataFrame(self.top).to_csv(out / TOP_FILE, index=False, float_format="%.6g")
        info = _run_info(self.options, self.torch) | {"done": self.done, "skipped": self.skipped,
                                                   "failed": self.failed}
        (out / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")

    def paths(self) -> list[Path]:
        names = (BREAKDOWN_FILE, TOP_FILE, INFO_FILE) if self.breakdown else (INFO_FILE,)
        return [self.options.out / name for name in names]


def _profile_variant(torch: Any, options: BreakdownOptions, compiled: bool, state: _Results,
                     progress: Callable[[str], None]) -> None:
    label = "through torch.compile" if compiled else "eager"
    progress(f"layers {label}")
    free = _free_bytes(torch, options.device)
    shortfall = weights_shortfall(options.model, free)
    if shortfall is not None:
        state.skipped.append(f"{label}: {shortfall}")
        state.write()
        return
    net = RandomDenseModel(torch, options.model, options.device, compiled=compiled)
    for shape in options.shapes():
        name = f"{label}, {step_label(shape)}"
        shortfall = step_shortfall(options.model, shape, free)
        if shortfall is not None:
            state.skipped.append(f"{name}: {shortfall}")
            progress(f"  {step_label(shape)}: skipped, {shortfall}")
        else:
            progress(f"  {step_label(shape)}")
            failure = _profile_step(torch, options, net, shape, state)
            if failure is None:
                state.done.append(name)
            else:
                state.failed.append(f"{name}: {failure}")
                progress(f"  {step_label(shape)}: failed, {failure}")
        state.write()  # a run stopped by a timeout keeps every step it finished
        if options.device == "cuda":
            torch.cuda.empty_cache()  # the next step's KV caches may be far larger
    del net  # one variant's weights at a time
    if options.device == "cuda":
        torch.cuda.empty_cache()


def _profile_step(torch: Any, options: BreakdownOptions, net: RandomDenseModel,
                  shape: StepShape, state: _Results) -> str | None:
    """Profile one step and keep its rows; on failure, why (the run goes on to the next step).

    A run on a lent GPU gets one try: an out-of-memory step, a compiler error or a profiler
    that records nothing should cost that step only, so any exception is caught, kept in
    breakdown.json with the step, and the command exits non-zero at the end.
    """
    try:
        step = net.prepare(shape).run
        for _ in range(options.warmup):
            step()
        wall_us = _wall_us_per_step(torch, step, options.device, options.runs)
        kernels = profile_kernels(torch, step, options.device, options.runs)
    except Exception as err:
        return f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:500]
    if not kernels:
        return ("the profiler recorded no kernels (on CUDA: is CUPTI available to "
                "torch.profiler?)")
    key = _step_key(net, shape)
    state.breakdown.extend(breakdown_rows(key, kernels, options.runs, wall_us))
    state.top.extend(top_rows(key, kernels, options.runs))
    return None


def _wall_us_per_step(torch: Any, step: Callable[[], Any], device: str, runs: int) -> float:
    """Mean wall time of unprofiled steps launched from Python (no CUDA graph): with the kernel
    sum, it shows how much of an eager step is launch gaps."""
    _synchronize(torch, device)
    start = time.perf_counter()
    for _ in range(runs):
        step()
    _synchronize(torch, device)
    return (time.perf_counter() - start) / runs * 1e6


def profile_kernels(torch: Any, step: Callable[[], Any], device: str,
                    runs: int) -> list[KernelTime]:
    """Device time per kernel name over `runs` steps (CPU: self time per torch operator)."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    _synchronize(torch, device)
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(runs):
            step()
        _synchronize(torch, device)  # every kernel finished inside the profiled window
    events = prof.key_averages()
    if device == "cuda":
        return _device_kernels(torch, events)
    return [KernelTime(e.key, int(e.count), float(e.self_cpu_time_total)) for e in events
            if e.self_cpu_time_total > 0]


def _device_kernels(torch: Any, events: Iterable[Any]) -> list[KernelTime]:
    """Kernels, memcpys and memsets on the device. GPU-side user annotations (the ranges of
    `record_function`, which torch.compile opens around its graphs) span kernels and would
    count them twice: left out, as torch's own summary table does."""
    cpu = torch.autograd.DeviceType.CPU
    kernels = []
    for event in events:
        if (event.device_type == cpu or getattr(event, "is_user_annotation", False)
                or _ANNOTATION.search(event.key)):
            continue
        kernels.append(KernelTime(event.key, int(event.count), _self_device_us(event)))
    return [k for k in kernels if k.total_us > 0]


# Names of the ranges torch and torch.compile open: if a torch build did not flag them as user
# annotations, they would still not be kernels.
_ANNOTATION = re.compile(r"^## |^Torch-Compiled Region|^ProfilerStep#|^TorchDynamo Cache Lookup")


def _self_device_us(event: Any) -> float:
    # torch 2.4 renamed `self_cuda_time_total` to `self_device_time_total`; take either.
    value = getattr(event, "self_device_time_total", None)
    if value is None:
        value = event.self_cuda_time_total
    return float(value)


def _synchronize(torch: Any, device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _step_key(net: RandomDenseModel, shape: StepShape) -> Row:
    return {"model": net.model.name, "phase": shape.phase, "batch_size": shape.batch,
            "context": shape.context, "new_tokens": shape.new_tokens,
            "compiled": net.compiled}


def breakdown_rows(key: Row, kernels: list[KernelTime], runs: int, wall_us: float) -> list[Row]:
    """One row per category (all of them, zeros included): kernels and device µs per step."""
    step_us = sum(k.total_us for k in kernels) / runs
    rows = []
    for category in CATEGORIES:
        mine = [k for k in kernels if classify(k.name) == category]
        device_us = sum(k.total_us for k in mine) / runs
        rows.append(key | {
            "category": category,
            "kernels_per_step": sum(k.calls for k in mine) / runs,
            "device_us_per_step": device_us,
            "share": device_us / step_us if step_us > 0 else 0.0,
            "step_device_us": step_us,
            "step_wall_us": wall_us,
        })
    return rows


def top_rows(key: Row, kernels: list[KernelTime], runs: int, top: int = TOP_KERNELS) -> list[Row]:
    """The `top` kernels of the step by device time, names cut to NAME_CHARS characters."""
    step_us = sum(k.total_us for k in kernels) / runs
    ranked = sorted(kernels, key=lambda k: k.total_us, reverse=True)[:top]
    return [
        key | {
            "rank": rank, "kernel": k.name[:NAME_CHARS], "category": classify(k.name),
            "calls_per_step": k.calls / runs, "device_us_per_step": k.total_us / runs,
            "share": k.total_us / runs / step_us if step_us > 0 else 0.0,
        }
        for rank, k in enumerate(ranked, start=1)
    ]


def _free_bytes(torch: Any, device: str) -> Callable[[], int] | None:
    """Free device memory, read afresh each time (CUDA); None on the CPU (nothing checked)."""
    if device != "cuda":
        return None
    return lambda: int(torch.cuda.mem_get_info()[0])


def _run_info(options: BreakdownOptions, torch: Any) -> dict[str, object]:
    cuda = options.device == "cuda"
    return {
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "device_type": options.device,
        "torch": str(torch.__version__),
        "cuda": str(torch.version.cuda) if cuda else None,
        "dtype": "bfloat16",
        "model": options.model.name,
        "options": {
            "prefill_lengths": list(options.prefill_lengths),
            "decode_points": [list(p) for p in options.decode_points],
            "compiled": options.compiled, "runs": options.runs, "warmup": options.warmup,
        },
        "method": (
            "torch.profiler over `runs` steps after `warmup`; per kernel name, self device "
            "time of kernels, memcpys and memsets (GPU user annotations left out), divided "
            "by runs; steps launched from Python, no CUDA graph"
            if cuda else "torch.profiler (CPU): self CPU time per torch operator, divided by runs"
        ),
        "categories": [[category, pattern] for category, pattern in _PATTERNS],  # in order
    }
