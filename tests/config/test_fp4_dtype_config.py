"""The experiment file's `dtype.weights` takes the FP4 formats; the KV cache does not."""

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from batchsim.experiment.loader import ConfigError, load_experiment

WriteYaml = Callable[[str | dict[str, Any]], Path]


@pytest.mark.parametrize("weights", ["nvfp4", "mxfp4"])
def test_fp4_weights_are_accepted(write_yaml: WriteYaml, minimal_data: dict, weights: str) -> None:
    minimal_data["dtype"] = {"weights": weights}
    experiment, _ = load_experiment(write_yaml(minimal_data))
    assert experiment.dtype.weights == weights


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("weights", "fp4", "bf16, fp8, int8, int4, nvfp4, mxfp4"),
        ("kv_cache", "mxfp4", "bf16, fp8, int8, nvfp4"),
    ],
)
def test_unknown_formats_get_one_line_naming_the_key(
    write_yaml: WriteYaml, minimal_data: dict, key: str, value: str, expected: str
) -> None:
    minimal_data["dtype"] = {key: value}
    path = write_yaml(minimal_data)
    with pytest.raises(ConfigError) as caught:
        load_experiment(path)
    assert str(caught.value) == (
        f"{path}: dtype.{key}: expected one of: {expected} (got {value!r})"
    )
