"""scripts/serving_coverage.py on a small table: which deployments batchsim represents."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pandas as pd
import pytest

from batchsim.apps.api import load_experiment
from batchsim.apps.replay.deployment import BenchmarkClient, case_experiment
from batchsim.apps.replay.measured import read_cases
from batchsim.experiment.engine_profile import load_engine_profile
from batchsim.experiment.preflight import check_before_run

_ROOT = Path(__file__).resolve().parents[2]
_TABLE = Path(__file__).with_name("data") / "deployments.csv"
# Colocated rows in the replay's columns (hand-written): models by the table and by their
# repository names, Blackwell systems, fp4 weights, EP / data-parallel attention layouts, and
# rows each side refuses.
_REPLAY_ROWS = Path(__file__).with_name("data") / "replay_rows.csv"


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
        "",  # gb300: the table's name for the GB300 profile
        "no engine profile for 'lmdeploy'",
        "GEMM quantisation 'int4_awq' not modelled",
        "",  # disaggregated with EP8 pools: each pool priced with its own layout
        "",  # disaggregated, TP-only pools: both planned
        "layout: ModelDoesNotFitError",  # 671B on one H100
        "no GPU profile for 'mi355x'",
    ]


def test_the_report_states_the_share_and_the_reasons(script: ModuleType, capsys) -> None:
    script.main([str(_TABLE)])
    out = capsys.readouterr().out
    assert out.startswith("representable: 7 of 13 rows (53.8%)")
    assert "  not: model not in the library: 1" in out
    assert "  openai/gpt-oss-120b: 100% of 1" in out


def test_the_coverage_and_the_replay_agree_row_by_row(script: ModuleType,
                                                      tmp_path: Path) -> None:
    """A colocated row is representable exactly when the replay maps it to an experiment that
    passes run's checks; each refusal gives the same layout reason on both sides."""
    reasons = dict(zip(*script.coverage(pd.read_csv(_REPLAY_ROWS))[["id", "batchsim_reason"]]
                       .to_numpy().T, strict=True))
    cases, skipped = read_cases(_REPLAY_ROWS)
    assert not skipped
    replayed: dict[str, str] = {}
    for case in cases:
        experiment = case_experiment(case, BenchmarkClient(), load_engine_profile(case.engine))
        if isinstance(experiment, dict):
            try:
                check_before_run(load_experiment(experiment), tmp_path)
                experiment = ""
            except ValueError as err:
                experiment = type(err).__name__
        replayed[case.case_id] = experiment
    assert {case for case, why in replayed.items() if not why} == {
        case for case, why in reasons.items() if not why} == {
        "dense-tp1", "gpt-oss-mxfp4", "kimi-dp8", "r1-ep8", "qwen-moe-tp4-ep2", "glm-fallback"}
    for case, why in reasons.items():
        if why.startswith("layout: ") and " " in why.removeprefix("layout: "):
            assert why == f"layout: {replayed[case]}"
    assert reasons["r1-one-h100"] == f"layout: {replayed['r1-one-h100']}"  # does not fit
