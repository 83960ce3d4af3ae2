"""YAML documents read with libyaml's parser where PyYAML has it."""

from __future__ import annotations

from typing import Any

import yaml

# libyaml's scanner and parser with PyYAML's own safe constructor and resolver: the same
# Python objects as `yaml.safe_load`, and a run's set-up no longer waits on the pure-Python
# parser (docs/performance.md, item 25).
_FAST_LOADER: type[Any] | None = getattr(yaml, "CSafeLoader", None)


def safe_load(text: str) -> Any:
    """`yaml.safe_load(text)`. An invalid document is parsed again by the pure-Python loader,
    so that its `yaml.YAMLError` (and message) is the one `yaml.safe_load` raises."""
    if _FAST_LOADER is None:
        return yaml.safe_load(text)
    try:
        return yaml.load(text, Loader=_FAST_LOADER)  # a safe loader (CSafeLoader)
    except yaml.YAMLError:
        return yaml.safe_load(text)


def load_mapping(text: str, where: str, error: type[ValueError], what: str) -> dict[str, Any]:
    """A YAML document that must be a mapping; anything else raises `error` naming `where`."""
    try:
        document = safe_load(text)
    except yaml.YAMLError as exc:
        raise error(f"{where}: not valid YAML ({exc})") from None
    if not isinstance(document, dict):
        raise error(f"{where}: expected a mapping of {what}")
    return document
