"""Speculative decoding: tokens per step follow the accepted length, verification costs what
k + 1 tokens cost, the drafter adds its own passes (issue #8, item 3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from batchsim.experiment.runner import ExperimentResult
from tests.validation.experiment_builder import base_experiment, run_dict

K = 4


def _spec(rate: float, *, k: int = K, **extra: Any) -> dict[str, Any]:
    return {"draft_model": "llama-3.1-8b", "num_speculative_tokens": k,
            "acceptance": {"kind": "constant", "rate": rate}, **extra}


def _experiment(arms: list[dict[str, Any]], *, concurrency: int = 1, output: int = 101,
                requests: int = 12, kind: str = "closed_loop") -> dict[str, Any]:
    return base_experiment(
        model="llama-3.1-70b", tensor_parallel=4,
        workload={"arrivals": {"kind": kind, "concurrency": concurrency},
                  "prompt_tokens": {"kind": "fixed", "value": 256},
                  "output_tokens": {"kind": "fixed", "value": output},
                  "num_requests": requests},
        policies=arms)


def _arm(result: ExperimentResult, name: str) -> dict[str, Any]:
    return next(a.metrics for a in result.arms if a.name == name)


@pytest.fixture(scope="module")
def low_load(tmp_path_factory: pytest.TempPathFactory) -> ExperimentResult:
    arms = [{"name": "plain", "kind": "continuous"},
            {"name": "a0", "kind": "continuous", "speculative": _spec(0.0)},
            {"name": "a1", "kind": "continuous", "speculative": _spec(1.0)},
            {"name": "a1-chunked", "kind": "chunked_prefill", "speculative": _spec(1.0)},
            {"name": "a05", "kind": "continuous", "speculative": _spec(0.5, k=3)}]
    return run_dict(tmp_path_factory.mktemp("spec"), _experiment(arms, requests=40))


def test_acceptance_zero_emits_one_token_per_step_and_costs_more(
        low_load: ExperimentResult) -> None:
    spec = _arm(low_load, "a0")["speculative"]
    assert spec["accepted_tokens"] == 0
    assert spec["tokens_per_verification"] == 1.0
    plain = low_load.arms[0].requests
    a0 = next(a for a in low_load.arms if a.name == "a0").requests
    # One user, one sequence: every decode step of a0 verifies k+1 tokens and drafts k, so
    # each of its tokens takes longer than plain decoding's.
    assert (a0["tpot_s"] > plain["tpot_s"] * 1.2).all()


def test_acceptance_one_emits_k_plus_one_tokens_per_step(low_load: ExperimentResult) -> None:
    for name in ("a1", "a1-chunked"):
        spec = _arm(low_load, name)["speculative"]
        assert spec["acceptance_rate"] == 1.0
        # 100 tokens after the first: exactly 20 verifications of 5 tokens per request.
        assert spec["tokens_per_verification"] == K + 1
        assert spec["proposed_tokens"] == 40 * (100 // (K + 1)) * K
    plain = low_load.arms[0].requests
    a1 = next(a for a in low_load.arms if a.name == "a1").requests
    assert (a1["tpot_s"] < plain["tpot_s"] / 2).all()


def test_tokens_per_step_follow_the_geometric_acceptance(low_load: ExperimentResult) -> None:
    """P(A >= i) = α^i: with α = 0.5 and k = 3 a verification emits 1 + .5 + .25 + .125."""
    spec = _arm(low_load, "a05")["speculative"]
    expected = 1 + 0.5 + 0.25 + 0.125
    # ~2,000 verifications: the standard error of the mean is about 0.02; the cap at the
    # output length trims a little off the last step of each request.
    assert spec["tokens_per_verification"] == pytest.approx(expected, abs=0.08)
    assert spec["acceptance_rate"] == pytest.approx((expected - 1) / 3, abs=0.03)


def test_every_request_gets_exactly_its_output(low_load: ExperimentResult) -> None:
    for arm in low_load.arms:
        assert arm.metrics["completed"] == 40
        assert (arm.requests["output_tokens"] == 101).all()
        assert int(arm.timeseries["output_tokens"].sum()) == 40 * 101


def test_the_step_log_counts_the_verified_proposals_as_computed(
        low_load: ExperimentResult) -> None:
    """256 prompt tokens, then 100 tokens after the first: plain decoding computes 100; with
    every proposal accepted 20 verifications of 5 compute the same 100; with none accepted,
    100 verifications of 5 compute 500."""
    computed = {a.name: int(a.timeseries["new_tokens"].sum()) for a in low_load.arms}
    assert computed["plain"] == computed["a1"] == computed["a1-chunked"] == 40 * (256 + 100)
    assert computed["a0"] == 40 * (256 + 500)


def test_it_helps_at_low_batch_and_hurts_when_compute_bound(tmp_path: Path) -> None:
    arms = [{"name": "plain", "kind": "continuous"},
            {"name": "spec", "kind": "continuous", "speculative": _spec(0.6, k=3)}]
    low = run_dict(tmp_path, _experiment(arms, concurrency=1, requests=10))
    high = run_dict(tmp_path, _experiment(arms, concurrency=256, requests=768, output=64))

    def throughput(result: ExperimentResult, name: str) -> float:
        value = _arm(result, name)["output_throughput_tps"]
        assert isinstance(value, float)
        return value

    assert throughput(low, "spec") > 1.3 * throughput(low, "plain")
    assert throughput(high, "spec") < throughput(high, "plain")


def test_the_drafter_takes_kv_memory(low_load: ExperimentResult) -> None:
    plain = _arm(low_load, "plain")["deployment"]
    spec = _arm(low_load, "a1")["deployment"]
    # Llama-3.1-8B on 4 GPUs: 16.06 GB of bf16 weights over 4 GPUs, and 32 KiB of KV per
    # token per GPU beside the 70B's 80 KiB.
    free = plain["kv_tokens_per_replica"] // 16 * 16 * 80 * 1024
    draft_weights = 16_060_522_496 / 4
    expected_tokens = (free - draft_weights) // ((80 + 32) * 1024 * 16) * 16
    assert spec["kv_tokens_per_replica"] == pytest.approx(expected_tokens, rel=0.002)


def test_per_request_acceptance_from_a_beta(tmp_path: Path) -> None:
    arms = [{"name": "beta", "kind": "continuous", "speculative": {
        "method": "mtp", "num_speculative_tokens": 1,
        "acceptance": {"kind": "beta", "mean": 0.8, "concentration": 5}}}]
    result = run_dict(tmp_path, _experiment(arms, concurrency=8, requests=200))
    spec = _arm(result, "beta")["speculative"]
    # k = 1: the acceptance rate estimates the mean of α over requests.
    assert spec["acceptance_rate"] == pytest.approx(0.8, abs=0.03)
    assert spec["draft_share_of_busy_time"] < 0.2  # one layer, not a model


def test_the_same_seed_gives_the_same_run(tmp_path: Path) -> None:
    arms = [{"name": "s", "kind": "chunked_prefill", "speculative": _spec(0.7)}]
    exp = _experiment(arms, concurrency=16, requests=100, output=300)
    first, second = run_dict(tmp_path, exp), run_dict(tmp_path, exp)
    assert first.arms[0].metrics == second.arms[0].metrics
    np.testing.assert_array_equal(first.arms[0].requests["finish_s"],
                                  second.arms[0].requests["finish_s"])


@pytest.mark.parametrize(("spec", "message"), [
    ({"num_speculative_tokens": 2, "acceptance": {"kind": "constant", "rate": 0.5}},
     "needs a draft_model"),
    ({"draft_model": "llama-2-7b", "acceptance": {"kind": "constant", "rate": 0.5}},
     "share the target's tokenizer"),
    ({"draft_model": "llama-3.1-8b", "acceptance": {"kind": "constant", "rate": 1.5}},
     "rate"),
    ({"draft_model": "llama-3.1-8b", "acceptance": {"kind": "constant", "rate": 0.5},
      "draft_tensor_parallel": 3}, "tensor_parallel=3"),
])
def test_bad_speculative_settings_are_named(tmp_path: Path, spec: dict[str, Any],
                                            message: str) -> None:
    arms = [{"name": "s", "kind": "continuous", "speculative": spec}]
    with pytest.raises(ValueError, match=message) as info:
        run_dict(tmp_path, _experiment(arms))
    assert "speculative" in str(info.value)


def test_draft_passes_run_inside_the_engine_step(tmp_path: Path) -> None:
    """The engine's per-step overhead is paid once per step, by the verification, not by
    each of the k draft passes: with every proposal accepted (k + 1 tokens per step), an
    engine step 50 ms dearer raises TPOT by (50 ms − the GPU's prior) / (k + 1)."""
    from batchsim.gpu.hardware import load_gpu_profile

    profile = tmp_path / "slow.yaml"
    profile.write_text("name: slow\ncosts: {step_overhead_s: 0.05, per_seq_overhead_s: 0.0}\n",
                       encoding="utf-8")
    arms = [{"name": "a1", "kind": "continuous", "speculative": _spec(1.0)}]
    tpots = {}
    for engine in ("none", str(profile)):
        exp = {**_experiment(arms, requests=4), "engine": engine}
        tpots[engine] = run_dict(tmp_path, exp).arms[0].requests["tpot_s"].to_numpy()
    efficiency = load_gpu_profile("h100-sxm").efficiency
    extra = 0.05 - efficiency.step_overhead_s - efficiency.per_seq_overhead_s
    assert tpots[str(profile)] - tpots["none"] == pytest.approx(extra / (K + 1), rel=1e-3)


# Reruns the how-to's experiment; the behaviour it quotes is checked by default above.
@pytest.mark.slow
def test_the_how_to_quotes_the_shipped_experiment_at_one_user() -> None:
    """experiments/speculative_decoding.yaml's first point gives the first row of the table in
    docs/how-to/speculative-decoding.md (output tokens/s and TPOT p50 of each arm)."""
    from batchsim.experiment.loader import load_experiment
    from batchsim.experiment.runner import run_experiment

    repo = Path(__file__).resolve().parents[2]
    exp, base_dir = load_experiment(repo / "experiments" / "speculative_decoding.yaml",
                                    ["sweep=null"])
    metrics = [a.metrics for a in run_experiment(exp, base_dir).arms]
    throughputs = [f"{m['output_throughput_tps']:,.0f}" for m in metrics]
    tpots = [f"{m['tpot_s']['p50'] * 1e3:.1f} ms" for m in metrics]  # type: ignore[index]
    row = "| 1 | " + " | ".join(throughputs + tpots) + " |"
    doc = (repo / "docs" / "how-to" / "speculative-decoding.md").read_text(encoding="utf-8")
    assert row in doc



def test_speculation_with_a_pipeline_is_refused(tmp_path: Path) -> None:
    arms = [{"name": "s", "kind": "continuous", "speculative": _spec(0.5),
             "deployment": {"tensor_parallel": 2, "pipeline_parallel": 2}}]
    with pytest.raises(ValueError, match=r"policies\.0\.speculative: .*pipeline_parallel"):
        run_dict(tmp_path, _experiment(arms))
