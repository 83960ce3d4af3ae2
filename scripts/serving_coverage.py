"""What share of a table of measured deployments batchsim can represent, and why not the rest.

    python scripts/serving_coverage.py ../shared/data/serving/serving_benchmarks_dev.csv

The table has the columns of the project's serving benchmarks (`model_path`, `system`,
`backend`, `mode`, `gemm_quant_mode`, `tp_size`, `pp_size`, `attention_dp_size`,
`moe_tp_size`, `moe_ep_size`, and `prefill_*` / `decode_*` for disaggregated rows). A row is
representable when its model, GPU and GEMM quantisation map to a library model, a GPU profile
and a weight dtype by the names `batchsim replay` maps (batchsim.apps.replay.names), its
engine has a profile, and every pool's layout is one batchsim expresses (replay's
`replay_layout`) and fits: the memory plan of that model on that GPU at that TP / PP / EP /
data-parallel attention leaves room for the KV cache, and a disaggregated row's pools have no
pipeline stages (which the disaggregated arm refuses). A colocated row representable here is
one `batchsim replay` maps to an experiment; disaggregated rows it does not replay yet. It
prints the share, the reasons for the rest, and the share per model.
"""

from __future__ import annotations

import argparse
import math
from collections import Counter
from collections.abc import Mapping
from functools import cache
from importlib import resources
from pathlib import Path

import pandas as pd

from batchsim.apps.replay.deployment import Layout, Refusal, replay_expert_dtype, replay_layout
from batchsim.apps.replay.names import gpu_profile, library_model, weight_dtype
from batchsim.gpu.hardware import HardwareError, load_gpu_profile
from batchsim.gpu.memory import ModelDoesNotFitError, plan_memory
from batchsim.gpu.model_spec import ModelError, load_model
from batchsim.gpu.pipeline_stages import check_pipeline_parallel


def engine_names() -> set[str]:
    """The shipped engine profiles' names."""
    folder = resources.files("batchsim.hardware_profiles").joinpath("engines")
    return {entry.name.removesuffix(".yaml") for entry in folder.iterdir()
            if entry.name.endswith(".yaml")}


def _text(row: Mapping[str, object], key: str) -> str:
    value = row.get(key)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return str(value)


def _size(row: Mapping[str, object], key: str) -> int | None:
    """A degree of the row; None when it is not given (empty, or 0 as the tables write it)."""
    text = _text(row, key).strip()
    value = int(float(text)) if text else 0
    return value if value > 0 else None


def pool_layouts(row: Mapping[str, object], model_name: str,
                 ) -> list[tuple[str, int, Layout | str]]:
    """(pool, PP, batchsim's layout or why it has none) of each pool a row runs."""
    pools = ["prefill_", "decode_"] if row.get("mode") == "disagg" else [""]
    layouts: list[tuple[str, int, Layout | str]] = []
    for prefix in pools:
        pp = _size(row, f"{prefix}pp_size") or 1
        layout = replay_layout(model_name, _size(row, f"{prefix}tp_size") or 1, pp,
                               _size(row, f"{prefix}attention_dp_size") or 1,
                               _size(row, f"{prefix}moe_tp_size"),
                               _size(row, f"{prefix}moe_ep_size") or 1)
        layouts.append((prefix.rstrip("_") or "aggregated", pp, layout))
    return layouts


def why_not(row: Mapping[str, object], engines: set[str]) -> str | None:
    """Why batchsim cannot represent `row`, or None when it can."""
    name = library_model(_text(row, "model_path"))
    if name is None:
        return "model not in the library"
    if str(row.get("backend", "")) not in engines:
        return f"no engine profile for {row.get('backend')!r}"
    system = _text(row, "system")
    gpu = gpu_profile(system)
    if gpu is None:
        return f"no GPU profile for {system!r}"
    quant = _text(row, "gemm_quant_mode")
    weights = weight_dtype(quant)
    if weights is None:
        return f"GEMM quantisation {quant!r} not modelled"
    experts = replay_expert_dtype(name, weights, _text(row, "moe_quant_mode"))
    if isinstance(experts, Refusal):
        return experts.reason
    for pool, pp, layout in pool_layouts(row, name):
        if isinstance(layout, str):
            return f"layout: {layout}"
        if pool != "aggregated" and pp > 1:
            # experiment/disaggregation.py refuses pipeline stages in a disaggregated pool.
            return "disaggregated pool with pipeline parallelism"
        failure = layout_failure(name, gpu, weights, layout.tensor_parallel, pp,
                                 layout.expert_parallel, layout.data_parallel_attention, experts)
        if failure is not None:
            return failure
    return None


@cache
def layout_failure(model_name: str, gpu_name: str, weights: str, tp: int, pp: int, ep: int,
                   dp_attention: bool, experts: str | None = None) -> str | None:
    """Why one pool's layout cannot be planned (memory, parallelism), or None; each distinct
    layout is planned once (a table repeats them over its workloads)."""
    try:
        model = load_model(model_name)
        check_pipeline_parallel(model, pp)
        plan_memory(model, load_gpu_profile(gpu_name), tensor_parallel=tp,
                    weight_dtype=weights, kv_dtype="bf16", gpu_memory_utilization=0.9,
                    block_size=16, pipeline_parallel=pp, expert_parallel=ep,
                    data_parallel_attention=dp_attention, expert_dtype=experts)
    except (HardwareError, ModelError, ModelDoesNotFitError, ValueError) as err:
        return f"layout: {type(err).__name__}"
    return None


def coverage(table: pd.DataFrame) -> pd.DataFrame:
    """`table` with a `batchsim_reason` column: empty where batchsim represents the row."""
    engines = engine_names()
    rows = [{str(key): value for key, value in row.items()}
            for row in table.to_dict(orient="records")]
    reasons = [why_not(row, engines) or "" for row in rows]
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
