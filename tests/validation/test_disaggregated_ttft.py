"""A disaggregated arm's TTFT on the bare roofline is its prefill pool's time to first token
(docs/design.md §2); an engine's client sees it later, where the engine sends it (the last tests).

With one prefill and one decode replica and an ideal link (infinite bandwidth, no latency), the
prefill replica serves exactly what a lone replica of the same policy serves when every answer
is one token long: the same arrivals, the same prompts, the same steps. So every request's TTFT
must be equal, to the last bit. (A finite link changes nothing here either: the transfer only
delays the second token, and it can change the first only by holding the prefill replica's
blocks while the cache is full, which an H100's cache never is on this small case.)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.validation.experiment_builder import base_experiment, run_dict

PREFILL_POLICIES = {
    "whole prompts": ({}, {"kind": "continuous", "max_num_seqs": 256}),
    "chunked": ({"prefill_chunked": True, "prefill_token_budget": 512,
                 "prefill_max_num_seqs": 64},
                {"kind": "chunked_prefill", "token_budget": 512, "max_num_seqs": 64}),
}
LINKS = {"ideal": {"bandwidth_gb_s": None, "latency_us": 0},
         "50 GB/s": {"bandwidth_gb_s": 50, "latency_us": 10}}


def _experiment(output: dict[str, object], arm: dict[str, object]) -> dict[str, object]:
    # On the bare roofline, whose client sees the prefill pool's first token as it is
    # computed (an engine's would see it through the decode replica, after the KV hand-off,
    # and its API server would stream the lone replica's one token): the identity is about
    # the pools' scheduling.
    return base_experiment(engine="none", workload={
        "arrivals": {"kind": "poisson", "rate": 12.0},  # prompts queue and share steps
        "prompt_tokens": {"kind": "lognormal", "mean": 1500, "cv": 1.0},
        "output_tokens": output,
        "num_requests": 120,
    }, policies=[{"name": "arm", **arm}])


@pytest.mark.parametrize("link", LINKS.values(), ids=LINKS.keys())
@pytest.mark.parametrize("policy", PREFILL_POLICIES.values(), ids=PREFILL_POLICIES.keys())
def test_ttft_is_the_prefill_replicas_time_to_first_token(
        tmp_path: Path, policy: tuple[dict[str, object], dict[str, object]],
        link: dict[str, object]) -> None:
    prefill_knobs, colocated = policy
    disaggregated = {"kind": "disaggregated", "prefill_replicas": 1, "decode_replicas": 1,
                     **prefill_knobs, "kv_link": link}
    [split] = run_dict(tmp_path, _experiment({"kind": "geometric", "mean": 64},
                                             disaggregated)).arms
    [alone] = run_dict(tmp_path, _experiment({"kind": "fixed", "value": 1}, colocated)).arms
    assert split.requests["finished"].all() and alone.requests["finished"].all()
    np.testing.assert_array_equal(split.requests["arrival_s"], alone.requests["arrival_s"])
    np.testing.assert_array_equal(split.requests["ttft_s"], alone.requests["ttft_s"])
    np.testing.assert_array_equal(split.requests["queue_delay_s"],
                                  alone.requests["queue_delay_s"])
    # The prefill pool really batched and queued prompts: otherwise the test would be trivial.
    assert (split.requests["queue_delay_s"] > 0).mean() > 0.2


def _engine(tmp_path: Path, first_token: str) -> str:
    """A profile with no costs of its own (the bare roofline's) and the given first-token rule."""
    path = tmp_path / f"engine-{first_token}.yaml"
    path.write_text(f"name: bare-{first_token}\nhandoff_first_token: {first_token}\n",
                    encoding="utf-8")
    return str(path)


def _split_run(tmp_path: Path, first_token: str, workload: dict[str, object]) -> pd.DataFrame:
    exp = base_experiment(engine=_engine(tmp_path, first_token), workload=workload, policies=[
        {"name": "arm", "kind": "disaggregated", "prefill_replicas": 1, "decode_replicas": 1,
         "kv_link": LINKS["50 GB/s"]}])
    [arm] = run_dict(tmp_path, exp).arms
    assert arm.requests["finished"].all()
    return arm.requests.sort_values("request_id").reset_index(drop=True)


def test_the_client_sees_the_first_token_where_the_engine_sends_it(tmp_path: Path) -> None:
    """One request, alone: `prefill` shows the prefill's token; `transfer` shows it when the KV
    has crossed the link and the idle decode replica takes the request in; `recompute` one
    decode step later (the step that recomputes the last prompt token), and the request ends
    one step later too (the decode replica samples every output token)."""
    one = {"arrivals": {"kind": "poisson", "rate": 1.0}, "num_requests": 1,
           "prompt_tokens": {"kind": "fixed", "value": 2000},
           "output_tokens": {"kind": "fixed", "value": 50}}
    runs = {rule: _split_run(tmp_path, rule, one).iloc[0]
            for rule in ("prefill", "transfer", "recompute")}
    prefill, transfer, recompute = runs["prefill"], runs["transfer"], runs["recompute"]
    for run in runs.values():  # the prefill pool and the link do the same in each
        assert run["prefill_token_s"] == prefill["first_token_s"]
        assert run["kv_arrival_s"] == prefill["kv_arrival_s"]
    assert prefill["kv_arrival_s"] > prefill["first_token_s"]  # 2,000 tokens' KV at 50 GB/s
    assert transfer["first_token_s"] == prefill["kv_arrival_s"]
    assert transfer["finish_s"] == prefill["finish_s"]
    step = recompute["first_token_s"] - transfer["first_token_s"]
    # One decode step of a lone 2,000-token context: a few milliseconds on an H100.
    assert 1e-3 < step < 2e-2
    assert recompute["finish_s"] - transfer["finish_s"] == pytest.approx(step, rel=1e-3)
    assert recompute["ttft_s"] > transfer["ttft_s"] > prefill["ttft_s"]


def test_transfer_moves_only_the_first_token(tmp_path: Path) -> None:
    """Under load, streaming the prefill's token from the decode replica changes no schedule:
    without a streaming server every request ends when it does with `prefill`, and its first
    token is seen when it joins the decode batch (after its KV arrived)."""
    load = {"arrivals": {"kind": "poisson", "rate": 12.0}, "num_requests": 120,
            "prompt_tokens": {"kind": "lognormal", "mean": 1500, "cv": 1.0},
            "output_tokens": {"kind": "geometric", "mean": 64}}
    prefill = _split_run(tmp_path, "prefill", load)
    transfer = _split_run(tmp_path, "transfer", load)
    np.testing.assert_array_equal(transfer["finish_s"], prefill["finish_s"])
    np.testing.assert_array_equal(transfer["prefill_token_s"], prefill["first_token_s"])
    moved = transfer["output_tokens"] > 1
    assert moved.sum() > 100
    assert (transfer["first_token_s"][moved] >= transfer["kv_arrival_s"][moved]).all()
    assert (transfer["ttft_s"][moved] > prefill["ttft_s"][moved]).all()
