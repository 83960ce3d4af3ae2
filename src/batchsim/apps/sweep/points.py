"""The points of a sweep: one or more parameters, each with a list of values, as a grid.

A parameter is a dotted key of the experiment file (the same keys `--set` takes); a point is
one value for each parameter. Several parameters form their cartesian product, in the order
given, the last parameter varying fastest.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass
from typing import Any

import yaml

from batchsim.experiment.loader import ConfigError


@dataclass(frozen=True, slots=True)
class SweepAxis:
    parameter: str  # dotted key, e.g. workload.arrivals.rate
    values: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class SweepPoint:
    index: int
    values: dict[str, Any]  # parameter -> value

    def overrides(self) -> list[str]:
        """`--set` overrides that put this point into an experiment."""
        return [f"{key}={_yaml_scalar(value)}" for key, value in self.values.items()]

    def folder_name(self) -> str:
        """A stable, file-system-safe folder name: index, then each key=value shortened."""
        parts = [f"{key.rsplit('.', 1)[-1]}={_yaml_scalar(value)}"
                 for key, value in self.values.items()]
        label = re.sub(r"[^A-Za-z0-9_.=+-]+", "_", "_".join(parts))[:80]
        return f"point-{self.index:03d}" + (f"_{label}" if label else "")


def _yaml_scalar(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


def parse_axis(text: str) -> SweepAxis:
    """`dotted.key=v1,v2,...` (each value parsed as YAML) from the command line."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or not raw.strip():
        raise ConfigError(f"--param {text}: expected dotted.key=value1,value2,...")
    values = []
    for item in raw.split(","):
        try:
            values.append(yaml.safe_load(item))
        except yaml.YAMLError:
            raise ConfigError(f"--param {text}: value {item!r} is not valid YAML") from None
    return SweepAxis(key, tuple(values))


MAX_POINTS = 100_000
"""The largest grid a sweep runs: counted before a single point is built."""


def grid(axes: list[SweepAxis]) -> list[SweepPoint]:
    """Every combination of the axes' values; no axes gives the one point of a plain run."""
    names = [axis.parameter for axis in axes]
    if len(set(names)) != len(names):
        raise ConfigError(f"sweep: a parameter is swept twice ({', '.join(names)})")
    points = math.prod(len(axis.values) for axis in axes)
    if points > MAX_POINTS:
        sizes = " x ".join(str(len(axis.values)) for axis in axes)
        raise ConfigError(f"sweep: {sizes} = {points:,} points; at most {MAX_POINTS:,} (each "
                          "point is a run with a folder of its own)")
    combos = itertools.product(*(axis.values for axis in axes))
    return [SweepPoint(i, dict(zip(names, combo, strict=True))) for i, combo in enumerate(combos)]
