"""Shared fixtures for the experiment-file tests: a minimal valid experiment and a file writer."""

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

MINIMAL_YAML = """\
name: minimal
model: llama-3.1-8b
hardware: h100-sxm
workload:
  arrivals: {kind: poisson, rate: 4.0}
  prompt_tokens: {kind: fixed, value: 128}
  output_tokens: {kind: geometric, mean: 64}
  num_requests: 100
policies:
  - {name: static-8, kind: static, max_batch_size: 8}
  - {name: vllm, kind: continuous}
"""


@pytest.fixture
def minimal_data() -> dict[str, Any]:
    """The minimal experiment as raw YAML data (a fresh copy per test)."""
    data: dict[str, Any] = yaml.safe_load(MINIMAL_YAML)
    return data


@pytest.fixture
def write_yaml(tmp_path: Path) -> Callable[[str | dict[str, Any]], Path]:
    """Write YAML text (or data) to ``tmp_path/exp.yaml`` and return the path."""

    def write(content: str | dict[str, Any]) -> Path:
        path = tmp_path / "exp.yaml"
        text = content if isinstance(content, str) else yaml.safe_dump(content, sort_keys=False)
        path.write_text(text, encoding="utf-8")
        return path

    return write
