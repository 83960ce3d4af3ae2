"""A measured case as a batchsim experiment: the same model, GPU, layout and closed loop.

The names the benchmarks use are mapped to the library's and the profiles' here; a case whose
model, GPU or quantisation batchsim cannot represent gets the reason instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
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
    model = MODELS.get(case.model, case.model if case.model in MODELS.values() else None)
    if model is None:
        return f"model {case.model!r} is not in the model library"
    gpu = GPUS.get(case.gpu, case.gpu if case.gpu in GPUS.values() else None)
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
        "max_model_len": longest_request(case),
        "workload": _workload(case, client, lengths_file),
        "policies": [engine_arm(engine, case)],
    }
    scheduler = engine.spec.scheduler
    if scheduler is not None:
        experiment["gpu_memory_utilization"] = scheduler.gpu_memory_utilization
        experiment["kv_cache"] = {"block_size": scheduler.block_size}
    return experiment


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
    arm: dict[str, Any] = {"name": REPLAY_ARM, "kind": scheduler.policy,
                           "max_num_seqs": scheduler.max_num_seqs}
    if scheduler.policy == "chunked_prefill":
        arm["token_budget"] = scheduler.token_budget
        arm["mixed_prefill"] = scheduler.mixed_prefill
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


def _longest_output(case: MeasuredCase) -> int:
    if case.request_lengths:
        return max(output for _, output in case.request_lengths)
    return case.output_tokens
