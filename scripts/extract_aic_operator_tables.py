"""Cut the operator tables `batchsim calibrate fit` reads out of the aiconfigurator-core wheel.

    python scripts/extract_aic_operator_tables.py WHEEL OUT_DIR

NVIDIA's `aiconfigurator-core` 0.12.0 (PyPI, Apache-2.0) ships measured per-operator latencies
under `aiconfigurator_core/systems/data/<gpu>/<operator>/<framework>/<version>/*.parquet`. This
writes the subsets the shipped profiles are fitted on as CSVs in the columns of
../shared/data/calibration/gpu_ops/ (docs/how-to/calibrate.md), and `provenance.yaml` beside
them: for each CSV, the wheel, the member it was cut from and the rows kept. `calibrate fit`
copies that line into the profile it writes.

Only operator tables are read: a member outside `systems/data/<gpu>/{gemm,attention,comm,moe}/`,
or one named like the wheel's end-to-end samples, is refused. Those end-to-end rows are held out
for validating the simulator and must never reach a fit.
"""

from __future__ import annotations

import gzip
import io
import re
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

PACKAGE = "aiconfigurator-core"
_DATA = "aiconfigurator_core/systems/data/"
_OPERATOR_MEMBER = re.compile(
    r"^aiconfigurator_core/systems/data/[a-z0-9_]+/(gemm|attention|comm|moe)/[^/]+/[^/]+/"
    r"[^/]+\.parquet$"
)
# Columns the shared tables drop: constant per file, or not read by the fit.
_DROPPED = ("framework", "op_name", "beam_width")

Filter = Callable[[pd.DataFrame], pd.DataFrame]


@dataclass(frozen=True, slots=True)
class Cut:
    """One CSV: which wheel member, which rows (as code and in words), which columns."""

    out_name: str
    member: str  # path inside the wheel, below _DATA
    rows: Filter
    description: str
    drop_columns: bool = True


def _gemm(dtype: str) -> Filter:
    return lambda frame: frame[frame["gemm_dtype"] == dtype]


def _bf16_attention(frame: pd.DataFrame) -> pd.DataFrame:
    keep = (
        (frame["attn_dtype"] == "bfloat16")
        & (frame["kv_cache_dtype"] == "bfloat16")
        & (frame["window_size"] == 0)
    )
    return frame[keep]


def _moe(dtype: str) -> Filter:
    # Balanced routing only: the fit uses no other (docs/how-to/calibrate.md), and the cut
    # stays small.
    return lambda frame: frame[
        (frame["moe_dtype"] == dtype) & (frame["distribution"] == "balanced")]


def _moe_cut(gpu: str, dtype: str, tag: str) -> Cut:
    return Cut(f"{gpu}_moe_perf_{tag}.csv.gz", f"{gpu}/moe/vllm/0.24.0/moe_perf.parquet",
               _moe(dtype), f"rows with moe_dtype == {dtype}; distribution == balanced")


def _all(frame: pd.DataFrame) -> pd.DataFrame:
    return frame


_GEMM_TAGS = {"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8_block"}
_ATTENTION_ROWS = "rows with attn_dtype == bfloat16; kv_cache_dtype == bfloat16; window_size == 0"


# The wheel's GPUs with the full set of vLLM 0.24.0 tables the fit reads, and the Blackwell
# ones among them (which also have NVFP4 GEMMs).
BLACKWELL = ("b200_sxm", "b300_sxm", "gb200", "gb300")
GPUS = ("h100_sxm", "h200_sxm", *BLACKWELL)


def cuts() -> list[Cut]:
    """The tables the shipped profiles are fitted on (vLLM 0.24.0 kernels throughout)."""
    tables = [
        Cut(f"{gpu}_gemm_perf_{tag}.csv.gz", f"{gpu}/gemm/vllm/0.24.0/gemm_perf.parquet",
            _gemm(dtype), f"rows with gemm_dtype == {dtype}")
        for gpu in GPUS
        for dtype, tag in _GEMM_TAGS.items()
    ]
    # NVFP4 (W4A4 on FP4 tensor cores, vLLM's FlashInferCuteDslNvFp4LinearKernel): Blackwell
    # only. The wheel has no mxfp4 GEMM rows.
    tables += [Cut(f"{gpu}_gemm_perf_fp4.csv.gz", f"{gpu}/gemm/vllm/0.24.0/gemm_perf.parquet",
                   _gemm("nvfp4"), "rows with gemm_dtype == nvfp4") for gpu in BLACKWELL]
    for gpu in GPUS:
        for kind in ("context", "generation"):
            tables.append(Cut(
                f"{gpu}_{kind}_attention_perf_bf16.csv.gz",
                f"{gpu}/attention/vllm/0.24.0/{kind}_attention_perf.parquet",
                _bf16_attention, _ATTENTION_ROWS))
    # Fused-MoE expert kernels, every kernel vLLM 0.24.0 ran (the fit keeps, per layout, the
    # one measured most).
    for gpu in GPUS:
        for dtype, tag in (("bfloat16", "bf16"), ("fp8_block", "fp8_block")):
            tables.append(_moe_cut(gpu, dtype, tag))
    # FP4 experts. NVFP4 (W4A4 on the FP4 tensor cores): Blackwell only. MXFP4 as vLLM runs
    # gpt-oss, weight-only (`w4a16_mxfp4`: bf16 activations; Triton on Hopper, FlashInfer's
    # TRT-LLM mxfp4_bf16 kernel on Blackwell), on every GPU; the table also holds Marlin rows,
    # which the fit leaves out. The W4A8 rows (`w4a8_mxfp4_mxfp8`, Blackwell) are not cut.
    tables += [_moe_cut(gpu, "nvfp4", "fp4") for gpu in BLACKWELL]
    tables += [_moe_cut(gpu, "w4a16_mxfp4", "mxfp4") for gpu in GPUS]
    # Whole files, as the shared tables keep them (the fit picks the all-reduce rows). The
    # H100 and H200 versions are those their profiles were first fitted on; the Blackwell
    # GPUs' is the newest their tables hold, the H200's as well.
    nccl_versions = {"h100_sxm": "2.27.3", **{gpu: "2.29.2" for gpu in ("h200_sxm", *BLACKWELL)}}
    for gpu, nccl in nccl_versions.items():
        tables.append(Cut(f"{gpu}_nccl_{nccl}.csv", f"{gpu}/comm/nccl/{nccl}/nccl_perf.parquet",
                          _all, "all rows", drop_columns=False))
    return tables


def read_member(wheel: zipfile.ZipFile, member: str) -> pd.DataFrame:
    """One operator table of the wheel; anything but an operator table is refused."""
    path = _DATA + member
    if not _OPERATOR_MEMBER.match(path) or "silicon" in path.lower():
        raise SystemExit(f"{path}: not an operator table; refusing to read it")
    return pd.read_parquet(io.BytesIO(wheel.read(path)))


def write_cut(frame: pd.DataFrame, cut: Cut, out: Path) -> int:
    rows = cut.rows(frame)
    if cut.drop_columns:
        rows = rows.drop(columns=[c for c in _DROPPED if c in rows.columns])
    path = out / cut.out_name
    if path.suffix == ".gz":
        # mtime=0: the same wheel gives the same bytes.
        with gzip.GzipFile(path, "wb", mtime=0) as handle:
            handle.write(rows.to_csv(index=False).encode())
    else:
        path.write_text(rows.to_csv(index=False), encoding="utf-8")
    return len(rows)


def main(wheel_path: Path, out: Path) -> None:
    version = re.search(r"-(\d+\.\d+\.\d+)-", wheel_path.name)
    if version is None:
        raise SystemExit(f"{wheel_path}: expected an {PACKAGE} wheel named like "
                         "aiconfigurator_core-0.12.0-...whl")
    out.mkdir(parents=True, exist_ok=True)
    provenance = {}
    with zipfile.ZipFile(wheel_path) as wheel:
        for cut in cuts():
            rows = write_cut(read_member(wheel, cut.member), cut, out)
            provenance[cut.out_name] = (
                f"{PACKAGE} {version[1]} (PyPI, Apache-2.0): {_DATA}{cut.member}; "
                f"{cut.description}"
            )
            print(f"wrote {out / cut.out_name}: {rows} rows")
    (out / "provenance.yaml").write_text(yaml.safe_dump(provenance, width=200),
                                         encoding="utf-8")
    print(f"wrote {out / 'provenance.yaml'}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    main(Path(sys.argv[1]), Path(sys.argv[2]))
