"""benchmarks/vs_sched_sim.py without sched-sim: the matched workload's lengths corpus, its
experiment, the verdict lines, and benchmark (e)'s skip line (docs/performance.md)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from batchsim.apps import api
from benchmarks import run as bench_run
from benchmarks import vs_sched_sim


def test_draws_follow_the_triangular_laws_and_repeat() -> None:
    arrivals, lengths = vs_sched_sim.draw_stream(5_000)
    assert (arrivals, lengths) == vs_sched_sim.draw_stream(5_000)
    assert len(arrivals) == 5_001 and len(lengths) == 5_000
    assert arrivals == sorted(arrivals)
    prompts = [p for p, _ in lengths]
    outputs = [o for _, o in lengths]
    assert min(prompts) >= 30 and max(prompts) < 400
    assert min(outputs) >= 20 and max(outputs) < 300
    # Means of int(triangular(low, high, mode)): (low + high + mode) / 3 - about one half.
    assert sum(prompts) / len(prompts) == pytest.approx(550 / 3 - 0.5, rel=0.02)
    assert sum(outputs) / len(outputs) == pytest.approx(410 / 3 - 0.5, rel=0.02)
    assert 5_000 / arrivals[-1] == pytest.approx(vs_sched_sim.RATE, rel=0.05)


def test_the_corpus_is_the_draws_and_the_window_keeps_them_all(tmp_path: Path) -> None:
    corpus = tmp_path / "lengths.csv"
    vs_sched_sim.write_corpus(corpus)
    with corpus.open() as f:
        rows = [(int(r["prompt_tokens"]), int(r["output_tokens"])) for r in csv.DictReader(f)]
    arrivals, lengths = vs_sched_sim.draw_stream(vs_sched_sim.REQUESTS)
    assert rows == lengths
    if vs_sched_sim.CORPUS.exists():  # the copy beside the experiment is current
        assert vs_sched_sim.CORPUS.read_text() == corpus.read_text()
    window = vs_sched_sim.sched_sim_duration()
    assert arrivals[vs_sched_sim.REQUESTS - 1] < window < arrivals[vs_sched_sim.REQUESTS]


def test_the_experiment_is_the_matched_workload() -> None:
    exp = api.load_experiment(vs_sched_sim.EXPERIMENT)
    assert exp.engine == "none"
    assert (exp.model, exp.hardware) == ("llama-3.1-8b", "h100-sxm")
    assert exp.workload.num_requests == vs_sched_sim.REQUESTS
    assert exp.workload.arrivals is not None
    assert exp.workload.arrivals.rate == vs_sched_sim.RATE  # type: ignore[union-attr]
    (arm,) = exp.policies
    assert arm.kind == "chunked_prefill"
    assert (arm.token_budget, arm.max_num_seqs) == (
        vs_sched_sim.TOKEN_BUDGET, vs_sched_sim.MAX_SEQS)


def test_verdict_lines() -> None:
    met = vs_sched_sim._line("x", [30_000, 10_000, 40_000], [2_000, 2_500, 1_000])
    assert met == ("x: batchsim 30,000 (10,000-40,000) requests per CPU second, sched-sim "
                   "2,000 (1,000-2,500): 15.0x (target >= 10x: met)")
    assert vs_sched_sim._line("x", [3_000], [2_000]).endswith("1.5x (target >= 10x: unmet)")
    assert vs_sched_sim._line("x", [3_000], None).endswith("; sched-sim not measured")


def test_benchmark_e_skips_without_sched_sim(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(vs_sched_sim, "have_sched_sim", lambda: False)
    bench_run._versus_sched_sim()
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("(e) skipped: sched-sim is not installed")
