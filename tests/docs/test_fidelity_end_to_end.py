"""docs/fidelity.md's end-to-end section is what its committed replay table renders, and the
table's numbers are what the simulator computes today."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import pytest

from batchsim.apps.replay.deployment import BenchmarkClient
from batchsim.apps.replay.fidelity_doc import replay_table
from batchsim.apps.replay.measured import MeasuredCase
from batchsim.apps.replay.simulate import ReplayedCase, replay_case
from batchsim.apps.replay.tables_launch import tables_launch
from batchsim.calibration.end_to_end_report import (
    REPLAY_TABLE,
    ReplayTableError,
    model_family,
    read_replay_table,
    render_end_to_end,
)
from batchsim.experiment.engine_profile import load_engine_profile

DOC = Path(__file__).resolve().parents[2] / "docs" / "fidelity.md"
SECTION = "## End to end"
TABLE = read_replay_table()


def test_the_committed_section_is_what_the_committed_table_renders() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert SECTION in text, f"{DOC}: no end-to-end section"
    assert text[text.index(SECTION):] == render_end_to_end(TABLE), (
        "docs/fidelity.md's end-to-end section is stale: run `batchsim calibrate report`")


def _cheap_rows() -> list[pd.Series]:
    """Per engine profile, and for quantised weights, the simulated case with the fewest
    simulated tokens (concurrency × output tokens): a few seconds in all."""
    simulated = TABLE[TABLE["not_simulated"] == ""]
    cost = simulated["concurrency"] * simulated["output_tokens"]
    ordered = simulated.assign(cost=cost).sort_values(["cost", "case_id"])
    picks = [rows.iloc[0] for _, rows in ordered.groupby("engine_profile", sort=True)]
    quantized = ordered[ordered["quantization"] != ""]
    if len(quantized):
        picks.append(quantized.iloc[0])
    return list({row["case_id"]: row for row in picks}.values())


def _case(row: pd.Series) -> MeasuredCase:
    return MeasuredCase(
        case_id=row["case_id"], source=REPLAY_TABLE.name, engine=row["engine"],
        model=row["model"], gpu=row["gpu"], quantization=row["quantization"],
        # replay.parquet does not record pipeline parallelism; no development row uses it.
        tensor_parallel=int(row["tensor_parallel"]), pipeline_parallel=1,
        prompt_tokens=int(row["prompt_tokens"]), output_tokens=int(row["output_tokens"]),
        concurrency=int(row["concurrency"]), ttft_s=float(row["measured_ttft_s"]),
        tpot_s=float(row["measured_tpot_s"]),
        engine_version=row["engine_version"], **_launch(row))


def _launch(row: pd.Series) -> dict[str, object]:
    """The launch the reader gives the row (no simulated development row has data-parallel
    attention, where its batch size would not be the max batch)."""
    launch = tables_launch(row["engine"], row["engine_version"], int(row["concurrency"]),
                           int(row["prompt_tokens"]), attention_data_parallel=1)
    return {"engine_max_batch": launch.max_batch, "engine_token_budget": launch.token_budget,
            "engine_mixed_prefill": launch.mixed_prefill}


@pytest.mark.parametrize("row", _cheap_rows(), ids=lambda row: row["case_id"])
def test_a_committed_case_reproduces_when_simulated_now(row: pd.Series) -> None:
    replayed = replay_case(_case(row), BenchmarkClient(),
                           load_engine_profile(row["engine_profile"]))
    assert isinstance(replayed, ReplayedCase), replayed
    stale = "stale: rerun `batchsim replay` on the development data and `batchsim calibrate " \
            "report --replay` (docs/how-to/replay.md)"
    # batchsim's own arithmetic is deterministic: only a change to the simulator moves these.
    assert math.isclose(replayed.ttft_s, row["simulated_ttft_s"], rel_tol=1e-9), stale
    assert math.isclose(replayed.tpot_s, row["simulated_tpot_s"], rel_tol=1e-9), stale


def test_the_table_holds_every_development_row_once() -> None:
    assert TABLE["case_id"].is_unique
    skipped = TABLE[TABLE["not_simulated"] != ""]
    assert skipped["simulated_ttft_s"].isna().all()
    assert set(TABLE["engine_profile"][TABLE["not_simulated"] == ""]) <= {
        "vllm", "sglang", "trtllm", "none"}


@pytest.mark.parametrize(("model", "family"), [
    ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1"),
    ("nvidia/Llama-3.1-8B-Instruct-FP8", "llama-3.1"),
    ("Qwen/Qwen3-32B", "qwen3"),
    ("Qwen/Qwen3-30B-A3B", "qwen3-moe"),
    ("deepseek-ai/DeepSeek-R1", "deepseek-v3"),
    ("acme/Unknown-7B", "acme/Unknown-7B"),
])
def test_a_model_falls_in_its_family_or_stands_alone(model: str, family: str) -> None:
    assert model_family(model) == family


def _replay_folder(tmp_path: Path, **settings: object) -> Path:
    rows = TABLE[TABLE["not_simulated"] == ""].head(2).drop(columns="not_simulated")
    rows.to_parquet(tmp_path / "replay.parquet", index=False)
    document = {"inputs": ["serving_benchmarks_dev.csv"], **asdict(BenchmarkClient()),
                "engine_profiles": {},
                "not_simulated": [{"case_id": "d1", "source": "x.csv:3", "engine": "sglang",
                                   "model": "deepseek-ai/DeepSeek-R1", "gpu": "h200_sxm",
                                   "reason": "mode 'disagg'"}], **settings}
    (tmp_path / "replay.json").write_text(json.dumps(document), encoding="utf-8")
    return tmp_path


def test_a_replay_folder_gives_every_row_simulated_or_with_its_reason(tmp_path: Path) -> None:
    table = replay_table(_replay_folder(tmp_path) / "replay.parquet")
    assert len(table) == 3
    assert list(table.loc[table["case_id"] == "d1", "not_simulated"]) == ["mode 'disagg'"]


@pytest.mark.parametrize(("settings", "message"), [
    ({"inputs": ["serving_benchmarks_dev.csv", "silicon_sample.csv"]}, "development data"),
    ({"engine_profiles": {"*": "none"}}, "shipped engine profiles"),
    ({"requests_per_user": 4}, "default one"),
    ({"drained_warmup": False}, "default one"),
])
def test_only_a_shipped_replay_of_the_development_data_is_taken(
        tmp_path: Path, settings: dict[str, object], message: str) -> None:
    folder = _replay_folder(tmp_path, **settings)
    with pytest.raises(ReplayTableError, match=message) as raised:
        replay_table(folder)
    assert str(folder / "replay.json") in str(raised.value)
