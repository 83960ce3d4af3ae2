"""`batchsim --help` and a command's --help load typer and rich only, not the heavy libraries
or the simulator (they cost seconds at every start), and still list every command."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("pandas", "matplotlib", "scipy", "pyarrow", "simpy", "batchsim.sim",
         "batchsim.experiment", "batchsim.calibration.fit")

# Runs the console script's own entry point in a fresh interpreter, then reports what it loaded.
_PROBE = """
import json, sys
sys.argv = ["batchsim", *json.loads(sys.argv[1])]
from batchsim.apps.entry import main
try:
    main()
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)))
"""


def _help(args: list[str]) -> tuple[str, list[str]]:
    """The help text `batchsim ARGS` prints, and the heavy modules it loaded."""
    done = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(args)], capture_output=True,
                          text=True, check=True, timeout=60)
    *help_text, modules_line = done.stdout.strip().splitlines()
    loaded = [name for name in json.loads(modules_line)
              if any(name == heavy or name.startswith(heavy + ".") for heavy in HEAVY)]
    return "\n".join(help_text), loaded


def test_the_top_help_loads_no_heavy_library_and_lists_every_command() -> None:
    text, loaded = _help(["--help"])  # builds every command, the calibrate group's too
    assert loaded == [], loaded
    for command in ("run", "sweep", "plan", "replay", "validate", "report", "calibrate",
                    "profiles", "engines", "models"):
        assert f" {command} " in text, command


def test_a_command_help_loads_no_heavy_library() -> None:
    text, loaded = _help(["validate", "--help"])
    assert loaded == [], loaded
    assert "Usage:" in text and "--set" in text
