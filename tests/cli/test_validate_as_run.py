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
    ("llama-3.1-8b", 1, "{name: a, kind: continuous, deployment: {tensor_parallel: 16, "
     "hardware: a100-sxm-80gb}}",
     "policies.0.deployment: tensor_parallel: tensor_parallel=16 spans more than the 8-GPU "
     "NVLink domain of a100-sxm-80gb"),
    ("llama-3.1-8b", 1, "{name: a, kind: continuous, speculative: {draft_model: qwen2.5-7b, "
     "num_speculative_tokens: 2, acceptance: {kind: constant, rate: 0.7}}}",
     "policies.0.speculative: draft_model: qwen2.5-7b has a vocabulary of 152064 tokens"),
    ("llama-3.1-8b", 1, "{name: a, kind: continuous, deployment: {hardware: a100-sxm-80gb}, "
     "speculative: {method: mtp, draft_tensor_parallel: 16, num_speculative_tokens: 2, "
     "acceptance: {kind: constant, rate: 0.7}}}",
     "policies.0.speculative: draft_tensor_parallel=16 spans more than the 8-GPU NVLink domain"),
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
