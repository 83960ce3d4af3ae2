"""Every check `run` makes before it simulates, without simulating: `validate` runs it, so a
file that `validate` passes does not fail in `run` before the first step."""

from __future__ import annotations

from pathlib import Path

from batchsim.experiment.deployment import keyed_error, resolve_deployment
from batchsim.experiment.deployment_size import arm_experiment
from batchsim.experiment.disaggregation import link_spec, resolve_pool
from batchsim.experiment.policy_factory import effective_token_budget
from batchsim.experiment.schema import ContinuousArm, DisaggregatedArm, Experiment
from batchsim.experiment.speculative_setup import SpeculativeSetupError, build_drafter
from batchsim.experiment.traffic import build_traffic
from batchsim.gpu.model_spec import ModelError


def check_before_run(exp: Experiment, base_dir: Path) -> None:
    """Resolve the deployment of the experiment and of every arm as `run` does (model, GPU,
    engine, memory plan, layouts, token budgets); raise the error `run` would."""
    deployment = resolve_deployment(exp, base_dir)
    # The traffic reads every trace, corpus and rate file the workload names and checks each
    # row, as run does first: a missing or malformed file fails here, not after "running".
    build_traffic(exp.workload, seed=exp.seed, base_dir=base_dir,
                  max_model_len=deployment.max_model_len)
    for index, arm in enumerate(exp.policies):
        if isinstance(arm, DisaggregatedArm):
            prefill, decode = (resolve_pool(exp, arm, index, role, deployment.model, base_dir,
                                            deployment.engine) for role in ("prefill", "decode"))
            link_spec(exp, arm, index, deployment.model, prefill, decode)
            continue
        arm_exp = arm_experiment(exp, arm)
        arm_deployment = deployment
        if arm_exp is not exp:
            with keyed_error(f"policies.{index}.deployment", ValueError):
                arm_deployment = resolve_deployment(arm_exp, base_dir)
        if isinstance(arm, ContinuousArm):
            effective_token_budget(arm, deployment.max_model_len, index)
        speculative = getattr(arm, "speculative", None)
        if speculative is not None:  # the drafter's model and layout, as the arm builds it
            with keyed_error(f"policies.{index}.speculative", ModelError, SpeculativeSetupError):
                build_drafter(speculative, arm_exp, deployment.model, arm_deployment.kernel_gpu,
                              base_dir)
