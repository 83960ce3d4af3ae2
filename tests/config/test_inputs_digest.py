"""The input fingerprint reads the files the configuration takes, and nothing else."""

from __future__ import annotations

from pathlib import Path

from batchsim.experiment.input_digest import inputs_digest
from batchsim.experiment.loader import validate_experiment


def _experiment(arm_name: str, trace: str) -> dict[str, object]:
    return {"name": "e", "model": "llama-3.1-8b", "hardware": "h100-sxm",
            "workload": {"arrivals": {"kind": "trace", "path": trace, "format": "azure2023"}},
            "policies": [{"name": arm_name, "kind": "continuous"}]}


def test_only_file_keys_are_read(tmp_path: Path) -> None:
    other = tmp_path / "big.bin"
    other.write_bytes(b"x" * 1000)
    trace = tmp_path / "t.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                     "2023-11-16 18:17:03.9799600,10,5\n", encoding="utf-8")
    exp = validate_experiment(_experiment(str(other), str(trace)), "e.yaml")
    before = inputs_digest(exp, tmp_path)
    other.write_bytes(b"y" * 1000)  # an arm named after a file: never opened
    assert inputs_digest(exp, tmp_path) == before
    trace.write_text(trace.read_text(encoding="utf-8") + "2023-11-16 18:17:04.0,11,5\n",
                     encoding="utf-8")
    assert inputs_digest(exp, tmp_path) != before  # the trace it replays: read
