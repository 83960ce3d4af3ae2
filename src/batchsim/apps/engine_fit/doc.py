"""Write the shipped engine profiles' fit table into docs/background/engines.md.

    python -m batchsim.apps.engine_fit.doc docs/background/engines.md
"""

from __future__ import annotations

import sys
from pathlib import Path

from batchsim.apps.engine_fit.record import fidelity_table
from batchsim.experiment.engine_profile import list_engine_profiles, load_engine_profile

START, END = "<!-- engine-fidelity-table -->", "<!-- /engine-fidelity-table -->"


def shipped_table() -> str:
    names = [name for name in list_engine_profiles() if name != "none"]
    return fidelity_table([load_engine_profile(name) for name in names])


def with_table(text: str, table: str) -> str:
    """`text` with the part between the markers replaced by `table`."""
    head, _, rest = text.partition(START)
    _, _, tail = rest.partition(END)
    if not rest or END not in rest:
        raise ValueError(f"the page has no {START} ... {END} markers")
    return f"{head}{START}\n{table}{END}{tail}"


def main() -> None:
    path = Path(sys.argv[1])
    path.write_text(with_table(path.read_text(encoding="utf-8"), shipped_table()),
                    encoding="utf-8")


if __name__ == "__main__":
    main()
