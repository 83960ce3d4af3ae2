"""A tiny experiment for plan tests: Llama-3.1-8B on an H100, 150 short requests, two arms
whose capacities differ (continuous batching ~30 req/s, static batching ~10 req/s under a
1 s p99 TTFT target). Runs take about a tenth of a second."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

EXPERIMENT: dict[str, Any] = {
    "name": "tiny-plan", "seed": 5, "model": "llama-3.1-8b", "hardware": "h100-sxm",
    "max_model_len": 2048,
    "engine": "none",  # the bare roofline: the capacities above are its own
    "workload": {"arrivals": {"kind": "poisson", "rate": 4.0},
                 "prompt_tokens": {"kind": "uniform", "low": 32, "high": 512},
                 "output_tokens": {"kind": "uniform", "low": 16, "high": 128},
                 "num_requests": 150},
    "warmup_s": 0.5,
    "slo": {"ttft_p99_s": 1.0, "tpot_p99_s": 0.05},
    "policies": [{"name": "vllm", "kind": "continuous", "max_num_seqs": 16},
                 {"name": "static", "kind": "static", "max_batch_size": 16,
                  "max_output_tokens": 128}],
}


def write_experiment(folder: Path, plan: dict[str, Any], **changes: Any) -> Path:
    """The tiny experiment with `plan` and top-level `changes`, as a YAML file in `folder`."""
    data = copy.deepcopy(EXPERIMENT)
    data.update(changes)
    data["plan"] = plan
    path = folder / "exp.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path
