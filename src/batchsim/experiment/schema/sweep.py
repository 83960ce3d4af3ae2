"""One swept parameter of `batchsim sweep`: a dotted key and the values it takes."""

from typing import Any

from pydantic import Field

from batchsim.experiment.schema.common import ConfigModel


class SweepConfig(ConfigModel):
    """One swept parameter: a dotted key of this file and the values it takes."""

    parameter: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    """Dotted key, as `--set` takes it, e.g. `workload.arrivals.rate` or
    `policies.vllm.max_num_seqs`."""
    values: list[Any] = Field(min_length=1)
    """The values, in order; each is validated as that key's type."""
