"""Reading measurement tables: ours (`batchsim calibrate measure`) or the public ones.

Both use the columns of NVIDIA aiconfigurator's per-operator tables (latency in ms):
- `*gemm_perf*.csv[.gz]`: m, n, k, latency
- `*context_attention_perf*`: batch_size, isl, num_heads, num_key_value_heads, head_dim, latency
- `*generation_attention_perf*`: the same with isl = 1 and step = KV-cache length read
- `*nccl*.csv`: op_name, num_gpus, message_size, latency. `message_size` counts elements of
  `nccl_dtype` (half when the column is absent), not bytes: aiconfigurator's collector divides
  the nccl-tests byte size by the element size before writing it (`allreduce_message_bytes`).
- `*moe_perf*`: num_tokens, hidden_size, inter_size, topk, num_experts, moe_tp_size,
  moe_ep_size, latency: one fused-MoE expert kernel call (`moe_perf_bf16`: family `moe`;
  `moe_perf_fp8_block`: block-scaled fp8, family `moe_fp8`; `moe_perf_fp8`, per-tensor, is not
  fitted: docs/fidelity.md; `moe_perf_fp4`: NVFP4, W4A4, family `moe_fp4`; `moe_perf_mxfp4`:
  MXFP4 weight-only, rows of moe_dtype == w4a16_mxfp4 and, where the table names it, vLLM's
  gpt-oss kernel, family `moe_mxfp4`). Rows of balanced routing only, and per parallel layout
  the kernel most rows were measured with (vLLM picks its kernel by layout).

Extra columns are allowed; rows of other dtypes, kernels or ops are filtered out and the filter
is recorded, so a profile says exactly which rows it was fitted on. GEMM (and MoE) tables are
told apart by their weights' dtype in the name: `*gemm_perf_fp8*` is per-tensor fp8 (family
`gemm_fp8`), `*gemm_perf_fp8_block*` block-scaled fp8, which is not fitted (below ~0.1 ms the
public tables time a fixed host-side floor, not the GPU: docs/fidelity.md) and so is skipped,
`*gemm_perf_fp4*` NVFP4 (rows of gemm_dtype == nvfp4; family `gemm_fp4`), and any other
`*gemm_perf*` bf16. A folder's `provenance.yaml`, if present, says where each
file was cut from (file name -> text); the fit copies that into the profile.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from batchsim.gpu.calibration_record import FAMILIES, MeasurementSource

FILE_PATTERNS: tuple[tuple[str, str | None], ...] = (
    ("moe_perf_fp8_block", "moe_fp8"),
    ("moe_perf_fp8", None),
    ("moe_perf_fp4", "moe_fp4"),
    ("moe_perf_mxfp4", "moe_mxfp4"),
    ("moe_perf", "moe"),
    ("gemm_perf_fp8_block", None),
    ("gemm_perf_fp8", "gemm_fp8"),
    ("gemm_perf_fp4", "gemm_fp4"),
    ("gemm_perf", "gemm"),
    ("context_attention_perf", "prefill_attention"),
    ("generation_attention_perf", "decode_attention"),
    ("nccl", "allreduce"),
)
"""A file belongs to the family of the first pattern its name contains (None: not fitted)."""
PROVENANCE_FILE = "provenance.yaml"

_MOE_COLUMNS = ("num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size",
                "moe_ep_size", "latency")
REQUIRED_COLUMNS = {
    "gemm": ("m", "n", "k", "latency"),
    "gemm_fp8": ("m", "n", "k", "latency"),
    "gemm_fp4": ("m", "n", "k", "latency"),
    "prefill_attention": (
        "batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim", "latency",
    ),
    "decode_attention": (
        "batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim", "step", "latency",
    ),
    "allreduce": ("op_name", "num_gpus", "message_size", "latency"),
    "moe": _MOE_COLUMNS,
    "moe_fp8": _MOE_COLUMNS,
    "moe_fp4": _MOE_COLUMNS,
    "moe_mxfp4": _MOE_COLUMNS,
}


class MeasurementError(ValueError):
    """A measurement folder or file that cannot be used; the message names the file."""


@dataclass(frozen=True, slots=True)
class FamilyTable:
    """The usable rows of one family (latency converted to seconds as `seconds`)."""

    family: str
    rows: pd.DataFrame
    source: MeasurementSource


def family_of(path: Path) -> str | None:
    """The family a measurement file belongs to by its name, or None."""
    name = path.name
    if not name.endswith((".csv", ".csv.gz")):
        return None
    return next((family for pattern, family in FILE_PATTERNS if pattern in name), None)


def load_measurements(directory: Path, prefix: str = "") -> dict[str, FamilyTable]:
    """Every family found in `directory` (one file per family), among files named `prefix*`.

    The prefix picks one GPU out of a folder holding several (the public tables are named
    `a100_sxm_*`, `h100_sxm_*`, ...).
    """
    if not directory.is_dir():
        raise MeasurementError(f"{directory}: no such measurement folder")
    files: dict[str, Path] = {}
    for path in sorted(directory.iterdir()):
        family = family_of(path)
        if family is None or not path.name.startswith(prefix):
            continue
        if family in files:
            raise MeasurementError(
                f"{directory}: two {family} tables ({files[family].name}, {path.name}); keep one"
            )
        files[family] = path
    if not files:
        patterns = "(" + ", ".join(f"*{p}*.csv[.gz]" for p, f in FILE_PATTERNS if f) + ")"
        raise MeasurementError(f"{directory}: no measurement tables {prefix}{patterns}")
    origins = read_provenance(directory)
    return {family: load_table(family, files[family], origins.get(files[family].name, ""))
            for family in FAMILIES if family in files}


def read_provenance(directory: Path) -> dict[str, str]:
    """The folder's `provenance.yaml` (file name -> where it was cut from), or nothing."""
    path = directory / PROVENANCE_FILE
    if not path.is_file():
        return {}
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise MeasurementError(f"{path}: cannot read provenance ({exc})") from None
    if not isinstance(document, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in document.items()
    ):
        raise MeasurementError(f"{path}: expected a mapping of file name -> origin text")
    return document


def load_table(family: str, path: Path, origin: str = "") -> FamilyTable:
    """Read, check and filter one family's table."""
    try:
        frame = pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise MeasurementError(f"{path}: cannot read measurement table ({exc})") from None
    missing = [c for c in REQUIRED_COLUMNS[family] if c not in frame.columns]
    if missing:
        raise MeasurementError(f"{path}: missing column(s) {', '.join(missing)}")
    rows, description = _FILTERS[family](frame)
    rows = rows[rows["latency"] > 0].copy()
    if rows.empty:
        raise MeasurementError(f"{path}: no usable {family} rows after filtering ({description})")
    rows["seconds"] = rows["latency"].astype(float) * 1e-3
    source = MeasurementSource(family=family, file=path.name, rows=len(rows), filter=description,
                               origin=origin)
    return FamilyTable(family=family, rows=rows.reset_index(drop=True), source=source)


def _keep_equal(frame: pd.DataFrame, column: str, value: str, notes: list[str]) -> pd.DataFrame:
    if column in frame.columns:
        notes.append(f"{column} == {value}")
        return frame[frame[column] == value]
    return frame


def _majority_kernel(frame: pd.DataFrame, notes: list[str]) -> pd.DataFrame:
    """Keep the kernel most rows were measured with (e.g. FA3 over an FA4 side table)."""
    if "kernel_source" not in frame.columns or frame.empty:
        return frame
    kernel = str(frame["kernel_source"].value_counts().idxmax())
    notes.append(f"kernel_source == {kernel}")
    return frame[frame["kernel_source"] == kernel]


# vLLM's gpt-oss MXFP4 method (`Mxfp4MoEMethod`) as the tables name its kernels: Triton on
# Hopper, FlashInfer's TRT-LLM mxfp4_bf16 on Blackwell.
GPT_OSS_MXFP4_KERNEL = "gptossmxfp4"


def _moe_rows(frame: pd.DataFrame, dtype: str, kernel: str = "") -> tuple[pd.DataFrame, str]:
    """Balanced routing (the simulator spreads tokens evenly; skew is `moe_imbalance`), and per
    (TP, EP) layout its most measured kernel: on Hopper vLLM runs block-scaled fp8 experts
    with Triton under TP and FlashInfer's CUTLASS under EP, and a table may hold both.
    `kernel`: where the table names kernels, only those whose name contains it (the weight-only
    MXFP4 rows also time Marlin, on another model's shapes)."""
    notes: list[str] = []
    frame = _keep_equal(frame, "moe_dtype", dtype, notes)
    frame = _keep_equal(frame, "distribution", "balanced", notes)
    if kernel and "kernel_source" in frame.columns:
        notes.append(f"kernel_source contains {kernel}")
        frame = frame[frame["kernel_source"].astype(str).str.contains(kernel, regex=False)]
    if "kernel_source" not in frame.columns or frame.empty:
        return frame, "; ".join(notes) or "all rows"
    notes.append("per (moe_tp_size, moe_ep_size) its most frequent kernel_source")
    layouts = frame.groupby(["moe_tp_size", "moe_ep_size"])["kernel_source"]
    majority = layouts.transform(lambda kernels: kernels.value_counts().idxmax())
    return frame[frame["kernel_source"] == majority], "; ".join(notes)


def _gemm_rows(frame: pd.DataFrame, dtype: str) -> tuple[pd.DataFrame, str]:
    notes: list[str] = []
    frame = _keep_equal(frame, "gemm_dtype", dtype, notes)
    return frame, "; ".join(notes) or "all rows"


def _attention_rows(frame: pd.DataFrame, decode: bool) -> tuple[pd.DataFrame, str]:
    notes: list[str] = []
    frame = _keep_equal(frame, "attn_dtype", "bfloat16", notes)
    frame = _keep_equal(frame, "kv_cache_dtype", "bfloat16", notes)
    if "window_size" in frame.columns:
        notes.append("window_size == 0")
        frame = frame[frame["window_size"] == 0]
    if decode:
        notes.append("isl == 1")
        frame = frame[frame["isl"] == 1]
    frame = _majority_kernel(frame, notes)
    return frame, "; ".join(notes) or "all rows"


_NCCL_ELEMENT_BYTES = {"half": 2.0, "bfloat16": 2.0, "float": 4.0, "int8": 1.0}


def allreduce_message_bytes(rows: pd.DataFrame) -> np.ndarray:
    """Bytes of each all-reduce row's message: `message_size` elements of `nccl_dtype`."""
    elements = rows["message_size"].to_numpy(dtype=np.float64)
    if "nccl_dtype" not in rows.columns:
        return elements * _NCCL_ELEMENT_BYTES["half"]
    dtypes = rows["nccl_dtype"].astype(str)
    unknown = sorted(set(dtypes) - set(_NCCL_ELEMENT_BYTES))
    if unknown:
        raise MeasurementError(f"nccl_dtype {unknown[0]!r} is not one of "
                               f"{', '.join(_NCCL_ELEMENT_BYTES)}")
    return elements * dtypes.map(_NCCL_ELEMENT_BYTES).to_numpy(dtype=np.float64)


def _allreduce_rows(frame: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    notes = ["op_name == all_reduce", "num_gpus >= 2"]
    frame = frame[(frame["op_name"] == "all_reduce") & (frame["num_gpus"] >= 2)]
    frame = _keep_equal(frame, "nccl_dtype", "half", notes)
    return frame, "; ".join(notes)


_FILTERS = {
    "gemm": lambda frame: _gemm_rows(frame, "bfloat16"),
    "gemm_fp8": lambda frame: _gemm_rows(frame, "fp8"),
    "gemm_fp4": lambda frame: _gemm_rows(frame, "nvfp4"),
    "prefill_attention": lambda frame: _attention_rows(frame, decode=False),
    "decode_attention": lambda frame: _attention_rows(frame, decode=True),
    "allreduce": _allreduce_rows,
    "moe": lambda frame: _moe_rows(frame, "bfloat16"),
    "moe_fp8": lambda frame: _moe_rows(frame, "fp8_block"),
    "moe_fp4": lambda frame: _moe_rows(frame, "nvfp4"),
    "moe_mxfp4": lambda frame: _moe_rows(frame, "w4a16_mxfp4", GPT_OSS_MXFP4_KERNEL),
}
