"""Service-level objectives: the latency targets behind goodput and SLO attainment."""

from batchsim.experiment.schema.common import ConfigModel, Positive


class SLOConfig(ConfigModel):
    """Service-level objectives; a request meets the SLO when it meets every one given.
    They define goodput and SLO attainment; absent ones are not checked."""

    ttft_p99_s: Positive | None = None
    """Target p99 time to first token, in seconds."""
    tpot_p99_s: Positive | None = None
    """Target p99 time per output token, in seconds."""
    e2e_p99_s: Positive | None = None
    """Target p99 end-to-end latency, in seconds."""
