"""A measured case as a batchsim experiment: the same model, GPU, layout and closed loop.

The names the benchmarks use are mapped to the library's and the profiles' (names.py), and
their layout (tensor, pipeline and expert parallelism, data-parallel attention) to batchsim's
here; a case whose model, GPU, quantisation or layout batchsim cannot represent gets the
reason instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from batchsim.apps.replay.measured import MeasuredCase
from batchsim.apps.replay.names import gpu_profile, library_model, weight_dtype
from batchsim.experiment.engine_profile import EngineProfile
from batchsim.gpu.model_spec import load_model

REPLAY_ARM = "engine"


@dataclass(frozen=True, slots=True)
class BenchmarkClient:
    """How the benchmark client drove the engine: a closed loop of `concurrency` users, each
    sending `requests_per_user` requests; the first `warmup_per_user` per user are warm-up,
    left out of the means, and with `drained_warmup` the measured requests start only once
    every warm-up request has ended, as AIPerf's phases do (docs/how-to/replay.md says why
    these defaults: AIPerf's 2 x concurrency warm-up, then 20 x concurrency measured)."""

    requests_per_user: int = 22
    warmup_per_user: int = 2
    drained_warmup: bool = True

    def __post_init__(self) -> None:
        if not 0 <= self.warmup_per_user < self.requests_per_user:
            raise ValueError(f"warm-up ({self.warmup_per_user} per user) must leave requests to "
                             f"measure (of {self.requests_per_user} per user)")


    def sends(self, case: MeasuredCase) -> int:
        """Requests the replay of `case` sends: those the benchmark sent, when it says."""
        if case.request_lengths:
            return len(case.request_lengths)
        return case.concurrency * self.requests_per_user

    def warmup(self, case: MeasuredCase) -> int:
        """Requests left out of the means: none when the file holds only measured ones."""
        return 0 if case.request_lengths else case.concurrency * self.warmup_per_user


def case_experiment(case: MeasuredCase, client: BenchmarkClient, engine: EngineProfile,
                    lengths_file: Path | None = None) -> dict[str, Any] | str:
    """The experiment file (as a dict) that replays `case`, or why it cannot be replayed;
    a case with per-request lengths needs them written to `lengths_file` (`lengths_csv`)."""
    model = library_model(case.model)
    if model is None:
        return f"model {case.model!r} is not in the model library"
    gpu = gpu_profile(case.gpu)
    if gpu is None:
        return f"GPU {case.gpu!r} has no profile"
    weights = weight_dtype(case.quantization)
    if weights is None:
        return f"GEMM quantisation {case.quantization!r} is not modelled"
    experts = replay_expert_dtype(model, weights, case.expert_quantization)
    if isinstance(experts, Refusal):
        return experts.reason
    layout = replay_layout(model, case.tensor_parallel, case.pipeline_parallel,
                           case.attention_data_parallel, case.moe_tensor_parallel,
                           case.moe_expert_parallel)
    if isinstance(layout, str):
        return layout
    experiment: dict[str, Any] = {
        "name": "replay",
        "seed": 0,
        "model": model,
        "hardware": gpu,
        "engine": engine.ref,
        "tensor_parallel": layout.tensor_parallel,
        "pipeline_parallel": case.pipeline_parallel,
        # Routed experts in a format of their own only where the row says so.
        "dtype": {"weights": weights, "kv_cache": "bf16",
                  **({"experts": experts} if experts is not None else {})},
        "max_model_len": longest_request(case),
        "workload": _workload(case, client, lengths_file),
        "policies": [engine_arm(engine, case)],
    }
    # Only a layout beyond tensor parallelism sets the keys (a TP-only case's file is as it was).
    if layout.expert_parallel > 1:
        experiment["expert_parallel"] = layout.expert_parallel
    if layout.data_parallel_attention:
        experiment["data_parallel_attention"] = True
    scheduler = engine.spec.scheduler
    if scheduler is not None:
        experiment["gpu_memory_utilization"] = scheduler.gpu_memory_utilization
        experiment["kv_cache"] = {"block_size": scheduler.block_size}
    return experiment


@dataclass(frozen=True, slots=True)
class Layout:
    """One replica's stage in the experiment's keys: `tensor_parallel` GPUs, the experts spread
    over `expert_parallel` of them, attention data-parallel over all of them or not."""

    tensor_parallel: int
    expert_parallel: int = 1
    data_parallel_attention: bool = False


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a row cannot be replayed."""

    reason: str


def replay_expert_dtype(model: str, weights: str,
                        expert_quantization: str) -> str | Refusal | None:
    """A mixture-of-experts model's `dtype.experts` for its routed experts' quantisation
    (`moe_quant_mode`): None where they share the GEMMs' format `weights` (or the model is
    dense, where the tables fill the column anyway), a Refusal for a format not modelled."""
    if not expert_quantization or not _is_moe(model):
        return None
    experts = weight_dtype(expert_quantization)
    if experts is None:
        return Refusal(f"expert quantisation {expert_quantization!r} (moe_quant_mode) is not "
                       "modelled")
    return experts if experts != weights else None


def replay_layout(model: str, tensor_parallel: int, pipeline_parallel: int = 1,
                  attention_data_parallel: int = 1, moe_tensor_parallel: int | None = None,
                  moe_expert_parallel: int = 1) -> Layout | str:
    """A benchmark's layout of library model `model` as batchsim's, or why it has none.

    The tables' degrees (`tp_size`, `pp_size`, `attention_dp_size`, `moe_tp_size`,
    `moe_ep_size`) count a stage's GPUs as `tp_size × attention_dp_size`: attention is split
    over `tp_size` GPUs in each of `attention_dp_size` ranks, each routed expert over
    `moe_tp_size` and the experts over `moe_ep_size`. batchsim's data-parallel attention runs
    each GPU's attention whole over all of the stage's `tensor_parallel` GPUs with the experts
    spread over all of them (`expert_parallel` = `tensor_parallel`, gpu/moe_layout.py), so it
    is `tp_size` 1, `moe_ep_size` = `attention_dp_size`; without it, each expert is split over
    `tensor_parallel / expert_parallel` GPUs. Any other combination is refused with the reason
    (`moe_tensor_parallel` None: not given).
    """
    tp, dp, ep, moe_tp = (tensor_parallel, attention_data_parallel, moe_expert_parallel,
                          moe_tensor_parallel)
    if not _is_moe(model):
        if dp > 1:
            return (f"attention_dp_size {dp}: data-parallel attention needs a "
                    f"mixture-of-experts model; {model} is dense")
        if ep > 1:
            return (f"moe_ep_size {ep}: expert parallelism needs a mixture-of-experts model; "
                    f"{model} is dense")
        if moe_tp not in (None, 1, tp):
            return f"moe_tp_size {moe_tp}: {model} is dense (its MLPs are split by tp_size {tp})"
        return Layout(tp)
    if dp > 1 and tp > 1:
        return (f"attention_dp_size {dp} with tp_size {tp}: batchsim's data-parallel "
                f"attention keeps each GPU's attention whole (tp_size 1)")
    if dp > 1 and ep != dp:
        return (f"moe_ep_size {ep} with attention_dp_size {dp}: batchsim's data-parallel "
                f"attention needs the experts spread over all {dp} GPUs (moe_ep_size {dp})")
    gpus = tp * dp
    if gpus % ep:
        return (f"moe_ep_size {ep} does not divide the {gpus} GPU(s) of tp_size {tp} × "
                f"attention_dp_size {dp}")
    if moe_tp is not None and moe_tp * ep != gpus:
        return (f"moe_tp_size {moe_tp} × moe_ep_size {ep} is not the {gpus} GPU(s) of "
                f"tp_size {tp} × attention_dp_size {dp}: batchsim splits each expert over "
                f"{gpus // ep} GPU(s)")
    if pipeline_parallel > 1 and (ep > 1 or dp > 1):
        # experiment/deployment.py refuses these layouts with pipeline stages.
        return (f"pp_size {pipeline_parallel} with moe_ep_size {ep} / attention_dp_size {dp}: "
                "expert parallelism and data-parallel attention are not modelled with "
                "pipeline parallelism")
    return Layout(gpus, ep, dp > 1)


@cache
def _is_moe(model: str) -> bool:
    return load_model(model).moe is not None


def longest_request(case: MeasuredCase) -> int:
    """Prompt plus output tokens of the case's longest request."""
    if case.request_lengths:
        return max(prompt + output for prompt, output in case.request_lengths)
    return case.prompt_tokens + case.output_tokens


def lengths_csv(case: MeasuredCase) -> str:
    """The case's per-request lengths as the corpus file its experiment reads in order."""
    rows = "".join(f"{prompt},{output}\n" for prompt, output in case.request_lengths)
    return "prompt_tokens,output_tokens\n" + rows


def _workload(case: MeasuredCase, client: BenchmarkClient,
              lengths_file: Path | None) -> dict[str, Any]:
    workload: dict[str, Any] = {"num_requests": client.sends(case)}
    if case.request_rate is None:
        workload["arrivals"] = {"kind": "closed_loop", "concurrency": case.concurrency}
        if client.drained_warmup and client.warmup(case):
            workload["arrivals"]["drain_after"] = client.warmup(case)
    else:
        # The client draws gamma gaps of shape `burstiness`: their CV is 1 / sqrt(shape).
        workload["arrivals"] = {"kind": "gamma", "rate": case.request_rate,
                                "cv": case.burstiness ** -0.5}
    if case.request_lengths:
        if lengths_file is None:
            raise ValueError("a case with per-request lengths needs its lengths file")
        workload["lengths"] = {"kind": "corpus", "path": str(lengths_file), "order": "in_order",
                               "prompt_column": "prompt_tokens",
                               "output_column": "output_tokens"}
    else:
        workload["prompt_tokens"] = {"kind": "fixed", "value": case.prompt_tokens}
        workload["output_tokens"] = {"kind": "fixed", "value": case.output_tokens}
    return workload


def engine_arm(engine: EngineProfile, case: MeasuredCase) -> dict[str, Any]:
    """The engine's own scheduler as an arm; with no engine (`none`), batchsim's defaults."""
    scheduler = engine.spec.scheduler
    if scheduler is None:
        # Never fewer sequences than the benchmark keeps in flight.
        return {"name": REPLAY_ARM, "kind": "chunked_prefill",
                "max_num_seqs": max(256, case.concurrency),
                "token_budget": max(2048, case.concurrency)}
    launched = case.engine_max_batch or scheduler.max_num_seqs
    arm: dict[str, Any] = {"name": REPLAY_ARM, "kind": scheduler.policy,
                           "max_num_seqs": max(1, launched - scheduler.reserved_seq_slots)}
    if scheduler.policy == "chunked_prefill":
        # A launched prefill budget still cannot exceed the engine's chunk size.
        arm["token_budget"] = min(scheduler.token_budget,
                                  case.engine_token_budget or scheduler.token_budget)
        arm["mixed_prefill"] = (scheduler.mixed_prefill if case.engine_mixed_prefill is None
                                else case.engine_mixed_prefill)
    elif case.engine_token_budget is not None:
        # The launched budget, which an unchunked engine refuses a prompt beyond.
        arm["max_num_batched_tokens"] = max(case.engine_token_budget, _longest_prompt(case))
    else:
        # batchsim's unchunked policy needs a step to hold a whole request (vLLM's rule);
        # TensorRT-LLM only needs the prompt to fit. The budget is raised to the request.
        arm["max_num_batched_tokens"] = max(scheduler.token_budget, longest_request(case))
    if scheduler.reserve is not None:
        # The benchmark asks for exactly the output length (max_tokens = osl, EOS ignored),
        # which is what the engine reserves against.
        arm["admission_reserve"] = {**scheduler.reserve.model_dump(),
                                    "assumed_max_new_tokens": _longest_output(case)}
    return arm


def _longest_prompt(case: MeasuredCase) -> int:
    if case.request_lengths:
        return max(prompt for prompt, _ in case.request_lengths)
    return case.prompt_tokens


def _longest_output(case: MeasuredCase) -> int:
    if case.request_lengths:
        return max(output for _, output in case.request_lengths)
    return case.output_tokens
