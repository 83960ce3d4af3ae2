"""The cost of one engine step on a pipeline-parallel replica (docs/design.md §3, pipeline
parallelism).

A replica of PP stages runs a step's batch the way vLLM's pipelined engine does (V0's "virtual
engines", V1's batch queue with async scheduling): the sequences are dealt round-robin into
m = min(PP, sequences) micro-batches, which follow one another through the stages, and the
scheduler keeps up to PP micro-batches in flight, so the next step's micro-batches enter a stage
as soon as this step's have left it.

**Steady state, not fill and drain.** Step after step the same micro-batches cycle through the
stages, so a step's duration is the period of that cycle, the larger of two bounds:

- *the busiest resource*: each stage runs every micro-batch once per step (the first stage also
  carries the per-step scheduling overhead, the last the LM head), and each stage-to-stage link
  moves every micro-batch's activations once;
- *the slowest micro-batch's round trip*: a micro-batch cannot start its next step before its
  token has come out of the last stage: overhead + PP stage passes + LM head + PP − 1 hand-offs.

With m = PP equal micro-batches the stages are the bound and the pipeline is full (the step takes
about m·t_stage); with fewer sequences than stages the round trip is, and the stages idle for the
rest: the bubble, (PP − m)/PP of their time. Fill and drain ((m + PP − 1)·t_stage) would charge
every step the bubble of a pipeline that starts empty, which async scheduling avoids as long as
there are sequences to fill it. `bubble_fraction` reports the idle share either way.

Each stage is priced by a `RooflineCostModel` of its L/PP layers (`gpu.pipeline_stages`), with
the per-step overhead taken out and charged once per micro-batch; the LM head, on the last
stage, by a copy of the model without layers. The embedding gather of the first stage is not
priced (it is not at PP = 1 either). Activations cross each boundary: vLLM's Llama hands on the
hidden states and the residual, tokens × hidden × 2 bytes each, at `p2p_latency_s` plus the
bytes over NVLink, or over the node's network where the boundary leaves a node. Each TP rank
sends its peer the tensors over its own link, all at once, so TP does not change the time.

A step ends when its slowest micro-batch does: a long prefill in one micro-batch holds back the
others' next tokens, as it holds back the whole batch at PP = 1 (vLLM would let the decode
micro-batches cycle around it; chunked prefill bounds the effect).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import numpy as np

from batchsim.gpu.cost_model import RooflineCostModel
from batchsim.gpu.dtypes import ACTIVATION_BYTES
from batchsim.gpu.hardware import GpuProfile
from batchsim.gpu.model_spec import ModelSpec
from batchsim.gpu.pipeline_stages import boundary_bandwidths, stage_model

# Tensors a stage hands the next one per token: hidden states and residual (vLLM's
# IntermediateTensors in its Llama forward pass).
_TENSORS_PER_HANDOFF = 2

_FloatOrArray = TypeVar("_FloatOrArray", float, np.ndarray)


# Builds a stage's cost model from the model cut to the stage's layers and the GPU profile.
StageFactory = Callable[[ModelSpec, GpuProfile], RooflineCostModel]


@dataclass(frozen=True, slots=True)
class PipelineStepCost:
    """Duration of one pipelined step and how full the pipeline was."""

    seconds: float
    num_micro_batches: int
    bubble_fraction: float  # share of the stages' time spent idle during the step
    transfer_s: float  # hand-offs on the slowest micro-batch's round trip


@dataclass(frozen=True, slots=True)
class _MicroBatches:
    """The per-micro-batch terms that do not change between consecutive decode steps."""

    new: list[np.ndarray]
    context: list[np.ndarray]
    overhead_s: list[float]
    head_s: list[float]
    transfer_s: list[float]  # latency + bytes / bandwidth over every boundary
    link_s: float  # the busiest link's bytes over its bandwidth, all micro-batches


class PipelineCostModel:
    """Step and swap times of one replica: `model` on PP stages of `tensor_parallel` GPUs."""

    __slots__ = (
        "_body",
        "_boundary_bw",
        "_gpu",
        "_handoff_bytes_per_token",
        "_head",
        "_head_cache",
        "_transfer_latency_s",
        "_transfer_s_per_byte",
        "kv_bytes_per_token_per_gpu",
        "pipeline_parallel",
        "tensor_parallel",
    )

    def __init__(
        self,
        model: ModelSpec,
        gpu: GpuProfile,
        *,
        tensor_parallel: int,
        pipeline_parallel: int,
        weight_dtype: str,
        kv_dtype: str,
        make_stage: StageFactory | None = None,
    ) -> None:
        """`make_stage` prices a stage (default: `RooflineCostModel`); a mixture-of-experts
        cost model can be passed in its place."""
        if pipeline_parallel < 2:
            raise ValueError("PipelineCostModel needs pipeline_parallel >= 2; use "
                             "RooflineCostModel for one stage")
        # The stage models price GPU work only; the overhead is charged once per micro-batch.
        quiet = replace(gpu, efficiency=replace(
            gpu.efficiency, step_overhead_s=0.0, per_seq_overhead_s=0.0))
        if make_stage is None:
            def make_stage(spec: ModelSpec, profile: GpuProfile) -> RooflineCostModel:
                return RooflineCostModel(spec, profile, tensor_parallel=tensor_parallel,
                                         weight_dtype=weight_dtype, kv_dtype=kv_dtype)
        self._body = make_stage(stage_model(model, pipeline_parallel), quiet)
        self._head = make_stage(replace(model, num_layers=0), quiet)  # the LM head alone
        self._gpu = gpu
        self.tensor_parallel = tensor_parallel
        self.pipeline_parallel = pipeline_parallel
        self.kv_bytes_per_token_per_gpu = self._body.kv_bytes_per_token_per_gpu
        self._boundary_bw = boundary_bandwidths(gpu, tensor_parallel, pipeline_parallel)
        self._handoff_bytes_per_token = _TENSORS_PER_HANDOFF * model.hidden_size * ACTIVATION_BYTES
        # A hand-off over every boundary: PP − 1 latencies plus the bytes over each link.
        self._transfer_latency_s = (pipeline_parallel - 1) * gpu.p2p_latency_s
        self._transfer_s_per_byte = sum(1.0 / bw for bw in self._boundary_bw)
        self._head_cache: dict[int, float] = {0: 0.0}

    def step_time(
        self, new_tokens: np.ndarray, context_tokens: np.ndarray, num_emitting: int,
        verifying: np.ndarray | None = None,
    ) -> PipelineStepCost:
        """Cost of one step (same arguments as `RooflineCostModel.step_time`; speculative
        verification is not modelled under pipelining, see batchsim/experiment/colocated.py)."""
        if verifying is not None and verifying.any():
            raise ValueError("speculative verification is not modelled with pipeline stages")
        if new_tokens.shape[0] == 0:
            raise ValueError("step_time of an empty step: a step needs at least one sequence")
        parts = self._micro_batches(new_tokens, context_tokens, num_emitting)
        body = [self._body.step_time(n, c, 0).seconds for n, c in zip(parts.new, parts.context,
                                                                      strict=True)]
        seconds = float(_period(body, parts, self.pipeline_parallel))
        busy = sum(o + self.pipeline_parallel * b + h
                   for o, b, h in zip(parts.overhead_s, body, parts.head_s, strict=True))
        slowest = int(np.argmax([_latency(b, o, h, x, self.pipeline_parallel) for b, o, h, x in
                                 zip(body, parts.overhead_s, parts.head_s, parts.transfer_s,
                                     strict=True)]))
        return PipelineStepCost(
            seconds=seconds,
            num_micro_batches=len(body),
            bubble_fraction=1.0 - busy / (self.pipeline_parallel * seconds),
            transfer_s=parts.transfer_s[slowest],
        )

    def step_seconds(self, new_tokens: list[int], context_tokens: list[int],
                     num_emitting: int) -> float:
        """`step_time(...).seconds` of a step given as lists."""
        return self.step_time(np.array(new_tokens, dtype=np.int64),
                              np.array(context_tokens, dtype=np.int64), num_emitting).seconds

    def decode_step_seconds(
        self, new_tokens: np.ndarray, context_tokens: np.ndarray, num_emitting: int,
        num_steps: int,
    ) -> np.ndarray:
        """Durations of `num_steps` consecutive decode steps of one unchanged batch.

        The micro-batches keep their sequences, so only each stage's KV read grows; the terms
        are combined by the same function as in `step_time`, element for element, so each
        duration equals `step_time(...).seconds` exactly.
        """
        if not (new_tokens == 1).all():
            raise ValueError("decode_step_seconds needs a decode-only batch (one token each)")
        parts = self._micro_batches(new_tokens, context_tokens, num_emitting)
        body = [self._body.decode_step_seconds(n, c, 0, num_steps)
                for n, c in zip(parts.new, parts.context, strict=True)]
        return np.asarray(_period(body, parts, self.pipeline_parallel), dtype=np.float64)

    def decode_step_list(
        self, new_tokens: list[int], context_tokens: list[int], num_emitting: int,
        num_steps: int, within_s: float = math.inf,
    ) -> list[float]:
        """`decode_step_seconds` of a batch given as lists, as a list (the engine's stretch
        works on plain numbers); every step, whatever `within_s`."""
        return self.decode_step_seconds(np.array(new_tokens, dtype=np.int64),
                                        np.array(context_tokens, dtype=np.int64),
                                        num_emitting, num_steps).tolist()

    def swap_time(self, num_tokens: int) -> float:
        """Seconds to copy `num_tokens` tokens of KV one way over PCIe.

        Every GPU of every stage moves its own layers' shard, all in parallel.
        """
        return self._body.swap_time(num_tokens)

    def _micro_batches(
        self, new_tokens: np.ndarray, context_tokens: np.ndarray, num_emitting: int
    ) -> _MicroBatches:
        """Deal sequence i to micro-batch i mod m (vLLM hands requests to its virtual engines
        in turn), and with it the i-th of the `num_emitting` LM-head rows: policies put the
        running decodes, which all emit, first in a step."""
        if context_tokens.shape != new_tokens.shape:
            raise ValueError(
                f"new_tokens has shape {new_tokens.shape} but context_tokens {context_tokens.shape}"
            )
        m = min(self.pipeline_parallel, new_tokens.shape[0])
        new = [new_tokens[j::m] for j in range(m)]
        emitting = [max(0, -(-(num_emitting - j) // m)) for j in range(m)]
        eff = self._gpu.efficiency
        handoff_bytes = [float(n.sum()) * self._handoff_bytes_per_token for n in new]
        return _MicroBatches(
            new=new,
            context=[context_tokens[j::m] for j in range(m)],
            overhead_s=[eff.step_overhead_s + eff.per_seq_overhead_s * n.shape[0] for n in new],
            head_s=[self._head_s(e) for e in emitting],
            transfer_s=[self._transfer_latency_s + b * self._transfer_s_per_byte
                        for b in handoff_bytes],
            link_s=sum(handoff_bytes) / min(self._boundary_bw),
        )

    def _head_s(self, num_emitting: int) -> float:
        """The last stage's LM head over `num_emitting` rows (cached: few distinct counts)."""
        seconds = self._head_cache.get(num_emitting)
        if seconds is None:
            one, zero = np.ones(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
            seconds = self._head.step_time(one, zero, num_emitting).seconds
            self._head_cache[num_emitting] = seconds
        return seconds


def _latency(body: _FloatOrArray, overhead: float, head: float, transfer: float,
             stages: int) -> _FloatOrArray:
    """One micro-batch's round trip: scheduled, through every stage and hand-off, sampled."""
    return ((overhead + stages * body) + head) + transfer


def _period(body: Sequence[_FloatOrArray], parts: _MicroBatches, stages: int) -> _FloatOrArray:
    """The step's duration: the busiest stage or link, or the slowest round trip.

    `body[j]` is micro-batch j's time in one stage (a scalar, or one element per decode step);
    the same operations in the same order either way, so the two agree exactly.
    """
    first = last = 0.0 * body[0]
    for b, o, h in zip(body, parts.overhead_s, parts.head_s, strict=True):
        first = first + (o + b)  # the first stage schedules and runs every micro-batch
        last = last + (b + h)  # the last runs every micro-batch and its LM head
    period = np.maximum(np.maximum(first, last), parts.link_s)
    for b, o, h, x in zip(body, parts.overhead_s, parts.head_s, parts.transfer_s, strict=True):
        period = np.maximum(period, _latency(b, o, h, x, stages))
    return period


def build_cost_model(
    model: ModelSpec, gpu: GpuProfile, *, tensor_parallel: int, pipeline_parallel: int,
    weight_dtype: str, kv_dtype: str, **stage_options: Any,
) -> RooflineCostModel | PipelineCostModel:
    """The replica's cost model: the plain roofline for one stage (unchanged), else pipelined.

    `stage_options` (expert parallelism, ...) go to each stage's `RooflineCostModel`.
    """
    if pipeline_parallel == 1:
        return RooflineCostModel(model, gpu, tensor_parallel=tensor_parallel,
                                 weight_dtype=weight_dtype, kv_dtype=kv_dtype, **stage_options)

    def make_stage(spec: ModelSpec, profile: GpuProfile) -> RooflineCostModel:
        return RooflineCostModel(spec, profile, tensor_parallel=tensor_parallel,
                                 weight_dtype=weight_dtype, kv_dtype=kv_dtype, **stage_options)

    return PipelineCostModel(model, gpu, tensor_parallel=tensor_parallel,
                             pipeline_parallel=pipeline_parallel, weight_dtype=weight_dtype,
                             kv_dtype=kv_dtype, make_stage=make_stage)
