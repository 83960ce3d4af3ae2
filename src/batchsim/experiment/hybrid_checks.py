"""What a hybrid-attention model's arms may not ask for (docs/design.md §2, hybrid models).

The hybrid pool (sim/kv_hybrid.py) gives each sequence a fixed set of blocks for its
sliding-window KV and linear-attention state beside its growing full-attention blocks. The
features below count blocks as one per `block_size` tokens, or share blocks between
sequences, and would miscount those fixed blocks, so `validate` and `run` refuse them here
rather than simulate them wrongly.
"""

from __future__ import annotations

from batchsim.experiment.policy_factory import arm_prefix_caching
from batchsim.experiment.schema import ChunkedPrefillArm, ContinuousArm, Experiment
from batchsim.experiment.schema.kv_allocation import arm_kv_allocation
from batchsim.gpu.model_spec import ModelError, ModelSpec


def check_hybrid_arms(exp: Experiment, model: ModelSpec) -> None:
    """Raise ModelError, naming the key, for what a hybrid model's arms cannot run."""
    if not model.is_hybrid or model.layer_kinds is None:
        return
    kinds = f"{model.name} mixes attention kinds ({model.layer_kinds.describe()})"
    for index, arm in enumerate(exp.policies):
        where = f"policies[{index}]"
        if not isinstance(arm, ContinuousArm | ChunkedPrefillArm):
            raise ModelError(f"{where}.kind: {kinds}; only continuous and chunked_prefill arms "
                             f"are modelled for it, got {arm.kind!r}")
        if arm_prefix_caching(arm, exp.kv_cache.prefix_caching):
            raise ModelError(f"{where}.prefix_caching: {kinds}; prefix caching is not "
                             "modelled for hybrid models (a hit also needs the window's KV and "
                             "the recurrent state), expected false")
        if arm_kv_allocation(arm, exp.kv_cache) != "paged":
            raise ModelError(f"{where}.kv_allocation: {kinds}; expected paged")
        if arm.preemption == "swap":
            raise ModelError(f"{where}.preemption: {kinds}; swapping its fixed window and "
                             "state blocks is not modelled, expected recompute")


__all__ = ["check_hybrid_arms"]
