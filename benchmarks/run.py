"""Speed benchmarks (docs/design.md §11): simulated requests and tokens per wall second, peak
memory.

    python -m benchmarks.run              # all
    python -m benchmarks.run a c          # some
    python -m benchmarks.run a --set simulation.fast_path=false

Each benchmark runs in its own process so that its peak memory (max RSS) is its own.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHMARKS = {
    "a": ("Azure conversation hour, Llama-3.1-8B on H100",
          HERE.parent / "experiments" / "azure_conv.yaml"),
    "b": ("1,000,000 Poisson requests, ragged lengths", HERE / "poisson_1m.yaml"),
    "c": ("closed loop 256 x (1k prompt, 8k output), Llama-3.1-70B TP4",
          HERE / "closed_loop_70b.yaml"),
}


def measure(experiment: Path, overrides: list[str]) -> dict[str, float]:
    """Run one experiment in this process and report its speed (called in a child)."""
    from batchsim.experiment.loader import load_experiment
    from batchsim.experiment.runner import run_experiment

    exp, base_dir = load_experiment(experiment, overrides)
    started, cpu_started = time.perf_counter(), time.process_time()
    result = run_experiment(exp, base_dir)
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    requests = sum(len(arm.requests) for arm in result.arms)
    tokens = sum(int(arm.requests["output_tokens"][arm.requests["finished"]].sum())
                 for arm in result.arms)
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "requests": requests,
        "output_tokens": tokens,
        "requests_per_s": requests / wall,
        "tokens_per_s": tokens / wall,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("which", nargs="*", default=sorted(BENCHMARKS))
    parser.add_argument("--set", action="append", default=[], dest="overrides")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(Path(args.child), args.overrides)))
        return
    for key in args.which:
        title, path = BENCHMARKS[key]
        command = [sys.executable, "-m", "benchmarks.run", "--child", str(path)]
        for override in args.overrides:
            command += ["--set", override]
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        stats = json.loads(out.strip().splitlines()[-1])
        print(f"({key}) {title}: {stats['wall_s']:.2f} s wall ({stats['cpu_s']:.2f} s CPU), "
              f"{stats['requests']:,} requests, "
              f"{stats['requests_per_s']:,.0f} req/s, {stats['tokens_per_s']:,.0f} tokens/s, "
              f"peak RSS {stats['peak_rss_mb']:,.0f} MB", flush=True)


if __name__ == "__main__":
    main()
