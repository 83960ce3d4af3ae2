"""Device memory a whole forward step needs, so that a step which cannot fit is skipped with a
reason instead of failing the run (a 70B model's weights alone exceed one 80 GB GPU)."""

from __future__ import annotations

from batchsim.calibration.measure.grids import model_gemm_shapes
from batchsim.gpu.model_spec import ModelSpec

BF16_BYTES = 2
# Temporaries of one layer (the gate/up output, fp32 norm copies, attention output) per token
# and per element of the widest activation: generous, so a step that passes does not run out.
_ACTIVATION_COPIES = 8


def weight_bytes(model: ModelSpec) -> int:
    """The random model's weights: every layer's GEMMs and norms, and the LM head."""
    *layer_gemms, lm_head = model_gemm_shapes(model)
    per_layer = sum(n * k for n, k in layer_gemms) + 2 * model.hidden_size
    return BF16_BYTES * (model.num_layers * per_layer + lm_head[0] * lm_head[1]
                         + model.hidden_size)


def step_bytes(model: ModelSpec, batch: int, new_tokens: int, context: int) -> int:
    """KV caches of every layer for the step, plus headroom for one layer's temporaries."""
    cache = (2 * model.num_layers * batch * model.num_kv_heads * (context + new_tokens)
             * model.head_dim)
    widest = max(2 * model.intermediate_size,
                 (model.num_heads + 2 * model.num_kv_heads) * model.head_dim,
                 model.vocab_size)
    return BF16_BYTES * (cache + _ACTIVATION_COPIES * batch * new_tokens * widest)


def gib(num_bytes: float) -> str:
    return f"{num_bytes / 2**30:.1f} GiB"
