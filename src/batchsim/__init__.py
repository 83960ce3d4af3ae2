"""batchsim: a discrete-event simulator of LLM-serving batching policies.

``batchsim.run("experiments/quickstart.yaml").summary`` runs an experiment from Python
(docs/how-to/python-api.md). The public names load on first use, so importing the kernel
(``batchsim.sim``) never pulls in pandas, pydantic or the experiment layer.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what the lazy names are, for type checkers and editors
    from batchsim.apps.api import (
        ArmError,
        ConfigError,
        EngineProfileError,
        Experiment,
        HardwareError,
        ModelDoesNotFitError,
        ModelError,
        Results,
        WorkloadError,
        load_experiment,
        run,
    )

    __version__: str

__all__ = [
    "ArmError",
    "ConfigError",
    "EngineProfileError",
    "Experiment",
    "HardwareError",
    "ModelDoesNotFitError",
    "ModelError",
    "Results",
    "WorkloadError",
    "__version__",
    "load_experiment",
    "run",
]

_API = "batchsim.apps.api"  # every public name lives there


def __getattr__(name: str) -> Any:
    if name == "__version__":
        value: Any = importlib.import_module("batchsim.apps.version").installed_version()
    elif name in __all__:
        value = getattr(importlib.import_module(_API), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
