"""Where and how results are written."""

from batchsim.experiment.schema.common import ConfigModel, Positive


class OutputConfig(ConfigModel):
    """Where and how results are written."""

    dir: str | None = None
    """Result folder (`~` is your home folder); null means `results/<name>`. Checked before
    anything is simulated: it must be a folder that can be written."""
    timeseries_bin_s: Positive = 1.0
    """Width in seconds of the bins of the time series (batch size, KV use, queue length)."""
