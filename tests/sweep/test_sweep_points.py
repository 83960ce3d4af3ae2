"""Sweep points: the grid, the command-line form, folder names."""

import pytest

from batchsim.apps.sweep.points import SweepAxis, grid, parse_axis
from batchsim.experiment.loader import ConfigError


def test_grid_is_the_cartesian_product_last_axis_fastest() -> None:
    points = grid([SweepAxis("a.rate", (1, 2)), SweepAxis("b", ("x", "y", "z"))])
    assert [p.values for p in points][:3] == [{"a.rate": 1, "b": "x"}, {"a.rate": 1, "b": "y"},
                                              {"a.rate": 1, "b": "z"}]
    assert len(points) == 6 and [p.index for p in points] == list(range(6))
    assert points[4].overrides() == ["a.rate=2", "b=y"]


def test_no_axes_is_one_plain_point() -> None:
    (point,) = grid([])
    assert point.values == {} and point.folder_name() == "point-000"


def test_parse_axis_reads_yaml_values() -> None:
    axis = parse_axis("workload.arrivals.rate=0.5,2,8")
    assert axis == SweepAxis("workload.arrivals.rate", (0.5, 2, 8))


@pytest.mark.parametrize("text", ["rate", "=1,2", "rate="])
def test_parse_axis_rejects_malformed_input(text: str) -> None:
    with pytest.raises(ConfigError, match=r"expected dotted\.key=value1,value2"):
        parse_axis(text)


def test_a_parameter_swept_twice_is_an_error() -> None:
    with pytest.raises(ConfigError, match="swept twice"):
        grid([SweepAxis("a", (1,)), SweepAxis("a", (2,))])


def test_folder_names_are_safe_and_distinct() -> None:
    points = grid([SweepAxis("policies.vllm.max_num_seqs", (8, 16)),
                   SweepAxis("dtype.kv_cache", ("bf16", "fp8"))])
    names = [p.folder_name() for p in points]
    assert len(set(names)) == 4
    assert names[1] == "point-001_max_num_seqs=8_kv_cache=fp8"
