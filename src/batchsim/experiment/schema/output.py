"""Where and how results are written."""

from typing import Annotated

from pydantic import Field

from batchsim.experiment.schema.common import ConfigModel, Positive


class OutputConfig(ConfigModel):
    """Where and how results are written."""

    dir: str | None = None
    """Result folder (`~` is your home folder); null means `results/<name>`. Checked before
    anything is simulated: it must be a folder that can be written."""
    timeseries_bin_s: Annotated[Positive, Field(ge=1e-3)] = 1.0
    """Width in seconds of the bins of the time series (batch size, KV use, queue length); at
    least 0.001 (one bin is kept per width of simulated time). A run that would need more
    than 1,000,000 bins has neighbouring bins merged pairwise until it fits, so its bins are
    this width times a power of two (`t_start_s` says where each starts)."""
