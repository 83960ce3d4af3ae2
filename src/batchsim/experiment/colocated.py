"""Build the simulation of a colocated arm: its replicas' policies (with speculative decoding
when the arm asks for it) behind the experiment's router."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from batchsim.experiment.autoscaling import autoscaler_of, autoscaler_settings
from batchsim.experiment.deployment import Deployment
from batchsim.experiment.kv_tier_setup import TierSizing
from batchsim.experiment.policy_factory import build_policy
from batchsim.experiment.routing import build_router
from batchsim.experiment.schema import Arm, ChunkedPrefillArm, ContinuousArm, Experiment
from batchsim.experiment.schema.slo_classes import shed_thresholds
from batchsim.experiment.speculative_setup import (
    SpeculativeSetupError,
    blocks_beside_drafter,
    build_drafter,
    speculation_metrics,
)
from batchsim.policies.speculative import Speculation
from batchsim.sim.engine import Simulation
from batchsim.sim.gateway import install_gateway
from batchsim.sim.recorder import RunRecord
from batchsim.sim.traffic import Traffic


@dataclass(slots=True)
class ColocatedArm:
    simulation: Simulation
    kv_blocks_per_replica: int
    speculations: list[Speculation] = field(default_factory=list)

    def add_metrics(self, metrics: dict[str, object], record: RunRecord) -> None:
        """The KV blocks the policies had (fewer beside a drafter), and the speculative-decoding
        counts of an arm that speculates."""
        layout = metrics.get("deployment")
        if isinstance(layout, dict):
            layout["kv_blocks_per_replica"] = self.kv_blocks_per_replica
            layout["kv_tokens_per_replica"] = (self.kv_blocks_per_replica
                                               * record_block_size(self.simulation))
        if self.speculations:
            busy_s = record.steps.totals().busy_s
            metrics["speculative"] = speculation_metrics(self.speculations, busy_s)


def build_colocated(exp: Experiment, arm_exp: Experiment, arm: Arm, index: int,
                    deployment: Deployment, traffic: Traffic, base_dir: Path,
                    max_model_len: int, on_progress: Callable[[float], None] | None,
                    ) -> ColocatedArm:
    """`arm` on `arm_exp`'s layout (`deployment`), fed `traffic`."""
    speculative = arm.speculative if isinstance(arm, ContinuousArm | ChunkedPrefillArm) \
        else None
    num_blocks = deployment.num_blocks
    speculations: list[Speculation] = []
    if speculative is not None:
        if arm_exp.pipeline_parallel > 1:
            raise SpeculativeSetupError("speculative decoding is not modelled with "
                                        "pipeline_parallel > 1")
        # The draft passes run inside the target's engine step, which pays the engine's
        # per-step overhead once: they pay only the GPU profile's per-pass priors.
        drafter = build_drafter(speculative, arm_exp, deployment.model, deployment.kernel_gpu,
                                base_dir)
        if exp.kv_cache.num_blocks is None:  # a set block count is taken as given
            num_blocks = blocks_beside_drafter(deployment.memory, drafter)
        speculations = [drafter.speculation(exp.seed, index, replica)
                        for replica in range(arm_exp.replicas)]
    policies = [
        build_policy(arm, index, num_blocks=num_blocks, block_size=exp.kv_cache.block_size,
                     swap_blocks=deployment.swap_blocks, max_model_len=max_model_len,
                     prefix_caching=exp.kv_cache.prefix_caching, kv_cache=exp.kv_cache,
                     speculation=speculations[replica] if speculations else None,
                     sequence_blocks=deployment.memory.sequence_blocks,
                     tier_sizing=tier_sizing(exp, deployment))
        for replica in range(arm_exp.replicas)
    ]
    shared_queue = exp.router == "shared_queue"
    simulation = Simulation(policies, deployment.cost_model, traffic,
                            build_router(exp.router, deployment.cost_model),
                            shared_queue=shared_queue, max_model_len=max_model_len,
                            fast_path=exp.simulation.fast_path, on_progress=on_progress,
                            frontend=deployment.engine.frontend(arm_exp.replicas),
                            autoscaler=autoscaler_settings(autoscaler_of(arm)))
    gateway = getattr(arm, "gateway", None)
    if gateway is not None:
        install_gateway(simulation, shed_thresholds(gateway, exp.workload))
    return ColocatedArm(simulation, num_blocks, speculations)


def tier_sizing(exp: Experiment, deployment: Deployment) -> TierSizing:
    """A KV block's bytes per GPU, and the layers a layer-wise tier load overlaps."""
    layers = deployment.model.num_layers if exp.kv_cache.tier_load == "layerwise" else 1
    return TierSizing(deployment.memory.block_bytes, layers)


def record_block_size(simulation: Simulation) -> int:
    return simulation.replicas[0].policy.pool.block_size
