"""Run every shipped experiment with two checkouts' code and compare their output files byte
for byte (docs/performance.md: a change meant only to be faster must not move a digit).

    git worktree add /tmp/base HEAD
    python scripts/check_byte_identical.py /tmp/base .          # every experiment
    python scripts/check_byte_identical.py /tmp/base . --only quickstart fairness
    git worktree remove --force /tmp/base

Each checkout runs `batchsim run` on its own copy of each file in experiments/ (and
experiments/lessons/) from its own root, with PYTHONPATH set to its own src/, so each uses its
own code and hardware profiles. Compared: every output file but the report page (whose
markup is not a result): summary.json, requests.parquet, timeseries.parquet, sweep.parquet and
the rest. A summary names its trace by its path, which differs between checkouts: when the
bytes differ only by the checkout's root, that is reported as such. Capacity plans are skipped
(hundreds of runs each), as is an experiment over `--timeout` seconds or missing from the base.
Exit status 1 when any compared file differs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NOT_COMPARED = {"report.html"}
RUN = "from batchsim.apps.entry import main; main()"


def experiments(root: Path) -> list[Path]:
    """The shipped experiment files, relative to the checkout."""
    found = [*sorted((root / "experiments").glob("*.yaml")),
             *sorted((root / "experiments" / "lessons").glob("*.yaml"))]
    return [path.relative_to(root) for path in found]


def is_plan(path: Path) -> bool:
    text = path.read_text(encoding="utf-8")
    return any(line.startswith("plan:") for line in text.splitlines())


def run(checkout: Path, experiment: Path, out: Path, timeout: float) -> float | None:
    """Seconds `batchsim run` took, or None past `timeout`; raises on a failed run."""
    env = {**os.environ, "PYTHONPATH": str(checkout / "src")}
    started = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-c", RUN, "run", str(experiment), "--out",
                               str(out)], cwd=checkout, env=env, timeout=timeout,
                              capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        raise RuntimeError(f"{checkout}: {experiment}: exit {done.returncode}\n{done.stderr}")
    return time.perf_counter() - started


def outputs(folder: Path) -> set[Path]:
    return {p.relative_to(folder) for p in folder.rglob("*")
            if p.is_file() and p.name not in NOT_COMPARED}


def compare(base: Path, new: Path, base_root: Path, new_root: Path) -> list[str]:
    """One line per file that is not the same bytes in both folders."""
    problems = []
    for name in sorted(outputs(base) | outputs(new)):
        a, b = base / name, new / name
        if not a.exists() or not b.exists():
            problems.append(f"{name}: only in {'new' if b.exists() else 'base'}")
            continue
        old_bytes, new_bytes = a.read_bytes(), b.read_bytes()
        if old_bytes == new_bytes:
            continue
        if old_bytes.replace(str(base_root).encode(), b"<root>") == \
                new_bytes.replace(str(new_root).encode(), b"<root>"):
            problems.append(f"{name}: identical but for the checkout's path (not a difference)")
            continue
        problems.append(f"{name}: DIFFERS")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("base", type=Path, help="the reference checkout (e.g. a HEAD worktree)")
    parser.add_argument("new", type=Path, help="the checkout under test")
    parser.add_argument("--only", nargs="*", default=None,
                        help="experiment names (file stems) to run; default all")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="skip an experiment whose run takes longer (seconds, per checkout)")
    parser.add_argument("--work", type=Path, default=None, help="where outputs go (kept)")
    args = parser.parse_args()
    base_root, new_root = args.base.resolve(), args.new.resolve()
    work = args.work or Path(tempfile.mkdtemp(prefix="byte_identical_"))
    differs = False
    for experiment in experiments(new_root):
        label = str(experiment)
        if args.only is not None and experiment.stem not in args.only:
            continue
        if not (base_root / experiment).exists():
            print(f"{label}: skipped (not in the base checkout)", flush=True)
            continue
        if is_plan(new_root / experiment):
            print(f"{label}: skipped (a capacity plan)", flush=True)
            continue
        folder = work / experiment.with_suffix("")
        seconds = [run(root, experiment, folder / side, args.timeout)
                   for root, side in ((base_root, "base"), (new_root, "new"))]
        if None in seconds:
            print(f"{label}: skipped (over {args.timeout:g} s)", flush=True)
            continue
        problems = compare(folder / "base", folder / "new", base_root, new_root)
        compared = len(outputs(folder / "new"))
        differs |= any("DIFFERS" in p or "only in" in p for p in problems)
        took = ", ".join(f"{s:.0f} s" for s in seconds if s is not None)
        status = "identical" if not problems else "; ".join(problems)
        print(f"{label}: {compared} files, {status} ({took})", flush=True)
    print(f"outputs in {work}")
    return 1 if differs else 0


if __name__ == "__main__":
    sys.exit(main())
