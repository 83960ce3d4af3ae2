"""An arm's own `deployment:` runs exactly as the same experiment with those top-level keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from batchsim.experiment.loader import ConfigError
from batchsim.experiment.outputs import json_safe
from tests.validation.experiment_builder import base_experiment, run_dict


def _workload() -> dict[str, object]:
    return {
        "arrivals": {"kind": "poisson", "rate": 20.0},
        "prompt_tokens": {"kind": "uniform", "low": 64, "high": 1024},
        "output_tokens": {"kind": "uniform", "low": 8, "high": 256},
        "num_requests": 300,
    }


def _metrics(result: object, arm: int) -> str:
    metrics = dict(result.arms[arm].metrics)  # type: ignore[attr-defined]
    metrics.pop("deployment", None)
    return json.dumps(json_safe(metrics), sort_keys=True)


def test_an_arm_deployment_equals_the_top_level_keys(tmp_path: Path) -> None:
    arms = [
        {"name": "tp1", "kind": "continuous"},
        {"name": "tp2x2", "kind": "continuous",
         "deployment": {"tensor_parallel": 2, "replicas": 2, "hardware": "a100"}},
    ]
    mixed = run_dict(tmp_path, base_experiment(name="mixed", workload=_workload(),
                                               policies=arms))
    alone = run_dict(tmp_path, base_experiment(
        name="alone", workload=_workload(), tensor_parallel=2, replicas=2, hardware="a100",
        policies=[{"name": "tp2x2", "kind": "continuous"}]))
    assert _metrics(mixed, 1) == _metrics(alone, 0)
    layout = mixed.arms[1].metrics["deployment"]
    assert isinstance(layout, dict)
    assert (layout["tensor_parallel"], layout["replicas"]) == (2, 2)
    assert layout["hardware"] == "a100-sxm-80gb"
    assert mixed.arms[1].metrics["gpus"] == 4
    assert mixed.arms[0].metrics["gpus"] == 1
    assert mixed.arms[0].metrics["deployment"]["tensor_parallel"] == 1  # type: ignore[index]
    # The first arm is unaffected by the second's layout.
    first = run_dict(tmp_path, base_experiment(name="first", workload=_workload(),
                                               policies=arms[:1]))
    assert _metrics(mixed, 0) == _metrics(first, 0)


def test_a_layout_the_model_cannot_take_names_the_arm(tmp_path: Path) -> None:
    arms = [{"name": "bad", "kind": "continuous", "deployment": {"tensor_parallel": 3}}]
    with pytest.raises(ValueError, match=r"policies\.0\.deployment: .*tensor_parallel=3"):
        run_dict(tmp_path, base_experiment(policies=arms))


def test_an_unknown_deployment_key_is_an_error(tmp_path: Path) -> None:
    arms = [{"name": "bad", "kind": "continuous", "deployment": {"tensor_paralel": 2}}]
    with pytest.raises(ConfigError, match="tensor_paralel"):
        run_dict(tmp_path, base_experiment(policies=arms))


def test_a_disaggregated_arm_refuses_a_pipelined_layout(tmp_path: Path) -> None:
    arms = [{"name": "pd", "kind": "disaggregated"}]
    with pytest.raises(ValueError, match=r"pipeline_parallel: 2 is not modelled for the "
                                         r"disaggregated arm policies\.0"):
        run_dict(tmp_path, base_experiment(pipeline_parallel=2, policies=arms))


def test_the_how_to_quotes_its_example(tmp_path: Path) -> None:
    """docs/how-to/compare-layouts.md's table is what its example experiment gives."""
    import re

    from batchsim.experiment.loader import load_experiment
    from batchsim.experiment.runner import run_experiment

    doc = (Path(__file__).resolve().parents[2] / "docs" / "how-to" / "compare-layouts.md")
    text = doc.read_text(encoding="utf-8")
    block = re.search(r"^```yaml\n(name:.*?)^```", text, re.MULTILINE | re.DOTALL)
    assert block is not None
    path = tmp_path / "layouts.yaml"
    path.write_text(block.group(1), encoding="utf-8")
    exp, base_dir = load_experiment(path)
    for arm in run_experiment(exp, base_dir).arms:
        m = arm.metrics
        layout = m["deployment"]
        ttft, tpot = m["ttft_s"], m["tpot_s"]
        assert isinstance(layout, dict) and isinstance(ttft, dict) and isinstance(tpot, dict)
        kv = m["kv_utilization"]
        assert isinstance(kv, dict)
        unit, scale = ("s", 1.0) if ttft["p50"] > 10 else ("ms", 1e3)
        digits = 1 if unit == "s" else 0
        row = (f"| {layout['replicas']} × TP{layout['tensor_parallel']} "
               f"| {m['request_throughput_rps']:.2f} "
               f"| {ttft['p50'] * scale:.{digits}f} / {ttft['p99'] * scale:.{digits}f} {unit} "
               f"| {tpot['p50'] * 1e3:.1f} / {tpot['p99'] * 1e3:.1f} ms "
               f"| {m['preemptions']} | {kv['max']:.0%} |")
        assert row in text, row
