"""What share of a table of measured deployments batchsim can represent, and why not the rest.

    python scripts/serving_coverage.py ../shared/data/serving/serving_benchmarks_dev.csv

The table has the columns of the project's serving benchmarks (`model_path`, `system`,
`backend`, `mode`, `gemm_quant_mode`, `tp_size`, `pp_size`, `attention_dp_size`,
`moe_ep_size`, and `prefill_*` / `decode_*` for disaggregated rows). A row is representable
when its model is in the library (by the names `batchsim replay` maps, or a library name
that matches the model's), its GPU has a profile, its engine a profile, its GEMM
quantisation a weight dtype, and every pool's layout fits: the memory plan of that model on
that GPU at that TP / PP / EP / data-parallel attention leaves room for the KV cache, and a
disaggregated row's pools have no pipeline stages (which the disaggregated arm refuses). It
prints the share, the reasons for the rest, and the share per model.
"""

from __future__ import annotations

import argparse
import math
import re
from collections import Counter
from collections.abc import Mapping
from functools import cache
from importlib import resources
from pathlib import Path

import pandas as pd

from batchsim.apps.replay.deployment import GPUS, MODELS, WEIGHTS
from batchsim.gpu.hardware import HardwareError, load_gpu_profile
from batchsim.gpu.memory import ModelDoesNotFitError, plan_memory
from batchsim.gpu.model_spec import ModelError, library_model_names, load_model
from batchsim.gpu.pipeline_stages import check_pipeline_parallel

_CHECKPOINT_SUFFIXES = ("-instruct", "-it", "-fp8", "-bf16", "-base", "-hf")


def engine_names() -> set[str]:
    """The shipped engine profiles' names."""
    folder = resources.files("batchsim.hardware_profiles").joinpath("engines")
    return {entry.name.removesuffix(".yaml") for entry in folder.iterdir()
            if entry.name.endswith(".yaml")}


def library_name(model_path: str, library: set[str]) -> str | None:
    """The library model of a Hugging Face id: replay's mapping, else the repository name
    lower-cased without checkpoint suffixes (-Instruct, -FP8, ...) when the library has it."""
    if model_path in MODELS:
        return MODELS[model_path]
    name = model_path.rsplit("/", 1)[-1].lower()
    changed = True
    while changed:
        changed = False
        for suffix in _CHECKPOINT_SUFFIXES:
            if name.endswith(suffix):
                name, changed = name[: -len(suffix)], True
    name = re.sub(r"^meta-", "", name)
    return name if name in library else None


def _size(row: Mapping[str, object], key: str, default: int = 1) -> int:
    value = row.get(key)
    if value is None or (isinstance(value, float) and math.isnan(value)) or value == "":
        return default
    return max(int(float(str(value))), default)


def pool_layouts(row: Mapping[str, object]) -> list[tuple[str, int, int, int, bool]]:
    """(pool, TP, PP, EP, data-parallel attention) of each pool a row runs."""
    pools = ["prefill_", "decode_"] if row.get("mode") == "disagg" else [""]
    return [(prefix.rstrip("_") or "aggregated", _size(row, f"{prefix}tp_size"),
             _size(row, f"{prefix}pp_size"), _size(row, f"{prefix}moe_ep_size"),
             _size(row, f"{prefix}attention_dp_size") > 1) for prefix in pools]


def why_not(row: Mapping[str, object], library: set[str], engines: set[str]) -> str | None:
    """Why batchsim cannot represent `row`, or None when it can."""
    path = str(row.get("model_path", ""))
    name = library_name(path, library)
    if name is None:
        return "model not in the library"
    if str(row.get("backend", "")) not in engines:
        return f"no engine profile for {row.get('backend')!r}"
    system = str(row.get("system", ""))
    if system not in GPUS:
        return f"no GPU profile for {system!r}"
    quant = row.get("gemm_quant_mode")
    quant = "" if quant is None or (isinstance(quant, float) and math.isnan(quant)) else quant
    weights = WEIGHTS.get(str(quant))
    if weights is None:
        return f"GEMM quantisation {quant!r} not modelled"
    for pool, tp, pp, ep, dp_attention in pool_layouts(row):
        if pool != "aggregated" and pp > 1:
            # experiment/disaggregation.py refuses pipeline stages in a disaggregated pool.
            return "disaggregated pool with pipeline parallelism"
        failure = layout_failure(name, GPUS[system], weights, tp, pp, ep, dp_attention)
        if failure is not None:
            return failure
    return None


@cache
def layout_failure(model_name: str, gpu_name: str, weights: str, tp: int, pp: int, ep: int,
                   dp_attention: bool) -> str | None:
    """Why one pool's layout cannot be planned (memory, parallelism), or None; each distinct
    layout is planned once (a table repeats them over its workloads)."""
    try:
        model = load_model(model_name)
        check_pipeline_parallel(model, pp)
        plan_memory(model, load_gpu_profile(gpu_name), tensor_parallel=tp,
                    weight_dtype=weights, kv_dtype="bf16", gpu_memory_utilization=0.9,
                    block_size=16, pipeline_parallel=pp, expert_parallel=ep,
                    data_parallel_attention=dp_attention)
    except (HardwareError, ModelError, ModelDoesNotFitError, ValueError) as err:
        return f"layout: {type(err).__name__}"
    return None


def coverage(table: pd.DataFrame) -> pd.DataFrame:
    """`table` with a `batchsim_reason` column: empty where batchsim represents the row."""
    library, engines = set(library_model_names()), engine_names()
    rows = [{str(key): value for key, value in row.items()}
            for row in table.to_dict(orient="records")]
    reasons = [why_not(row, library, engines) or "" for row in rows]
    return table.assign(batchsim_reason=reasons)


def report(table: pd.DataFrame) -> str:
    """The share representable, the reasons for the rest, and the share per model."""
    covered = table["batchsim_reason"] == ""
    lines = [f"representable: {int(covered.sum())} of {len(table)} rows "
             f"({covered.mean():.1%})"]
    for reason, count in Counter(table.loc[~covered, "batchsim_reason"]).most_common():
        lines.append(f"  not: {reason}: {count}")
    lines.append("per model:")
    for model, rows in table.groupby("model_path", sort=True):
        share = (rows["batchsim_reason"] == "").mean()
        lines.append(f"  {model}: {share:.0%} of {len(rows)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", type=Path, help="a table of deployments (serving benchmarks)")
    args = parser.parse_args(argv)
    print(report(coverage(pd.read_csv(args.csv))))


if __name__ == "__main__":
    main()
