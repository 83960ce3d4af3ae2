"""The `power` block of GPU profiles: every shipped profile has one, and bad ones say why."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

import pytest
import yaml

from batchsim.gpu.hardware import HardwareError, list_gpu_profiles, load_gpu_profile

_SOURCES_TDP = {"a100-sxm-80gb": 400, "h100-sxm": 700, "h200-sxm": 700, "l40s": 350,
                "b200": 1000, "mi300x": 750,  # data-sheet TDPs, as the yaml comments cite
                "h200-sxm-measured": 700,  # the same GPU as h200-sxm
                "b300": 1100, "gb200": 1200, "gb300": 1400}


@pytest.mark.parametrize("name", list_gpu_profiles())
def test_shipped_profiles_carry_board_power_in_order(name: str) -> None:
    power = load_gpu_profile(name).power
    assert power is not None
    assert power.max_w == _SOURCES_TDP[name]
    assert 0 < power.idle_w < power.memory_bound_w < power.max_w


def _profile_with_power(tmp_path: Path, power: object) -> Path:
    shipped = Path(str(files("batchsim.hardware_profiles"))) / "gpus" / "h100-sxm.yaml"
    document = yaml.safe_load(shipped.read_text(encoding="utf-8"))
    if power is None:
        del document["power"]
    else:
        document["power"] = power
    path = tmp_path / "gpu.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


def test_a_profile_may_leave_power_out(tmp_path: Path) -> None:
    assert load_gpu_profile(str(_profile_with_power(tmp_path, None))).power is None


@pytest.mark.parametrize(("power", "message"), [
    ({"idle_w": 300, "memory_bound_w": 200, "max_w": 700},
     "key 'power' must have idle_w <= memory_bound_w <= max_w, got 300, 200, 700"),
    ({"idle_w": 50, "memory_bound_w": 200}, "missing required key 'power.max_w'"),
    ({"idle_w": 50, "memory_bound_w": 200, "max_w": 700, "tdp": 1},
     "unknown key 'power.tdp'"),
    ({"idle_w": 0, "memory_bound_w": 200, "max_w": 700},
     "key 'power.idle_w' must be a positive number"),
])
def test_bad_power_blocks_name_the_key(tmp_path: Path, power: object, message: str) -> None:
    with pytest.raises(HardwareError, match=message.replace("(", r"\(")):
        load_gpu_profile(str(_profile_with_power(tmp_path, power)))
