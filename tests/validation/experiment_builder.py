"""Build and run experiments from plain dicts, as a user's YAML file would give them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from batchsim.experiment.loader import load_experiment
from batchsim.experiment.runner import ExperimentResult, run_experiment


def base_experiment(**overrides: Any) -> dict[str, Any]:
    """Llama-3.1-8B on one H100, one continuous arm; callers override what they test."""
    exp: dict[str, Any] = {
        "name": "test",
        "seed": 1,
        "model": "llama-3.1-8b",
        "hardware": "h100-sxm",
        "max_model_len": 8192,
        "workload": {
            "arrivals": {"kind": "poisson", "rate": 1.0},
            "prompt_tokens": {"kind": "fixed", "value": 128},
            "output_tokens": {"kind": "fixed", "value": 16},
            "num_requests": 100,
        },
        "policies": [{"name": "continuous", "kind": "continuous"}],
    }
    exp.update(overrides)
    return exp


def run_dict(tmp_path: Path, exp: dict[str, Any], *sets: str) -> ExperimentResult:
    path = tmp_path / f"{exp['name']}.yaml"
    path.write_text(yaml.safe_dump(exp), encoding="utf-8")
    loaded, base_dir = load_experiment(path, sets)
    return run_experiment(loaded, base_dir)
