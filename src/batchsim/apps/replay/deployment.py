"""A measured case as a batchsim experiment: the same model, GPU, layout and closed loop.

The names the benchmarks use are mapped to the library's and the profiles' here; a case whose
model, GPU or quantisation batchsim cannot represent gets the reason instead.
"""

from __future__ import annotations

from typing import Any

from batchsim.apps.replay.measured import MeasuredCase

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

REPLAY_ARM = "chunked_prefill"


def case_experiment(case: MeasuredCase, requests_per_user: int) -> dict[str, Any] | str:
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
    return {
        "name": "replay",
        "seed": 0,
        "model": model,
        "hardware": gpu,
        "tensor_parallel": case.tensor_parallel,
        "pipeline_parallel": case.pipeline_parallel,
        "dtype": {"weights": weights, "kv_cache": "bf16"},
        "max_model_len": case.prompt_tokens + case.output_tokens,
        "workload": {
            "arrivals": {"kind": "closed_loop", "concurrency": case.concurrency},
            "prompt_tokens": {"kind": "fixed", "value": case.prompt_tokens},
            "output_tokens": {"kind": "fixed", "value": case.output_tokens},
            "num_requests": case.concurrency * requests_per_user,
        },
        "policies": [{
            "name": REPLAY_ARM, "kind": "chunked_prefill",
            # Never fewer sequences than the benchmark keeps in flight.
            "max_num_seqs": max(256, case.concurrency),
            "token_budget": max(2048, case.concurrency),
        }],
    }
