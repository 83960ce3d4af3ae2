"""Where and how results are written."""

from typing import Annotated

from pydantic import Field, field_validator

from batchsim.experiment.schema.common import ConfigModel, Positive
from batchsim.experiment.schema.trace import TraceConfig, trace_flag_or_mapping


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
    trace: bool | TraceConfig = False
    """Write each arm's timeline, `<arm>/trace.json`, for Perfetto or chrome://tracing: every
    engine step per replica, and each request's queued, prefill, decode, preempted and (when
    disaggregated) transfer spans. `true` keeps the first 100,000 steps and 1,000 requests;
    a mapping bounds it otherwise (`batchsim run --trace` is `true`)."""

    @field_validator("trace", mode="before")
    @classmethod
    def _trace_is_a_flag_or_a_mapping(cls, value: object) -> object:
        return trace_flag_or_mapping(value)

    def trace_config(self) -> TraceConfig | None:
        """The timeline's bounds; None when no timeline is written."""
        if isinstance(self.trace, TraceConfig):
            return self.trace
        return TraceConfig() if self.trace else None
