"""Our own H200 measurements: the shipped profile is what they fit to, and the report's
comparisons are computed from them."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from batchsim.calibration.fit import fit_profile
from batchsim.calibration.own_measurements import (
    MEASURED_PROFILE,
    REPEAT_FOLDER,
    RUN_FOLDER,
    repeatability,
    step_table,
)
from batchsim.calibration.spec import load_gpu_spec
from batchsim.calibration.tables import load_measurements
from batchsim.calibration.writer import write_profile
from batchsim.gpu.hardware import load_gpu_profile

_MEASURED = Path(str(files("batchsim.hardware_profiles"))) / "measurements" / (
    MEASURED_PROFILE)
_PROFILE = Path(str(files("batchsim.hardware_profiles"))) / "gpus" / (
    f"{MEASURED_PROFILE}.yaml")


def test_the_shipped_measured_profile_is_the_fit_of_the_shipped_tables(tmp_path: Path) -> None:
    spec = load_gpu_spec(str(_PROFILE))
    result = fit_profile(spec.profile, load_measurements(_MEASURED / RUN_FOLDER), seed=0,
                         holdout_fraction=0.2)
    refit = tmp_path / "refit.yaml"
    write_profile(refit, spec.spec_text, result.gpu)
    assert refit.read_text(encoding="utf-8") == _PROFILE.read_text(encoding="utf-8")


def test_repeatability_measures_the_difference_between_two_runs(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    for run, scale in ((first, 1.0), (second, 1.1)):
        run.mkdir()
        for name in ("gemm_perf_bf16.csv", "generation_attention_perf_bf16.csv",
                     "context_attention_perf_bf16.csv"):
            table = pd.read_csv(_MEASURED / RUN_FOLDER / name).head(20)
            table["latency"] *= scale
            table.to_csv(run / name, index=False)
    result = repeatability(first, second)
    for summary in result.values():
        assert summary.rows == 20
        # |first / second - 1| for every shape
        assert summary.median == pytest.approx(1 - 1 / 1.1, rel=1e-9)
        assert summary.p90 == pytest.approx(1 - 1 / 1.1, rel=1e-9)


def test_the_shipped_repeat_agrees_with_the_run_within_a_few_percent() -> None:
    for summary in repeatability(_MEASURED / RUN_FOLDER, _MEASURED / REPEAT_FOLDER).values():
        assert summary.rows > 50
        assert summary.median < 0.05


def test_step_table_pairs_eager_and_compiled_and_prices_each_step() -> None:
    table = step_table(_MEASURED / RUN_FOLDER / "forward_steps_bf16.csv",
                       [load_gpu_profile(MEASURED_PROFILE)])
    assert not table[["eager_ms", "compiled_ms", MEASURED_PROFILE]].isna().any().any()
    decode = table[(table["phase"] == "decode") & (table["batch_size"] == 64)]
    # More context to read costs more time, measured and predicted alike.
    assert np.all(np.diff(decode["compiled_ms"].to_numpy()) > 0)
    assert np.all(np.diff(decode[MEASURED_PROFILE].to_numpy()) > 0)
    # Fusing the element-wise work never made a step slower.
    assert (table["compiled_ms"] < table["eager_ms"]).all()
