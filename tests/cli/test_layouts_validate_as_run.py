"""Every layout `validate` accepts runs; every one it refuses, `run` refuses with the same
one line and no traceback — across GPUs with and without a network between NVLink domains,
tensor-parallel widths inside and beyond a domain, pipeline stages, expert parallelism and
data-parallel attention (docs/how-to/multi-node.md)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import batchsim
from batchsim.apps.cli import app

TEMPLATE = ("name: e\nmodel: qwen3-30b-a3b\nhardware: {hardware}\ntensor_parallel: {tp}\n"
            "pipeline_parallel: {pp}\nexpert_parallel: {ep}\ndata_parallel_attention: {dp}\n"
            "max_model_len: 4096\n"
            "workload: {{arrivals: {{kind: poisson, rate: 1}}, num_requests: 3,\n"
            "  prompt_tokens: {{kind: fixed, value: 8}},\n"
            "  output_tokens: {{kind: fixed, value: 4}}}}\n"
            "policies: [{{name: a, kind: continuous}}]\n")

# h100-sxm: 8-GPU domains and a network; a100: 8-GPU domains, no network; gb200: 72-GPU domain.
# qwen3-30b-a3b: 32 query and 4 KV heads, 128 experts, so every width below divides it.
LAYOUTS = st.fixed_dictionaries({
    "hardware": st.sampled_from(["h100-sxm", "a100-sxm-80gb", "gb200"]),
    "tp": st.sampled_from([1, 4, 16, 32, 64]),
    "pp": st.sampled_from([1, 2]),
    "ep_is_tp": st.booleans(),
    "dp": st.booleans(),
})
TWO_HGX_NODES = {"hardware": "h100-sxm", "tp": 16, "pp": 1, "ep_is_tp": True, "dp": True}
NO_NETWORK = {"hardware": "a100-sxm-80gb", "tp": 16, "pp": 1, "ep_is_tp": False, "dp": False}
PIPELINE_OF_NODES = {"hardware": "h100-sxm", "tp": 16, "pp": 2, "ep_is_tp": False, "dp": False}
ONE_RACK = {"hardware": "gb200", "tp": 64, "pp": 1, "ep_is_tp": True, "dp": True}


@settings(max_examples=4, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(layout=TWO_HGX_NODES)
@example(layout=NO_NETWORK)
@example(layout=ONE_RACK)
@example(layout=PIPELINE_OF_NODES)
@given(layout=LAYOUTS)
def test_validate_accepts_only_what_runs(tmp_path: Path, layout: dict[str, object]) -> None:
    ep = layout["tp"] if layout["ep_is_tp"] else 1
    text = TEMPLATE.format(hardware=layout["hardware"], tp=layout["tp"], pp=layout["pp"], ep=ep,
                           dp=str(layout["dp"]).lower())
    path = tmp_path / "e.yaml"
    path.write_text(text, encoding="utf-8")
    checked = CliRunner().invoke(app, ["validate", str(path)])
    assert checked.exit_code in (0, 2) and "Traceback" not in checked.output, checked.output
    if checked.exit_code == 0:
        results = batchsim.run(path)  # accepted: it must simulate
        assert int(results.summary["completed"].iloc[0]) == 3
        return
    assert checked.exit_code == 2, checked.output
    done = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "o")])
    assert done.exit_code == 2 and "Traceback" not in done.output, done.output
    assert done.output.strip().splitlines()[-1] == checked.output.strip().splitlines()[-1]
