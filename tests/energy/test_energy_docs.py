"""The numbers docs/how-to/energy-and-cost.md quotes are what the tool computes."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from batchsim.experiment.engine_profile import load_engine_profile
from batchsim.experiment.loader import load_experiment
from batchsim.experiment.runner import run_experiment
from batchsim.gpu.hardware import load_gpu_profile
from batchsim.metrics.energy import busy_power_w, ridge_tokens

REPO = Path(__file__).resolve().parents[2]
HOW_TO = (REPO / "docs" / "how-to" / "energy-and-cost.md").read_text("utf-8")
ROW = re.compile(r"^\| (\d+) req/s \| (\S+) \| ([\d.]+)% \| ([\d,]+) \| ([\d.]+) \| (\d+) \| "
                 r"([\d.]+) \|$", re.MULTILINE)


@pytest.mark.parametrize("rate", [12, 2])
def test_the_quickstart_table_is_measured(rate: int) -> None:
    quoted = {m.group(2): m.groups()[2:] for m in ROW.finditer(HOW_TO)
              if int(m.group(1)) == rate}
    assert set(quoted) == {"static-32", "continuous"}
    exp, base_dir = load_experiment(REPO / "experiments" / "quickstart.yaml",
                                    ["pricing={h100-sxm: 2.5}",
                                     f"workload.arrivals.rate={rate}"])
    arms = run_experiment(exp, base_dir).arms
    for arm in arms:
        m = arm.metrics
        assert quoted[arm.name] == (
            f"{m['gpu_busy_fraction'] * 100:.1f}", f"{m['output_throughput_tps']:,.0f}",
            f"{m['energy']['joules_per_output_token']:.3f}",
            f"{m['energy']['mean_power_per_gpu_w']:.0f}",
            f"{m['cost']['usd_per_million_output_tokens']:.3f}")


def test_the_power_model_figures_are_computed() -> None:
    names = ("h100-sxm", "h200-sxm", "a100-sxm-80gb")
    vllm = load_engine_profile("vllm")  # the default engine: its compute scale moves the ridge
    ridges = [round(ridge_tokens(vllm.on_gpu(load_gpu_profile(name)), "bf16")) for name in names]
    bare = [round(ridge_tokens(load_gpu_profile(name), "bf16")) for name in names]
    flat = " ".join(HOW_TO.split())
    assert (f"{ridges[0]} tokens on the H100, {ridges[1]} on the H200 (more bandwidth for the "
            f"same FLOP/s) and {ridges[2]} on the A100; with `engine: none`, "
            f"{bare[0]}, {bare[1]} and {bare[2]}") in flat
    h100 = vllm.on_gpu(load_gpu_profile("h100-sxm"))
    assert h100.power is not None
    decode, prefill = busy_power_w(h100.power, np.array([32.0, 2048.0]),
                                   ridge_tokens(h100, "bf16"))
    assert f"32 / {ridges[0]}` = {round(decode)} W" in flat
    assert prefill == h100.power.max_w == 700


def test_the_quoted_ratios_follow_from_the_table() -> None:
    rows = {m.group(2): m.groups()[2:] for m in ROW.finditer(HOW_TO) if m.group(1) == "12"}
    static, continuous = rows["static-32"], rows["continuous"]
    energy = float(static[2]) / float(continuous[2])
    cost = float(static[4]) / float(continuous[4])
    assert f"{energy:.1f}× the energy and {cost:.1f}× the cost per token" in HOW_TO
