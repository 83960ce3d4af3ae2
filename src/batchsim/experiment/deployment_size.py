"""How many GPUs a deployment takes: the one place that counts them."""

from __future__ import annotations

from batchsim.experiment.schema import Arm, DisaggregatedArm, Experiment


def gpus_per_replica(exp: Experiment) -> int:
    """GPUs of one replica: `tensor_parallel` GPUs in each of `pipeline_parallel` stages.

    Expert parallelism and data-parallel attention reuse the stage's GPUs, so they add none.
    """
    return exp.tensor_parallel * exp.pipeline_parallel


def arm_experiment(exp: Experiment, arm: Arm) -> Experiment:
    """The experiment as `arm` runs it: its `deployment:` keys replace the top-level ones."""
    if isinstance(arm, DisaggregatedArm):
        return exp
    overrides = {} if arm.deployment is None else arm.deployment.overrides()
    if arm.autoscaler is not None:  # the pool has a slot for every replica it may run
        overrides["replicas"] = arm.autoscaler.max_replicas
    return exp.model_copy(update=overrides) if overrides else exp


def colocated_gpus(exp: Experiment, arm: Arm) -> int:
    """GPUs a colocated arm runs on: its replicas times the GPUs of each."""
    arm_exp = arm_experiment(exp, arm)
    return arm_exp.replicas * gpus_per_replica(arm_exp)
