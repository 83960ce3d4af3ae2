"""Settings of the simulation itself (how it advances time, never what it computes)."""

from batchsim.experiment.schema.common import ConfigModel


class SimulationConfig(ConfigModel):
    """How the simulation advances time (never what it computes)."""

    fast_path: bool = True
    """Advance a decode-only batch over many steps in one event when nothing can change it in
    between (exact: the same results as stepping one by one). False steps one by one."""
