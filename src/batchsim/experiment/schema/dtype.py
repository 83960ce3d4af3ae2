"""Numeric formats of the model weights and the KV cache."""

from typing import Literal

from batchsim.experiment.schema.common import ConfigModel


class DTypeConfig(ConfigModel):
    """Numeric formats: they set the bytes moved per weight and per cached token."""

    weights: Literal["bf16", "fp8", "int8", "int4", "nvfp4", "mxfp4"] = "bf16"
    """Format of the model weights. `nvfp4` and `mxfp4` (block-scaled 4-bit floats) run on FP4
    tensor cores where the GPU profile gives `peak_flops.fp4`, else weight-only at the bf16 rate."""
    experts: Literal["bf16", "fp8", "int8", "int4", "nvfp4", "mxfp4"] | None = None
    """Format of a mixture-of-experts model's routed experts, where the checkpoint quantises them
    apart from the rest (gpt-oss: `mxfp4` experts, `bf16` weights); unset, they are stored as
    `weights` says. Their bytes, tensor-core rate and fused-MoE efficiency follow this format; a
    dense model refuses it."""
    kv_cache: Literal["bf16", "fp8", "int8", "nvfp4"] = "bf16"
    """Format of the KV cache; fewer bytes per token means more concurrent sequences. `nvfp4`
    (TensorRT-LLM and SGLang on Blackwell) needs a GPU profile with `peak_flops.fp4`."""
