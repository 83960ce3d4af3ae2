"""The TTFT decomposition recovers the decode step, the stall per prompt and the steps beyond
it from rows built from those terms."""

from __future__ import annotations

import pandas as pd
import pytest

from batchsim.calibration.ttft_decomposition import decompose, render_decomposition


def _cases(step: float, stall: float, excess_steps: float, concurrency: int) -> pd.DataFrame:
    rows = []
    for output in (128, 512, 1024):
        tpot = step + stall * (concurrency - 1) / (output - 1)
        ttft = stall + excess_steps * step
        rows.append({"engine": "vllm", "gpu": "h100_sxm", "family": "qwen3",
                     "quantization": "", "tensor_parallel": 2, "prompt_tokens": 4096,
                     "concurrency": concurrency, "output_tokens": output,
                     "measured_tpot_s": tpot, "simulated_tpot_s": tpot * 1.1,
                     "measured_ttft_s": ttft, "simulated_ttft_s": ttft})
    return pd.DataFrame(rows)


def test_it_recovers_the_terms_the_rows_were_built_from() -> None:
    [row] = decompose(_cases(0.016, 0.175, 34.0, 8)).to_dict("records")
    assert row["measured_step_s"] == pytest.approx(0.016)
    assert row["measured_stall_s"] == pytest.approx(0.175)
    assert row["measured_excess_steps"] == pytest.approx(34.0)
    # Every TPOT 10% slower: step and stall both scale, the TTFT does not.
    assert row["simulated_stall_s"] == pytest.approx(0.1925)


def test_a_single_output_length_or_a_single_user_gives_nothing() -> None:
    one_length = _cases(0.016, 0.175, 34.0, 8).iloc[:1]
    one_user = _cases(0.016, 0.0, 3.0, 1)
    assert decompose(pd.concat([one_length, one_user])).empty


def test_the_table_has_a_row_per_prompt_length_with_each_concurrency() -> None:
    text = render_decomposition(pd.concat([_cases(0.016, 0.175, 34.0, 8),
                                           _cases(0.02, 0.2, 40.0, 16)]))
    assert "| vllm | h100_sxm | qwen3 | 4,096 |" in text
    assert "8: 34 / 30" in text and "16: 40 / " in text
