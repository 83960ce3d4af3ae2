"""Which engine profile a replayed case runs with: its engine's shipped profile, the bare
roofline for an engine with none, and an error (never a silent fallback) for a profile that
exists but does not load."""

from __future__ import annotations

import pytest

from batchsim.apps.replay import simulate
from batchsim.apps.replay.measured import MeasuredCase
from batchsim.apps.replay.simulate import EngineChoice
from batchsim.experiment.engine_profile import EngineProfileError


def _case(engine: str) -> MeasuredCase:
    return MeasuredCase("c", "x", engine, "meta-llama/Llama-3.1-8B-Instruct", "h100_sxm", "",
                        1, 1, 128, 16, 4, 0.1, 0.01)


def test_a_case_runs_its_engines_shipped_profile_else_the_bare_roofline() -> None:
    choice = EngineChoice()
    assert choice.for_case(_case("sglang")).ref == "sglang"
    assert choice.for_case(_case("lmdeploy")).ref == "none"  # no profile ships for it
    assert EngineChoice({"*": "trtllm"}).for_case(_case("lmdeploy")).ref == "trtllm"


def test_a_shipped_profile_that_does_not_load_is_an_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(ref: str, base_dir: object = None) -> object:
        if ref == "none":
            pytest.fail("a broken shipped profile fell back to the bare roofline")
        raise EngineProfileError(f"{ref}.yaml: not valid YAML")

    monkeypatch.setattr(simulate, "load_engine_profile", broken)
    with pytest.raises(EngineProfileError, match=r"vllm\.yaml: not valid YAML"):
        EngineChoice().for_case(_case("vllm"))
