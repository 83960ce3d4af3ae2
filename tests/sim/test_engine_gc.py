"""The engine collects cyclic garbage less often while it simulates, and only then."""

from __future__ import annotations

import gc

import pytest

from batchsim.sim.engine import _GC_THRESHOLDS, _fewer_collections


def test_collections_are_rarer_during_a_run_and_the_thresholds_come_back_after() -> None:
    before = gc.get_threshold()
    assert before != _GC_THRESHOLDS
    with _fewer_collections():
        assert gc.get_threshold() == _GC_THRESHOLDS
    assert gc.get_threshold() == before


def test_the_thresholds_come_back_when_a_run_fails() -> None:
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), _fewer_collections():
        raise RuntimeError("a stalled simulation")
    assert gc.get_threshold() == before
