"""The timeline file of each arm (`output.trace`)."""

from collections.abc import Sequence
from typing import Self

from pydantic import model_validator

from batchsim.experiment.schema.common import AtLeastOne, ConfigModel, NonNegative, rule_error


class TraceConfig(ConfigModel):
    """What each arm's `trace.json` keeps (docs/reference/outputs.md, "trace.json"); `trace:
    true` keeps these defaults."""

    window_s: tuple[NonNegative, NonNegative] | None = None
    """`[start, end]` in seconds of simulated time: the steps that overlap it and the requests
    that arrive in it are kept; null keeps the whole run."""
    max_requests: AtLeastOne = 1_000
    """At most this many requests, the earliest arrivals in the window first."""
    max_steps: AtLeastOne = 100_000
    """At most this many engine steps, over all replicas (and as many preemptions); the file
    says up to when the steps it holds are complete."""

    @model_validator(mode="after")
    def _window_in_order(self) -> Self:
        if self.window_s is not None and self.window_s[0] >= self.window_s[1]:
            raise rule_error("window_s", f"expected [start, end] with start < end (got "
                                         f"[{self.window_s[0]}, {self.window_s[1]}])")
        return self


def check_trace_file_names(arm_names: Sequence[str], trace: bool | TraceConfig) -> None:
    """Each arm's timeline is `traces/<arm>.json`: with `output.trace` on, an arm name must
    make one file name there (no path separator, not hidden)."""
    if trace is False:
        return
    for index, name in enumerate(arm_names):
        if any(mark in name for mark in ("/", "\\", "\0")) or name.startswith("."):
            raise rule_error(f"policies.{index}.name",
                             f"with output.trace on, an arm name must be a file name (no / "
                             f"or \\, not starting with '.'), got {name!r}")


def trace_flag_or_mapping(value: object) -> object:
    """The `trace` key before validation: a mapping is validated as `TraceConfig` alone, so
    that its errors name its own keys rather than every form `trace` takes."""
    if isinstance(value, dict):
        return TraceConfig.model_validate(value)
    if isinstance(value, bool | TraceConfig):
        return value
    raise ValueError("expected true, false or a mapping {window_s: [start, end], "
                     "max_requests: N, max_steps: N}")
