"""A measured case as a batchsim experiment: the same model, GPU, layout and closed loop.

The names the benchmarks use are mapped to the library's and the profiles' here; a case whose
model, GPU or quantisation batchsim cannot represent gets the reason instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from batchsim.apps.replay.measured import MeasuredCase
from batchsim.experiment.engine_profile import EngineProfile

# Hugging Face ids of the benchmarks -> model library names (hardware_profiles/models/).
MODELS = {
    "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
    "meta-llama/Llama-3.1-8B": "llama-3.1-8b",
    "nvidia/Llama-3.1-8B-Instruct-FP8": "llama-3.1-8b",
    "meta-llama/Llama-3.1-70B-Instruct": "llama-3.1-70b",
    "meta-llama/Llama-3.1-70B": "llama-3.1-70b",
    "Qwen/Qwen3-32B": "qwen3-32b",
    "Qwen/Qwen3-30B-A3B": "qwen3-30b-a3b",
    "Qwen/Qwen3-235B-A22B": "qwen3-235b-a22b",
    "deepseek-ai/DeepSeek-V3": "deepseek-v3",
    "deepseek-ai/DeepSeek-R1": "deepseek-v3",  # the same architecture
}
# The tables' `system` -> GPU profile names (hardware_profiles/gpus/).
GPUS = {"h100_sxm": "h100-sxm", "h200_sxm": "h200-sxm", "a100_sxm": "a100-sxm-80gb",
        "l40s": "l40s", "b200_sxm": "b200"}
# GEMM quantisation -> weight dtype. Block-scaled fp8 is priced as per-tensor fp8 (the cost
# model has one fp8 rate); the KV cache stays bf16, as the tables do not say otherwise.
WEIGHTS = {"": "bf16", "fp8": "fp8", "fp8_block": "fp8"}

REPLAY_ARM = "engine"


@dataclass(frozen=True, slots=True)
class BenchmarkClient:
    """How the benchmark client drove the engine: a closed loop of `concurrency` users, each
    sending `requests_per_user` requests; the first `warmup_per_user` per user are warm-up,
    left out of the means (docs/how-to/replay.md says why these defaults)."""

    requests_per_user: int = 20
    warmup_per_user: int = 2

    def __post_init__(self) -> None:
        if not 0 <= self.warmup_per_user < self.requests_per_user:
            raise ValueError(f"warm-up ({self.warmup_per_user} per user) must leave requests to "
                             f"measure (of {self.requests_per_user} per user)")


def case_experiment(case: MeasuredCase, client: BenchmarkClient,
                    engine: EngineProfile) -> dict[str, Any] | str:
    """The experiment file (as a dict) that replays `case`, or why it cannot be replayed."""
    model = MODELS.get(case.model)
    if model is None:
        return f"model {case.model!r} is not in the model library"
    gpu = GPUS.get(case.gpu)
    if gpu is None:
        return f"GPU {case.gpu!r} has no profile"
    weights = WEIGHTS.get(case.quantization)
    if weights is None:
        return f"GEMM quantisation {case.quantization!r} is not modelled"
    experiment: dict[str, Any] = {
        "name": "replay",
        "seed": 0,
        "model": model,
        "hardware": gpu,
        "engine": engine.ref,
        "tensor_parallel": case.tensor_parallel,
        "pipeline_parallel": case.pipeline_parallel,
        "dtype": {"weights": weights, "kv_cache": "bf16"},
        "max_model_len": case.prompt_tokens + case.output_tokens,
        "workload": {
            "arrivals": {"kind": "closed_loop", "concurrency": case.concurrency},
            "prompt_tokens": {"kind": "fixed", "value": case.prompt_tokens},
            "output_tokens": {"kind": "fixed", "value": case.output_tokens},
            "num_requests": case.concurrency * client.requests_per_user,
        },
        "policies": [engine_arm(engine, case)],
    }
    scheduler = engine.spec.scheduler
    if scheduler is not None:
        experiment["gpu_memory_utilization"] = scheduler.gpu_memory_utilization
        experiment["kv_cache"] = {"block_size": scheduler.block_size}
    return experiment


def engine_arm(engine: EngineProfile, case: MeasuredCase) -> dict[str, Any]:
    """The engine's own scheduler as an arm; with no engine (`none`), batchsim's defaults."""
    scheduler = engine.spec.scheduler
    if scheduler is None:
        # Never fewer sequences than the benchmark keeps in flight.
        return {"name": REPLAY_ARM, "kind": "chunked_prefill",
                "max_num_seqs": max(256, case.concurrency),
                "token_budget": max(2048, case.concurrency)}
    arm: dict[str, Any] = {"name": REPLAY_ARM, "kind": scheduler.policy,
                           "max_num_seqs": scheduler.max_num_seqs}
    if scheduler.policy == "chunked_prefill":
        arm["token_budget"] = scheduler.token_budget
        arm["mixed_prefill"] = scheduler.mixed_prefill
    else:
        # batchsim's unchunked policy needs a step to hold a whole request (vLLM's rule);
        # TensorRT-LLM only needs the prompt to fit. The budget is raised to the request.
        arm["max_num_batched_tokens"] = max(scheduler.token_budget,
                                            case.prompt_tokens + case.output_tokens)
    if scheduler.reserve is not None:
        # The benchmark asks for exactly the output length (max_tokens = osl, EOS ignored),
        # which is what the engine reserves against.
        arm["admission_reserve"] = {**scheduler.reserve.model_dump(),
                                    "assumed_max_new_tokens": case.output_tokens}
    return arm
