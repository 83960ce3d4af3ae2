"""Energy and cost of a run over its window, against hand-computed step logs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from batchsim.gpu.hardware import BoardPower, GpuProfile, load_gpu_profile
from batchsim.metrics.energy import (
    ReplicaGroup,
    busy_power_w,
    cost_metrics,
    energy_metrics,
    group_joules,
    ridge_tokens,
)
from batchsim.sim.recorder import RunRecord
from batchsim.sim.step_stats import Measurement

POWER = BoardPower(idle_w=100.0, memory_bound_w=200.0, max_w=700.0, source="test")


def _simple_gpu(power: BoardPower | None = POWER) -> GpuProfile:
    """An H100 profile with round numbers: bf16 1000 FLOP/s, 10 B/s, efficiencies 1, so a bf16
    GEMM turns compute-bound at 2 bytes × 1000 / (2 × 10) = 100 tokens."""
    gpu = load_gpu_profile("h100-sxm")
    efficiency = dataclasses.replace(gpu.efficiency, gemm_peak_efficiency=1.0,
                                     memory_efficiency=1.0)
    peaks = dataclasses.replace(gpu.peak_flops, bf16=1000.0)
    return dataclasses.replace(gpu, peak_flops=peaks, memory_bandwidth_bytes_per_s=10.0,
                               efficiency=efficiency, power=power)


def _step(record: RunRecord, start: float, duration: float, replica: int, tokens: int) -> None:
    record.steps.append(start, duration, replica, num_seqs=1, new_tokens=tokens, emitted=1,
                        kv_used=0, waiting=0, preempted=0)


def _group(gpu: GpuProfile, first: int = 0, replicas: int = 1, gpus: int = 2,
           price: float | None = 3.0) -> ReplicaGroup:
    return ReplicaGroup(first, replicas, gpus, gpu, "bf16", price,
                        "" if price is not None else "no price for x")


def test_ridge_is_the_roofline_ridge_point_in_tokens() -> None:
    assert ridge_tokens(_simple_gpu(), "bf16") == pytest.approx(100.0)
    # fp8 weights: half the bytes per weight, at the fp8 peak and fp8's own fitted GEMM
    # efficiency (it differs from bf16's: the profile gives fp8 keys of its own).
    h100 = load_gpu_profile("h100-sxm")
    fp8 = h100.efficiency.for_weights("fp8")
    assert fp8.gemm_peak_efficiency != h100.efficiency.gemm_peak_efficiency
    eff = fp8.gemm_peak_efficiency / fp8.memory_efficiency
    assert ridge_tokens(h100, "fp8") == pytest.approx(
        1.0 * 1978e12 * eff / (2 * 3.35e12))


def test_busy_power_runs_from_memory_bound_to_max_with_the_load() -> None:
    watts = busy_power_w(POWER, np.array([0.0, 50.0, 100.0, 400.0]), 100.0)
    assert watts.tolist() == [200.0, 450.0, 700.0, 700.0]


def test_joules_are_busy_steps_plus_idle_time_times_watts_per_gpu() -> None:
    record = RunRecord()
    _step(record, -1.0, 0.5, 0, 400)  # before the window: not counted
    _step(record, 1.0, 2.0, 0, 50)  # load 0.5: 450 W × 2 s = 900 J
    _step(record, 4.0, 1.0, 0, 400)  # load 1: 700 W × 1 s = 700 J
    _step(record, 9.5, 1.0, 0, 100)  # half inside: 700 W × 0.5 s = 350 J
    # busy 3.5 s of 10: idle 6.5 s × 100 W = 650 J; 2600 J per GPU, 2 GPUs
    group = _group(_simple_gpu())
    assert group_joules(record, group, 0.0, 10.0) == pytest.approx(5200.0)
    energy = energy_metrics(record, [group], start=0.0, end=10.0, output_tokens=1000)
    assert energy == pytest.approx({"joules": 5200.0, "joules_per_output_token": 5.2,
                                    "mean_power_per_gpu_w": 260.0, "reason": None})


def test_every_group_counts_and_an_idle_one_draws_idle_power() -> None:
    """Two pools (replica 0 steps, replica 1 never does): both pay their GPUs' power."""
    record = RunRecord()
    _step(record, 0.0, 10.0, 0, 100)  # 700 W × 10 s × 1 GPU = 7000 J
    gpu = _simple_gpu()
    other = dataclasses.replace(gpu, name="other", power=BoardPower(50.0, 60.0, 70.0, ""))
    groups = [_group(gpu, 0, 1, 1), _group(other, 1, 1, 4)]  # 4 × 50 W × 10 s = 2000 J
    energy = energy_metrics(record, groups, start=0.0, end=10.0, output_tokens=100)
    assert energy["joules"] == pytest.approx(9000.0)
    assert energy["mean_power_per_gpu_w"] == pytest.approx(9000.0 / (10.0 * 5))


def test_a_profile_without_power_gives_null_energy_with_the_reason() -> None:
    record = RunRecord()
    _step(record, 0.0, 1.0, 0, 10)
    energy = energy_metrics(record, [_group(_simple_gpu(power=None))], start=0.0, end=1.0,
                            output_tokens=10)
    assert energy["joules"] is None and energy["joules_per_output_token"] is None
    assert energy["mean_power_per_gpu_w"] is None
    assert "h100-sxm has no `power` block" in str(energy["reason"])


def test_cost_is_gpu_hours_of_the_window_times_the_price_per_token() -> None:
    # 2 GPUs × 10 s = 20/3600 GPU-hours at $3: $0.016667; 1000 output, 4000 total tokens.
    cost = cost_metrics([_group(_simple_gpu())], window_s=10.0, output_tokens=1000,
                        total_tokens=4000)
    usd = 2 * 3.0 * 10.0 / 3600.0
    assert cost == pytest.approx({
        "gpu_hours": 20.0 / 3600.0, "usd": usd,
        "usd_per_million_output_tokens": usd / 1000 * 1e6,
        "usd_per_million_total_tokens": usd / 4000 * 1e6, "reason": None})
    assert cost["usd_per_million_output_tokens"] == pytest.approx(16.6667, rel=1e-4)


def test_cost_sums_groups_at_their_own_prices_and_is_null_when_one_is_unpriced() -> None:
    gpu = _simple_gpu()
    priced = [_group(gpu, 0, 2, 1, price=2.0), _group(gpu, 2, 1, 4, price=5.0)]
    cost = cost_metrics(priced, window_s=3600.0, output_tokens=10**6, total_tokens=10**6)
    assert cost["usd"] == pytest.approx(2 * 1 * 2.0 + 1 * 4 * 5.0)  # one hour of each
    assert cost["usd_per_million_output_tokens"] == pytest.approx(24.0)
    unpriced = cost_metrics([priced[0], _group(gpu, 2, 1, 4, price=None)], window_s=3600.0,
                            output_tokens=10, total_tokens=10)
    assert unpriced["usd"] is None and unpriced["reason"] == "no price for x"
    assert unpriced["gpu_hours"] == pytest.approx(6.0)


def _plain_group_joules(rows: list[tuple[float, float, int, int]], group: ReplicaGroup,
                        start: float, end: float) -> float:
    """The per-row formula over the group's rows of every step (start, duration, replica,
    tokens)."""
    power = group.gpu.power
    assert power is not None
    s, d, replica, tokens = (np.array(column) for column in zip(*rows, strict=True))
    mine = (replica >= group.first) & (replica < group.first + group.replicas)
    s, d = s[mine], d[mine]
    overlap = np.clip(np.minimum(s + d, end) - np.maximum(s, start), 0.0, None)
    watts = busy_power_w(power, tokens[mine].astype(np.float64),
                         ridge_tokens(group.gpu, group.weight_dtype))
    idle_s = max(0.0, (end - start) * group.replicas - float(overlap.sum()))
    return (float(np.add.reduce(overlap * watts)) + idle_s * power.idle_w) * group.gpus_per_replica


def test_joules_are_the_per_row_numbers() -> None:
    """Kept as the run goes (busy seconds by tokens per replica, drained every 7 rows), the
    joules are the per-row formula's up to the order of the sums."""
    rng = np.random.default_rng(7)
    record = RunRecord()
    record.measure(Measurement(warmup_s=3.0))
    record.steps.capacity = 7
    rows: list[tuple[float, float, int, int]] = []
    t = np.zeros(3)
    for _ in range(300):  # three replicas, steps and stretches interleaved
        replica = int(rng.integers(0, 3))
        if rng.random() < 0.5:
            duration = float(rng.random())
            tokens = int(rng.integers(1, 300))
            _step(record, float(t[replica]), duration, replica, tokens)
            rows.append((float(t[replica]), duration, replica, tokens))
            t[replica] += duration
        else:
            durations = rng.random(int(rng.integers(1, 20))) * 0.1
            starts = t[replica] + np.concatenate(([0.0], np.cumsum(durations)[:-1]))
            record.steps.extend(start_s=starts, duration_s=durations, replica=replica,
                                num_seqs=4, new_tokens=4, emitted=4,
                                kv_used=np.zeros(durations.size, dtype=np.int64), waiting=0)
            rows += [(float(s), float(d), replica, 4) for s, d in zip(starts, durations,
                                                                      strict=True)]
            t[replica] = starts[-1] + durations[-1]
    gpu = _simple_gpu()
    for group in (_group(gpu, 0, 3), _group(gpu, 0, 1), _group(gpu, 1, 2)):
        assert group_joules(record, group, 3.0, 40.0) == pytest.approx(
            _plain_group_joules(rows, group, 3.0, 40.0), rel=1e-12)
