"""`validate` refuses what `run` would refuse before simulating, with the same one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from batchsim.apps.cli import app

BASE = ("name: e\nmodel: {model}\nhardware: h100-sxm\ntensor_parallel: {tp}\n"
        "workload: {{arrivals: {{kind: poisson, rate: 1}}, num_requests: 5,\n"
        "  prompt_tokens: {{kind: fixed, value: 8}}, output_tokens: {{kind: fixed, value: 4}}}}\n"
        "policies: [{arm}]\n")


@pytest.mark.parametrize(("model", "tp", "arm", "message"), [
    ("llama-3.1-70b", 1, "{name: a, kind: continuous}",
     "tensor_parallel: llama-3.1-70b in bf16 needs 141.1 GB of weights per GPU"),
    ("llama-3.1-8b", 1, "{name: a, kind: continuous, max_num_batched_tokens: 512}",
     "policies.0.max_num_batched_tokens: 512 is smaller than max_model_len=131072"),
    ("llama-3.1-8b", 16, "{name: a, kind: continuous}",
     "tensor_parallel: tensor_parallel=16 spans more than the 8 GPUs of one h100-sxm node"),
    ("llama-3.1-8b", 1, "{name: a, kind: continuous, deployment: {tensor_parallel: 16}}",
     "policies.0.deployment: tensor_parallel: tensor_parallel=16 spans more than"),
])
def test_validate_and_run_refuse_it_alike(tmp_path: Path, model: str, tp: int, arm: str,
                                          message: str) -> None:
    path = tmp_path / "e.yaml"
    path.write_text(BASE.format(model=model, tp=tp, arm=arm), encoding="utf-8")
    outputs = []
    for command in (["validate", str(path)], ["run", str(path), "--out", str(tmp_path / "o")]):
        done = CliRunner().invoke(app, command)
        assert done.exit_code == 2, done.output
        assert message in done.output and "Traceback" not in done.output
        outputs.append(done.output.strip().splitlines()[-1])
    assert outputs[0] == outputs[1]
