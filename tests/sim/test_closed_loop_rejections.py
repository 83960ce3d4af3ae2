"""A closed-loop user whose request is rejected retries after the system makes progress."""

from pathlib import Path

from tests.validation.experiment_builder import base_experiment, run_dict


def test_users_beyond_a_full_queue_back_off_instead_of_spinning(tmp_path: Path) -> None:
    exp = base_experiment(
        workload={
            "arrivals": {"kind": "closed_loop", "concurrency": 50},
            "prompt_tokens": {"kind": "fixed", "value": 128},
            "output_tokens": {"kind": "fixed", "value": 32},
            "duration_s": 20,
        },
        policies=[{"name": "guarded", "kind": "continuous", "max_num_seqs": 4,
                   "admission": {"max_queue": 2}}],
    )
    [arm] = run_dict(tmp_path, exp).arms
    requests = arm.requests
    assert arm.metrics["completed"] > 100
    assert arm.metrics["rejected_by_reason"]["queue_full"] > 0
    # Each retry waits for a finish, so rejections are bounded by users x (finishes + 1);
    # retrying at the same instant would spin until the engine's stall guard fired.
    rejected, finished = requests["rejected"].sum(), requests["finished"].sum()
    assert rejected <= 50 * (finished + 1)
    assert (requests.loc[requests["rejected"], "arrival_s"].diff().dropna() >= 0).all()


def test_finishes_schedule_no_progress_event_when_no_user_waits_for_one() -> None:
    """Open-loop traffic never waits on `_progress`: its finishes leave the one event
    untriggered (succeeding it would schedule an event that does nothing), and the run is
    the same. (The closed-loop retry above is the case where someone waits.)"""
    import numpy as np

    from batchsim.policies.continuous import ContinuousBatching
    from batchsim.sim.engine import Simulation
    from batchsim.sim.kv_cache import KVBlockPool
    from batchsim.sim.traffic import OpenLoopTraffic
    from tests.policies.test_invariants import LinearCost

    traffic = OpenLoopTraffic(np.array([0.0, 0.5, 0.5, 2.0]), np.array([30, 5, 70, 9]),
                              np.array([4, 12, 1, 6]))
    policy = ContinuousBatching(pool=KVBlockPool(1000, 16), max_num_seqs=4,
                                max_num_batched_tokens=4096)
    simulation = Simulation([policy], LinearCost(), traffic)
    progress = simulation._progress
    record = simulation.run()
    assert all(r.is_finished for r in record.requests)
    assert simulation._progress is progress
    assert not progress.triggered
