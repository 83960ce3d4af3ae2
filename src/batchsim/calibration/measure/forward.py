"""Whole forward steps of a dense model with random weights: what one serving step costs.

The operator tables check the cost model one operator at a time. This times what the cost model
adds up: every layer (RMSNorm, fused QKV, rotary embedding, KV-cache write, attention, output
projection, residuals, fused gate/up, SiLU-and-multiply, down) and the LM head, for
a decode step (one token per sequence over a cache of `context` tokens) and a prefill step
(one prompt, no cache). Weights are random bf16: timing does not depend on their values.

On CUDA every step is captured once in a CUDA graph and replayed, as serving engines run their
decode steps, so the time is the GPU's and not Python's kernel launches. Each layer has its own
weights and its own KV cache, so nothing a step reads fits in L2 unless it would in a real
model. The rows say what was measured; the comparison with the cost model is
`sim.calibration.own_measurements`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from batchsim.calibration.measure.step_memory import gib, step_bytes, weight_bytes
from batchsim.calibration.measure.timing import Timer
from batchsim.gpu.model_spec import ModelSpec

Row = dict[str, object]

# Decode: (batch, context) pairs; prefill: prompt lengths of a batch of one.
DECODE_POINTS = tuple(
    (b, c) for b in (1, 8, 32, 64, 128, 256) for c in (512, 2048, 8192) if b * c <= 1 << 19
)
PREFILL_LENGTHS = (128, 512, 1024, 2048, 4096, 8192)
QUICK_DECODE_POINTS = ((1, 16), (4, 32))
QUICK_PREFILL_LENGTHS = (16, 64)


@dataclass(frozen=True, slots=True)
class StepShape:
    """One step to time: `batch` sequences, each adding `new_tokens` to `context` cached ones."""

    phase: str  # "decode" or "prefill"
    batch: int
    new_tokens: int
    context: int


def step_shapes(*, quick: bool) -> tuple[StepShape, ...]:
    """The decode and prefill steps one run times (a handful on CPU when `quick`)."""
    decode = QUICK_DECODE_POINTS if quick else DECODE_POINTS
    prefill = QUICK_PREFILL_LENGTHS if quick else PREFILL_LENGTHS
    return tuple(StepShape("decode", b, 1, c) for b, c in decode) + tuple(
        StepShape("prefill", 1, s, 0) for s in prefill
    )


@dataclass(frozen=True, slots=True)
class PreparedStep:
    run: Callable[[], Any]  # one forward step; returns the LM head's logits
    kv_caches: list[tuple[Any, Any]]  # per layer (keys, values): batch, KV heads, tokens, dim


class RandomDenseModel:
    """A dense decoder in the model's shapes with random bf16 weights, one tensor per layer.

    `compiled` runs each layer through `torch.compile`, which fuses the element-wise work
    (norms, rotary, SiLU-and-multiply, residuals) into few kernels, as serving engines do;
    eager runs every element-wise operation as its own kernel.
    """

    def __init__(self, torch: Any, model: ModelSpec, device: str, *,
                 compiled: bool = False) -> None:
        self.torch, self.model, self.device = torch, model, device
        self.compiled = compiled
        self.layer_fn: Callable[..., Any] = self._layer
        if compiled:
            self.layer_fn = torch.compile(self._layer, dynamic=True)
        h, d = model.hidden_size, model.head_dim
        qkv = (model.num_heads + 2 * model.num_kv_heads) * d
        self.layers = [
            {
                "norm1": self._ones(h), "qkv": self._weight(qkv, h),
                "out": self._weight(h, model.num_heads * d), "norm2": self._ones(h),
                "gate_up": self._weight(2 * model.intermediate_size, h),
                "down": self._weight(h, model.intermediate_size),
            }
            for _ in range(model.num_layers)
        ]
        self.final_norm = self._ones(h)
        self.lm_head = self._weight(model.vocab_size, h)

    def _weight(self, rows: int, cols: int) -> Any:
        # Scaled so activations stay finite through many random layers.
        scale = cols ** -0.5
        return self.torch.randn(rows, cols, dtype=self.torch.bfloat16, device=self.device) * scale

    def _ones(self, size: int) -> Any:
        return self.torch.ones(size, dtype=self.torch.bfloat16, device=self.device)

    def prepare(self, shape: StepShape) -> PreparedStep:
        """One step of `shape` on preallocated inputs and KV caches, ready to run."""
        torch, m = self.torch, self.model
        tokens = shape.new_tokens
        x = torch.randn(shape.batch, tokens, m.hidden_size, dtype=torch.bfloat16,
                        device=self.device)
        cache_len = shape.context + tokens
        caches = [
            (self._cache(shape.batch, cache_len), self._cache(shape.batch, cache_len))
            for _ in self.layers
        ]
        cos, sin = self._rotary(shape.context, tokens)
        causal = shape.phase == "prefill"

        def step() -> Any:
            hidden = x
            for weights, (k_cache, v_cache) in zip(self.layers, caches, strict=True):
                hidden = self.layer_fn(hidden, weights, k_cache, v_cache, cos, sin,
                                       shape.context, causal)
            last = self._rms_norm(hidden[:, -1, :], self.final_norm)
            return torch.nn.functional.linear(last, self.lm_head)

        return PreparedStep(run=step, kv_caches=caches)

    def _cache(self, batch: int, length: int) -> Any:
        m = self.model
        return self.torch.randn(batch, m.num_kv_heads, length, m.head_dim,
                                dtype=self.torch.bfloat16, device=self.device)

    def _rotary(self, start: int, count: int) -> tuple[Any, Any]:
        torch, d = self.torch, self.model.head_dim
        inv_freq = 1.0 / (500000.0 ** (torch.arange(0, d, 2, device=self.device) / d))
        positions = torch.arange(start, start + count, device=self.device, dtype=torch.float32)
        angles = torch.outer(positions, inv_freq)
        return angles.cos().to(torch.bfloat16), angles.sin().to(torch.bfloat16)

    def _layer(self, hidden: Any, w: dict[str, Any], k_cache: Any, v_cache: Any,
               cos: Any, sin: Any, context: int, causal: bool) -> Any:
        torch, m = self.torch, self.model
        batch, tokens, d = hidden.shape[0], hidden.shape[1], m.head_dim
        qkv = torch.nn.functional.linear(self._rms_norm(hidden, w["norm1"]), w["qkv"])
        q, k, v = qkv.split([m.num_heads * d, m.num_kv_heads * d, m.num_kv_heads * d], dim=-1)
        q = _rope(torch, q.view(batch, tokens, m.num_heads, d), cos, sin).transpose(1, 2)
        k = _rope(torch, k.view(batch, tokens, m.num_kv_heads, d), cos, sin).transpose(1, 2)
        end = context + tokens
        k_cache[:, :, context:end] = k
        v_cache[:, :, context:end] = v.view(batch, tokens, m.num_kv_heads, d).transpose(1, 2)
        attended = _attention(torch, q, k_cache, v_cache, causal=causal)
        attended = attended.transpose(1, 2).reshape(batch, tokens, m.num_heads * d)
        hidden = hidden + torch.nn.functional.linear(attended, w["out"])
        gate, up = torch.nn.functional.linear(
            self._rms_norm(hidden, w["norm2"]), w["gate_up"]).chunk(2, dim=-1)
        return hidden + torch.nn.functional.linear(torch.nn.functional.silu(gate) * up, w["down"])

    def _rms_norm(self, x: Any, weight: Any) -> Any:
        variance = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * self.torch.rsqrt(variance + 1e-5)).to(x.dtype) * weight


def _rope(torch: Any, x: Any, cos: Any, sin: Any) -> Any:
    """Rotary embedding, rotate-half form; cos/sin are (tokens, head_dim / 2)."""
    first, second = x.chunk(2, dim=-1)
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1)


def _attention(torch: Any, q: Any, k: Any, v: Any, *, causal: bool) -> Any:
    sdpa = torch.nn.functional.scaled_dot_product_attention
    if q.shape[1] == k.shape[1]:
        return sdpa(q, k, v, is_causal=causal)
    return sdpa(q, k, v, is_causal=causal, enable_gqa=True)


@dataclass(frozen=True, slots=True)
class ForwardSteps:
    rows: list[Row]  # one per step and variant timed, latency in ms
    skipped: list[str]  # the steps (or variants) that did not fit in device memory, and why


def forward_rows(torch: Any, timer: Timer, model: ModelSpec, device: str, *, quick: bool,
                 compiled: bool = False, free_bytes: Callable[[], int] | None = None,
                 progress: Callable[[str], None] = print) -> ForwardSteps:
    """Time every step of `step_shapes` with eager layers, and compiled too if `compiled`.

    `free_bytes` (CUDA: free device memory) lets a step that would not fit be skipped and
    reported instead of failing the run; None checks nothing.
    """
    if model.moe is not None or model.mla is not None:
        raise ValueError(f"forward steps time dense models; {model.name} is not one")
    result = ForwardSteps(rows=[], skipped=[])
    for variant in (False, True) if compiled else (False,):
        label = "through torch.compile" if variant else "eager"
        progress(f"  layers {label}")
        shortfall = weights_shortfall(model, free_bytes)
        if shortfall is not None:
            result.skipped.append(f"{label}: {shortfall}")
            continue
        net = RandomDenseModel(torch, model, device, compiled=variant)
        _time_variant(torch, timer, net, device, quick, free_bytes, progress, result)
        del net  # the weights of one variant at a time
    return result


def _time_variant(torch: Any, timer: Timer, net: RandomDenseModel, device: str, quick: bool,
                  free_bytes: Callable[[], int] | None, progress: Callable[[str], None],
                  result: ForwardSteps) -> None:
    for shape in step_shapes(quick=quick):
        name = step_label(shape)
        shortfall = step_shortfall(net.model, shape, free_bytes)
        if shortfall is not None:
            result.skipped.append(f"{name}: {shortfall}")
            progress(f"    {name}: skipped, {shortfall}")
            continue
        progress(f"    {name}")
        run, graphed = _runnable(torch, net.prepare(shape).run, device)
        result.rows.append({
            "model": net.model.name, "phase": shape.phase, "batch_size": shape.batch,
            "new_tokens": shape.new_tokens, "context": shape.context,
            "compiled": net.compiled, "cuda_graph": graphed, "latency": timer.median_s(run) * 1e3,
        })
        del run
        if device == "cuda":
            torch.cuda.empty_cache()


def step_label(shape: StepShape) -> str:
    """How progress lines and skip reasons name a step."""
    return f"{shape.phase} batch {shape.batch} x {shape.new_tokens} tokens over {shape.context}"


def weights_shortfall(model: ModelSpec, free_bytes: Callable[[], int] | None) -> str | None:
    """Why the model's weights would not fit in free device memory; None if they fit.

    Free memory is read once, so the reason quotes the figure that was compared.
    """
    if free_bytes is None:
        return None
    need, free = weight_bytes(model), free_bytes()
    return None if need <= free else f"the weights need {gib(need)}, {gib(free)} free"


def step_shortfall(model: ModelSpec, shape: StepShape,
                   free_bytes: Callable[[], int] | None) -> str | None:
    """Why the KV caches and temporaries of `shape` would not fit in free memory; None if so."""
    if free_bytes is None:
        return None
    need = step_bytes(model, shape.batch, shape.new_tokens, shape.context)
    free = free_bytes()
    return None if need <= free else f"needs {gib(need)}, {gib(free)} free"


def _runnable(torch: Any, step: Callable[[], Any], device: str) -> tuple[Callable[[], Any], bool]:
    """On CUDA, the step captured in a CUDA graph (replay); elsewhere the step itself."""
    if device != "cuda":
        return step, False
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # capture needs its allocations warmed up off the main stream
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph.replay, True


def quick_model() -> ModelSpec:
    """A two-layer toy in Llama's layout, for `--quick` runs on a CPU (CI)."""
    return ModelSpec(
        name="quick-toy", num_layers=2, hidden_size=128, num_heads=4, num_kv_heads=2,
        head_dim=32, intermediate_size=256, vocab_size=512, max_position_embeddings=4096,
        num_params=0, tie_word_embeddings=False, source="a toy for the quick CPU grid",
    )
