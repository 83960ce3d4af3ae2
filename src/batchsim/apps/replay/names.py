"""The benchmarks' names for models, GPUs and GEMM quantisation, as batchsim's.

One mapping, used by `batchsim replay` and by scripts/serving_coverage.py, so that a row the
coverage script counts as representable is one the replay maps. Each function gives the
library's (or the profile's) name, or None; the replay turns None into the reason, naming the
value (docs/how-to/replay.md, "What a case is simulated as").
"""

from __future__ import annotations

import re
from functools import cache

from batchsim.gpu.hardware import list_gpu_profiles, load_gpu_profile
from batchsim.gpu.model_spec import library_model_names

# Hugging Face ids -> model library names (hardware_profiles/models/library.yaml), where the
# repository name is not the library's name once its checkpoint suffixes are stripped
# (`library_model` tries that for any other id).
MODELS = {
    "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
    "meta-llama/Llama-3.1-8B": "llama-3.1-8b",
    "nvidia/Llama-3.1-8B-Instruct-FP8": "llama-3.1-8b",
    "meta-llama/Llama-3.1-70B-Instruct": "llama-3.1-70b",
    "meta-llama/Llama-3.1-70B": "llama-3.1-70b",
    "meta-llama/Llama-3.3-70B-Instruct": "llama-3.1-70b",  # the same architecture
    "mistralai/Mistral-7B-v0.1": "mistral-7b",
    "mistralai/Mistral-7B-Instruct-v0.1": "mistral-7b",
    "mistralai/Mixtral-8x7B-v0.1": "mixtral-8x7b",
    "mistralai/Mixtral-8x7B-Instruct-v0.1": "mixtral-8x7b",
    "Qwen/Qwen3-32B": "qwen3-32b",
    "Qwen/Qwen3-30B-A3B": "qwen3-30b-a3b",
    "Qwen/Qwen3-30B-A3B-Instruct-2507": "qwen3-30b-a3b",  # the 2507 checkpoints: same layers
    "Qwen/Qwen3-30B-A3B-Thinking-2507": "qwen3-30b-a3b",
    "Qwen/Qwen3-235B-A22B": "qwen3-235b-a22b",
    "Qwen/Qwen3-235B-A22B-Instruct-2507": "qwen3-235b-a22b",
    "Qwen/Qwen3-235B-A22B-Thinking-2507": "qwen3-235b-a22b",
    "Qwen/Qwen3-Next-80B-A3B-Instruct": "qwen3-next-80b-a3b",
    "Qwen/Qwen3-Next-80B-A3B-Thinking": "qwen3-next-80b-a3b",
    "Qwen/Qwen3.5-397B-A17B": "qwen3.5-397b-a17b",
    "deepseek-ai/DeepSeek-V3": "deepseek-v3",
    "deepseek-ai/DeepSeek-V3-0324": "deepseek-v3",
    "deepseek-ai/DeepSeek-R1": "deepseek-v3",  # the same architecture
    "deepseek-ai/DeepSeek-R1-0528": "deepseek-v3",
    "openai/gpt-oss-120b": "gpt-oss-120b",
    "openai/gpt-oss-20b": "gpt-oss-20b",
    "google/gemma-3-27b-it": "gemma-3-27b",
    "moonshotai/Kimi-K2.5": "kimi-k2.5",
    "zai-org/GLM-4.7": "glm-4.7",
    "MiniMaxAI/MiniMax-M2.5": "minimax-m2.5",
}
# Checkpoint suffixes of a repository name that leave the architecture as it is.
CHECKPOINT_SUFFIXES = ("-instruct", "-it", "-chat", "-hf", "-base", "-bf16", "-fp8", "-fp4",
                       "-nvfp4")

# The tables' `system` -> GPU profile names (hardware_profiles/gpus/). Any other value is
# tried as a profile's name or alias, `_` read as `-` (`b300_sxm` -> the alias `b300-sxm`).
GPUS = {"h100_sxm": "h100-sxm", "h200_sxm": "h200-sxm", "a100_sxm": "a100-sxm-80gb",
        "l40s": "l40s", "b200_sxm": "b200", "b300_sxm": "b300", "gb200": "gb200",
        "gb300": "gb300"}

# GEMM and MoE quantisation -> weight dtype (gpu/dtypes.py), named as the tables' publisher
# names them (aiconfigurator's GEMMQuantMode and MoEQuantMode, sdk/common.py). Block-scaled and
# static fp8 are priced as per-tensor fp8 (the cost model has one fp8 rate), SmoothQuant (`sq`)
# as W8A8 int8, `int4_wo` as weight-only int4; the KV cache stays bf16, as the tables do not
# say otherwise. `fp4` without a format is NVFP4, the FP4 format of NVIDIA's Blackwell tensor
# cores (docs/background/model.md, "Quantisation"). MXFP4 experts with bf16 activations
# (`w4a16_mxfp4`, gpt-oss's format, and its Hopper CUTLASS variant) are `mxfp4`: weight-only on
# Hopper, and on Blackwell priced by the fused-MoE keys fitted on those very kernels. Modes
# whose activations another format computes in (w4afp8, w4a8_mxfp4_mxfp8, nvfp4_wo,
# w4a16_nvfp4, int8_wo, ...) are not modelled.
WEIGHTS = {"": "bf16", "bf16": "bf16", "bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8",
           "fp8_static": "fp8", "fp8_ootb": "fp8", "sq": "int8", "int4_wo": "int4",
           "nvfp4": "nvfp4", "fp4": "nvfp4", "mxfp4": "mxfp4", "w4a16_mxfp4": "mxfp4",
           "w4a16_mxfp4_cutlass": "mxfp4"}


def library_model(model: str) -> str | None:
    """The library model of a Hugging Face id (or a library name): the table above, else the
    repository name lower-cased without checkpoint suffixes (-Instruct, -FP8, ...) and a
    leading `meta-` (Meta-Llama-3.1-8B), when the library has it."""
    if model in MODELS:
        return MODELS[model]
    library = set(library_model_names())
    name = model.rsplit("/", 1)[-1].strip().lower()
    changed = True
    while changed:
        changed = False
        for suffix in CHECKPOINT_SUFFIXES:
            if name.endswith(suffix):
                name, changed = name[: -len(suffix)], True
    name = re.sub(r"^meta-", "", name)
    return name if name in library else None


def gpu_profile(system: str) -> str | None:
    """The shipped GPU profile of a table's `system` (or a profile's name or alias)."""
    if system in GPUS:
        return GPUS[system]
    return _shipped_gpu_names().get(system.strip().lower().replace("_", "-"))


def weight_dtype(quantization: str) -> str | None:
    """The weight dtype of a GEMM quantisation mode, or None when it is not modelled."""
    return WEIGHTS.get(quantization.strip().lower())


@cache
def _shipped_gpu_names() -> dict[str, str]:
    """Every shipped profile's name and aliases -> its name."""
    names: dict[str, str] = {}
    for name in list_gpu_profiles():
        names[name] = name
        for alias in load_gpu_profile(name).aliases:
            names.setdefault(alias, name)
    return names
