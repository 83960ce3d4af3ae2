"""A lesson's PNG, which carries the digest of the rows it was drawn from, so a test can tell
whether the figure and the page's numbers come from the same run."""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure
from PIL import Image

_KEY = "Description"
_PREFIX = "batchsim lesson rows sha256 "


def save_figure(figure: Figure, path: Path, digest: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # No Software/date chunks, so the same rows draw the same bytes.
    figure.savefig(path, format="png", metadata={"Software": None, _KEY: _PREFIX + digest})


def figure_digest(path: Path) -> str | None:
    """The digest a lesson figure was saved with; None for a PNG without one."""
    with Image.open(path) as image:
        text = str(image.info.get(_KEY, ""))
    return text.removeprefix(_PREFIX) if text.startswith(_PREFIX) else None
