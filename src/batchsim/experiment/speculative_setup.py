"""Build an arm's speculative decoding from its `speculative:` settings: the drafter's cost
model, the memory its weights and KV take from the target's cache, and one `Speculation` per
replica (policies/speculative.py)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from batchsim.experiment.schema import BetaAcceptance, Experiment, SpeculativeConfig
from batchsim.gpu.cost_model import RooflineCostModel
from batchsim.gpu.hardware import GpuProfile
from batchsim.gpu.memory import MemoryPlan, weights_bytes_per_gpu
from batchsim.gpu.model_spec import ModelSpec, load_model
from batchsim.gpu.network import span_problem
from batchsim.policies.speculative import Acceptance, Speculation


class SpeculativeSetupError(ValueError):
    """The drafter cannot be built or does not fit beside the target."""


@dataclass(frozen=True, slots=True)
class Drafter:
    """The model that proposes tokens, on the replica's GPUs, and what it costs."""

    config: SpeculativeConfig
    cost: RooflineCostModel
    weights_bytes_per_gpu: int
    kv_bytes_per_token_per_gpu: float

    def seconds(self, contexts: np.ndarray) -> float:
        """k draft passes, one token per sequence each, over contexts growing by one: the
        first proposal follows the pending token, so pass j reads c + 1 + j cached tokens."""
        ones = np.ones_like(contexts)
        k = self.config.num_speculative_tokens
        return float(self.cost.decode_step_seconds(ones, contexts + 1, contexts.size, k).sum())

    def speculation(self, seed: int, arm_index: int, replica: int) -> Speculation:
        acceptance = self.config.acceptance
        concentration = acceptance.concentration if isinstance(acceptance, BetaAcceptance) \
            else None
        rate = acceptance.mean if isinstance(acceptance, BetaAcceptance) else acceptance.rate
        return Speculation(self.config.num_speculative_tokens, self.seconds,
                           Acceptance(rate, concentration), alpha_seed=(seed, 0x5BEC),
                           draw_seed=(seed, 0x5BEC, arm_index, replica))


def build_drafter(config: SpeculativeConfig, exp: Experiment, target: ModelSpec,
                  gpu: GpuProfile, base_dir: Path) -> Drafter:
    """The drafter of `config` beside the `target` model of `exp` on `gpu`s."""
    if exp.pipeline_parallel > 1:
        raise SpeculativeSetupError("speculative decoding is not modelled with "
                                    "pipeline_parallel > 1")
    tp = config.draft_tensor_parallel or exp.tensor_parallel
    problem = span_problem(gpu, tp, f"draft_tensor_parallel={tp}")
    if problem is not None:
        raise SpeculativeSetupError(problem)
    dtype = exp.dtype.weights
    if config.method == "mtp":
        module = mtp_module(target)
        # A MoE layer of the target's: its experts in the target's expert format.
        experts = exp.dtype.experts if module.moe is not None else None
        # The MTP layer shares the target's embedding and LM head: only its layer is extra.
        weights = (weights_bytes_per_gpu(replace(module, num_layers=2), tp, dtype,
                                         expert_dtype=experts)
                   - weights_bytes_per_gpu(module, tp, dtype, expert_dtype=experts))
    else:
        assert config.draft_model is not None  # checked by the schema
        module = load_model(config.draft_model, base_dir)
        if module.vocab_size != target.vocab_size:
            raise SpeculativeSetupError(
                f"draft_model: {module.name} has a vocabulary of {module.vocab_size} tokens "
                f"but {target.name} has {target.vocab_size}; a draft model must share the "
                "target's tokenizer")
        experts = None  # a separate checkpoint: stored as `dtype.weights` says
        weights = weights_bytes_per_gpu(module, tp, dtype)
    cost = RooflineCostModel(module, gpu, tensor_parallel=tp, weight_dtype=dtype,
                             kv_dtype=exp.dtype.kv_cache, expert_dtype=experts)
    return Drafter(config, cost, weights, cost.kv_bytes_per_token_per_gpu)


def mtp_module(model: ModelSpec) -> ModelSpec:
    """The target's multi-token-prediction module, priced as one more of its layers with the
    embedding and LM head (DeepSeek-V3's MTP module: one transformer block and projections).
    For a mixture-of-experts model that layer is a MoE layer, as DeepSeek-V3's is."""
    moe = None if model.moe is None else replace(model.moe, first_dense_layers=0)
    return replace(model, name=f"{model.name}-mtp", num_layers=1, moe=moe)


def blocks_beside_drafter(memory: MemoryPlan, drafter: Drafter) -> int:
    """KV blocks left for the target once the drafter's weights and its own KV (one draft
    token per target token) share the cache's memory."""
    free = memory.kv_cache_bytes_per_gpu - drafter.weights_bytes_per_gpu
    per_block = memory.block_bytes + memory.block_size * drafter.kv_bytes_per_token_per_gpu
    blocks = int(free // per_block)
    if blocks < 1:
        raise SpeculativeSetupError(
            f"the drafter's {drafter.weights_bytes_per_gpu / 1e9:.1f} GB of weights per GPU "
            f"leave no room for KV cache ({memory.kv_cache_bytes_per_gpu / 1e9:.1f} GB was free)")
    return blocks


def speculation_metrics(speculations: list[Speculation], busy_s: float) -> dict[str, object]:
    """What the arm's drafters proposed and the target accepted, over the whole run."""
    proposed = sum(s.proposed for s in speculations)
    accepted = sum(s.accepted for s in speculations)
    verifications = sum(s.verifications for s in speculations)
    kept = sum(s.emitted_extra for s in speculations)
    draft_s = sum(s.draft_s for s in speculations)
    return {
        "proposed_tokens": proposed,
        "accepted_tokens": accepted,
        "acceptance_rate": accepted / proposed if proposed else None,
        "tokens_per_verification": (verifications + kept) / verifications
        if verifications else None,
        "draft_share_of_busy_time": draft_s / busy_s if busy_s > 0 else None,
    }
