"""Does a configuration fit its GPUs? Checked before running, so that a candidate whose model
does not fit (or whose tensor parallelism does not divide the heads) is reported as such in
the ranked table instead of stopping the plan."""

from __future__ import annotations

from pathlib import Path

from batchsim.experiment.deployment import resolve_deployment
from batchsim.experiment.disaggregation import resolve_pool
from batchsim.experiment.policy_factory import ArmError
from batchsim.experiment.schema import DisaggregatedArm, Experiment
from batchsim.gpu.memory import ModelDoesNotFitError
from batchsim.gpu.model_spec import ModelError, load_model

_DOES_NOT_FIT = (ModelDoesNotFitError, ModelError)


def fit_problem(exp: Experiment, base_dir: Path) -> str | None:
    """Why the model does not fit this deployment (memory, or heads not divisible by the
    tensor parallelism), or None. Other errors (an unknown GPU, a bad file) are raised: they
    are mistakes in the file, not properties of a candidate."""
    try:
        deployment = resolve_deployment(exp, base_dir)
        model = load_model(exp.model, base_dir)
        for index, arm in enumerate(exp.policies):
            if isinstance(arm, DisaggregatedArm):
                for role in ("prefill", "decode"):
                    resolve_pool(exp, arm, index, role, model, base_dir,
                                 deployment.engine)
    except _DOES_NOT_FIT as err:
        return str(err)
    except ArmError as err:  # a pool's error, wrapped with the pool's key
        if isinstance(err.__cause__, _DOES_NOT_FIT):
            return str(err)
        raise
    return None
