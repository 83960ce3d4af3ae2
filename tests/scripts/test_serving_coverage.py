"""scripts/serving_coverage.py on a small table: which deployments batchsim represents."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pandas as pd
import pytest

_ROOT = Path(__file__).resolve().parents[2]
_TABLE = Path(__file__).with_name("data") / "deployments.csv"


@pytest.fixture(scope="module")
def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("serving_coverage",
                                                  _ROOT / "scripts" / "serving_coverage.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_row_gets_its_reason(script: ModuleType) -> None:
    reasons = script.coverage(pd.read_csv(_TABLE))["batchsim_reason"].tolist()
    assert reasons == [
        "",  # a library model, by replay's names
        "",  # hybrid: the library name from the repository's
        "",  # -it stripped: gemma-3-27b
        "layout: ModelError",  # hybrid models refuse pipeline stages
        "",
        "model not in the library",
        "no GPU profile for 'gb300'",  # the table's name for it is not mapped
        "no engine profile for 'lmdeploy'",
        "GEMM quantisation 'int4_awq' not modelled",
        "",  # disaggregated with EP8 pools: each pool priced with its own layout
        "",  # disaggregated, TP-only pools: both planned
        "layout: ModelDoesNotFitError",  # 671B on one H100
    ]


def test_the_report_states_the_share_and_the_reasons(script: ModuleType, capsys) -> None:
    script.main([str(_TABLE)])
    out = capsys.readouterr().out
    assert out.startswith("representable: 6 of 12 rows (50.0%)")
    assert "  not: model not in the library: 1" in out
    assert "  openai/gpt-oss-120b: 100% of 1" in out
