"""The whole-step benchmark does the work of the step it names, and the GPU timer queues its
repeats so that no event pair brackets a launch gap."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from batchsim.calibration.measure import forward
from batchsim.calibration.measure.forward import (
    RandomDenseModel,
    StepShape,
    forward_rows,
    quick_model,
    step_shapes,
)
from batchsim.calibration.measure.step_memory import step_bytes, weight_bytes
from batchsim.calibration.measure.timing import Timer
from batchsim.gpu.model_spec import load_model

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("shape", [StepShape("decode", 3, 1, 20), StepShape("prefill", 1, 24, 0)])
def test_every_layer_attends_over_the_context_plus_the_new_tokens(
    shape: StepShape, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = quick_model()
    seen: list[tuple[tuple[int, ...], tuple[int, ...], bool]] = []
    original = forward._attention

    def recording(torch_: Any, q: Any, k: Any, v: Any, *, causal: bool) -> Any:
        seen.append((tuple(q.shape), tuple(k.shape), causal))
        return original(torch_, q, k, v, causal=causal)

    monkeypatch.setattr(forward, "_attention", recording)
    with torch.inference_mode():
        logits = RandomDenseModel(torch, model, "cpu").prepare(shape).run()
    # The LM head runs once per sequence in decode and once (the last token) in prefill.
    assert tuple(logits.shape) == (shape.batch, model.vocab_size)
    assert bool(torch.isfinite(logits).all())
    q_shape = (shape.batch, model.num_heads, shape.new_tokens, model.head_dim)
    k_shape = (shape.batch, model.num_kv_heads, shape.context + shape.new_tokens, model.head_dim)
    assert seen == [(q_shape, k_shape, shape.phase == "prefill")] * model.num_layers


def test_the_new_tokens_keys_land_after_the_cached_context() -> None:
    shape = StepShape("decode", 2, 1, 5)
    with torch.inference_mode():
        net = RandomDenseModel(torch, quick_model(), "cpu")
        step = net.prepare(shape)
        before = [k.clone() for k, _ in step.kv_caches]
        step.run()
    for (k_after, _), k_before in zip(step.kv_caches, before, strict=True):
        assert torch.equal(k_after[:, :, :5], k_before[:, :, :5])  # the context is kept
        assert not torch.equal(k_after[:, :, 5], k_before[:, :, 5])  # the new key written


class _FakeCuda:
    """Records the order of what the timer asks of CUDA."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def synchronize(self) -> None:
        self.log.append("sync")

    def _sleep(self, cycles: int) -> None:
        self.log.append(f"spin {cycles}")

    def Event(self, enable_timing: bool) -> Any:  # torch's name
        log = self.log

        class _Event:
            def record(self) -> None:
                log.append("record")

            def elapsed_time(self, other: Any) -> float:
                return 2.0  # ms

        return _Event()


class _FakeTorch:
    def __init__(self, log: list[str]) -> None:
        self.cuda = _FakeCuda(log)


def test_cuda_repeats_are_queued_behind_a_spin_and_read_after_one_synchronisation() -> None:
    log: list[str] = []
    timer = Timer(torch=_FakeTorch(log), device="cuda", warmup=1, repeats=3)
    seconds = timer.median_s(lambda: log.append("op"))
    assert seconds == pytest.approx(2e-3)
    timed = log[log.index("sync") + 1:]
    assert log[:2] == ["op", "sync"]  # warm-up, then drained
    assert timed[0].startswith("spin ")  # the GPU waits while Python queues every repeat
    assert timed[1:] == ["record", "op", "record"] * 3 + ["sync"]


def test_the_random_model_holds_the_published_parameters_less_the_embedding_table() -> None:
    model = load_model("llama-3.1-8b")
    embedding = model.vocab_size * model.hidden_size  # a lookup: no step reads it all
    assert weight_bytes(model) / 2 == pytest.approx(model.num_params - embedding, rel=1e-3)


def test_steps_that_do_not_fit_in_device_memory_are_skipped_with_the_reason() -> None:
    model = quick_model()
    timer = Timer(torch=torch, device="cpu", warmup=0, repeats=1)
    smallest = min(step_bytes(model, s.batch, s.new_tokens, s.context)
                   for s in step_shapes(quick=True))
    # Free memory is read once before the weights are made, then before every step.
    free = itertools.chain([weight_bytes(model)], itertools.repeat(smallest))
    with torch.inference_mode():
        result = forward_rows(torch, timer, model, "cpu", quick=True,
                              free_bytes=lambda: next(free), progress=lambda _: None)
    assert len(result.rows) == 1  # only the smallest step fits
    assert len(result.skipped) == len(step_shapes(quick=True)) - 1
    assert all("needs" in reason and "free" in reason for reason in result.skipped)
    with torch.inference_mode():
        none_fit = forward_rows(torch, timer, model, "cpu", quick=True, compiled=True,
                                free_bytes=lambda: 1024, progress=lambda _: None)
    assert none_fit.rows == []
    assert [r.split(":")[0] for r in none_fit.skipped] == ["eager", "through torch.compile"]
