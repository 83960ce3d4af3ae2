"""Where a closed loop's first-token time goes, read from rows that differ only in output
length: how long each prompt holds up the other users' decodes, and how much of its own TTFT
is left beyond that.

In a closed loop of `c` identical users whose requests are spread out in time, each user's
decode phase is interrupted once per cycle by each of the other `c - 1` users' prompts; a
request's mean TPOT is then a decode step plus those interruptions spread over its `osl - 1`
gaps: TPOT(osl) = step + stall × (c - 1) / (osl - 1). Rows of the same deployment, prompt and
concurrency at several output lengths give `step` and `stall` by least squares. What the TTFT
holds beyond the prompt's own stall, counted in decode steps, is time the request waited that
held nobody else up: queueing behind other prompts, a prompt split over many steps, latency
outside the engine. Where a loop stays in lock-step, prompts are computed while the others
wait for their first token rather than while they decode, and the stall comes out near zero.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

SIDES = ("measured", "simulated")
_DEPLOYMENT = ["engine", "gpu", "family", "quantization", "tensor_parallel", "prompt_tokens",
               "concurrency"]


def decompose(cases: pd.DataFrame) -> pd.DataFrame:
    """One row per deployment × prompt × concurrency with two output lengths or more: the
    decode step, the stall per prompt and the TTFT beyond it in steps, measured and
    simulated (columns `<side>_step_s`, `<side>_stall_s`, `<side>_excess_steps`)."""
    rows = []
    keyed = cases.fillna({"quantization": ""})
    for key, group in keyed.groupby(_DEPLOYMENT, sort=True):
        concurrency = int(group["concurrency"].iloc[0])
        if group["output_tokens"].nunique() < 2 or concurrency < 2:
            continue
        row: dict[str, object] = dict(zip(_DEPLOYMENT, key, strict=True))
        for side in SIDES:
            row.update(_side(group, side, concurrency))
        rows.append(row)
    return pd.DataFrame(rows, columns=[*_DEPLOYMENT, *_columns()])


def _columns() -> list[str]:
    return [f"{side}_{name}" for side in SIDES for name in ("step_s", "stall_s", "excess_steps")]


def _side(group: pd.DataFrame, side: str, concurrency: int) -> dict[str, float]:
    spread = (concurrency - 1) / (group["output_tokens"].to_numpy(dtype=float) - 1.0)
    design = np.column_stack([np.ones_like(spread), spread])
    (step, stall), *_ = np.linalg.lstsq(design, group[f"{side}_tpot_s"].to_numpy(dtype=float),
                                        rcond=None)
    ttft = float(group[f"{side}_ttft_s"].mean())
    return {f"{side}_step_s": float(step), f"{side}_stall_s": float(stall),
            f"{side}_excess_steps": (ttft - stall) / step}


def render_decomposition(cases: pd.DataFrame) -> str:
    """The decomposition as markdown: per engine × GPU × model family × prompt length, the
    stall per prompt (median over layouts and concurrencies) and the TTFT beyond it at each
    concurrency (median over layouts), measured / simulated."""
    table = decompose(cases)
    lines = [
        "Where the first-token time goes (module docstring of "
        "`batchsim.calibration.ttft_decomposition`): from the cases that differ only in output "
        "length, how long each prompt holds up the other users' decodes (its *stall*, read "
        "off how TPOT falls with output length), and how many decode steps the TTFT holds "
        "beyond that stall, measured / simulated (medians over tensor-parallel sizes):",
        "",
        "| engine | GPU | model family | prompt tokens | stall per prompt, s | "
        "TTFT beyond the stall, decode steps, by concurrency |",
        "|---|---|---|---:|---:|---|",
    ]
    for key, group in table.groupby(["engine", "gpu", "family", "prompt_tokens"], sort=True):
        stall = " / ".join(f"{group[f'{side}_stall_s'].median():.3f}" for side in SIDES)
        by_c = "; ".join(_excess_cell(int(rows["concurrency"].iloc[0]), rows)
                         for _, rows in group.groupby("concurrency", sort=True))
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | "
                     f"{int(group['prompt_tokens'].iloc[0]):,} | {stall} | {by_c} |")
    return "\n".join(lines) + "\n"


def _excess_cell(concurrency: int, rows: pd.DataFrame) -> str:
    measured, simulated = (rows[f"{side}_excess_steps"].median() for side in SIDES)
    return f"{int(concurrency)}: {measured:.0f} / {simulated:.0f}"
