"""Speed benchmarks (docs/design.md §11, docs/performance.md): simulated requests and tokens
per wall second, CPU seconds (of the whole run and of the simulation alone), peak memory, each
beside its target.

    python -m benchmarks.run              # all
    python -m benchmarks.run a c          # some
    python -m benchmarks.run a --set simulation.fast_path=false
    python -m benchmarks.run d            # CPU per request on 1 and on 64 replicas
    python -m benchmarks.run e            # against sched-sim (the `bench` extra; not in "all")
    python -m benchmarks.run f            # the CLI's start (`batchsim --help`)
    python -m benchmarks.run g            # a cold capacity plan, two workers

Each benchmark (and each case of (d)) runs in its own process so that its peak memory (max RSS)
is its own.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from tempfile import TemporaryDirectory

HERE = Path(__file__).resolve().parent
BENCHMARKS = {
    "a": ("Azure conversation hour, Llama-3.1-8B on H100",
          HERE.parent / "experiments" / "azure_conv.yaml"),
    "b": ("1,000,000 Poisson requests, ragged lengths", HERE / "poisson_1m.yaml"),
    "c": ("closed loop 256 x (1k prompt, 8k output), Llama-3.1-70B TP4",
          HERE / "closed_loop_70b.yaml"),
}
# Issue #23's targets, printed beside the measured values.
TARGETS = {
    "a": "target: simulation <= 1 s CPU",
    "b": "target: <= 30 s CPU, <= 1,024 MB",
}

# (d): the same traffic per replica on one replica and on many.
SCALING = HERE / "replica_scaling.yaml"
SCALING_REPLICAS = (1, 64)
SCALING_ROUTERS = ("round_robin", "least_outstanding")
SCALING_RATE_PER_REPLICA = 10.0  # requests per second, as in the file
# The same requests in every case (a longer run on fewer replicas), so that the fixed costs
# of a run weigh the same in each CPU-per-request figure.
SCALING_REQUESTS = 32_000
SCALING_TARGET = 1.3  # CPU per request at 64 replicas over one replica, round robin


def measure(experiment: Path, overrides: list[str]) -> dict[str, float]:
    """Run one experiment in this process and report its speed (called in a child)."""
    from batchsim.experiment.loader import load_experiment
    from batchsim.experiment.runner import run_experiment

    exp, base_dir = load_experiment(experiment, overrides)
    started, cpu_started = time.perf_counter(), time.process_time()
    with _simulation_cpu() as simulation_cpu:
        result = run_experiment(exp, base_dir)
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    requests = sum(len(arm.requests) for arm in result.arms)
    tokens = sum(int(arm.requests["output_tokens"][arm.requests["finished"]].sum())
                 for arm in result.arms)
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "simulation_cpu_s": simulation_cpu[0],
        "requests": requests,
        "output_tokens": tokens,
        "requests_per_s": requests / wall,
        "tokens_per_s": tokens / wall,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


@contextmanager
def _simulation_cpu() -> Iterator[list[float]]:
    """CPU seconds spent inside `Simulation.run` (every arm's, summed; a subclass's run that
    calls the base's counts once), as a one-element list filled while the block runs."""
    from batchsim.sim.engine import Simulation

    spent = [0.0]
    original = Simulation.run
    depth = [0]

    def timed(self: Simulation) -> object:
        depth[0] += 1
        started = time.process_time()
        try:
            return original(self)
        finally:
            depth[0] -= 1
            if depth[0] == 0:
                spent[0] += time.process_time() - started

    Simulation.run = timed  # type: ignore[method-assign,assignment]
    try:
        yield spent
    finally:
        Simulation.run = original  # type: ignore[method-assign]


def _child(path: Path, overrides: list[str]) -> dict[str, float]:
    command = [sys.executable, "-m", "benchmarks.run", "--child", str(path)]
    for override in overrides:
        command += ["--set", override]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    stats: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return stats


def _scaling(overrides: list[str]) -> None:
    """(d): CPU seconds per simulated request for each router, on each replica count, and
    the ratio of the largest count to one replica."""
    print(f"(d) {SCALING_REQUESTS:,} Poisson requests, {SCALING_RATE_PER_REPLICA:g}/s per "
          f"replica, on {' and on '.join(map(str, SCALING_REPLICAS))} replicas:", flush=True)
    for router in SCALING_ROUTERS:
        per_request = []
        for replicas in SCALING_REPLICAS:
            case = [f"replicas={replicas}", f"router={router}",
                    f"workload.arrivals.rate={SCALING_RATE_PER_REPLICA * replicas}",
                    f"workload.num_requests={SCALING_REQUESTS}"]
            stats = _child(SCALING, case + overrides)
            per_request.append(stats["cpu_s"] / stats["requests"])
            print(f"    {router}, {replicas} replica(s): {stats['cpu_s']:.2f} s CPU "
                  f"(simulation {stats['simulation_cpu_s']:.2f} s), {stats['requests']:,} "
                  f"requests, {per_request[-1] * 1e6:.0f} us CPU per request", flush=True)
        target = (f", target <= {SCALING_TARGET:g}x" if router == "round_robin"
                  else " (reads every replica's load: no target)")
        print(f"    {router}: {SCALING_REPLICAS[-1]} replicas / 1 replica, CPU per request: "
              f"{per_request[-1] / per_request[0]:.2f}x{target}", flush=True)


# (f) and (g): whole commands, timed from outside.
CLI = [sys.executable, "-c", "from batchsim.apps.entry import main; main()"]
HELP_TARGET_S = 1.0
PLAN = HERE.parent / "experiments" / "capacity_plan.yaml"
PLAN_JOBS = 2
PLAN_TARGET_S = 60.0


def _timed_command(arguments: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds (its worker processes included) of one batchsim command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([*CLI, *arguments], check=True, capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _cli_start() -> None:
    """(f): `batchsim --help`, the median of five."""
    walls = sorted(_timed_command(["--help"])[0] for _ in range(5))
    print(f"(f) batchsim --help: {walls[2]:.2f} s wall (median of 5, {walls[0]:.2f}-"
          f"{walls[-1]:.2f}); target <= {HELP_TARGET_S:g} s", flush=True)


def _capacity_plan() -> None:
    """(g): `batchsim plan experiments/capacity_plan.yaml` into a new folder."""
    with TemporaryDirectory(prefix="batchsim-bench-plan-") as folder:
        wall, cpu = _timed_command(["plan", str(PLAN), "--jobs", str(PLAN_JOBS), "--out",
                                    str(Path(folder) / "plan")])
    print(f"(g) batchsim plan {PLAN.relative_to(HERE.parent)} --jobs {PLAN_JOBS}, a new "
          f"folder: {wall:.1f} s wall ({cpu:.1f} s CPU); target <= {PLAN_TARGET_S:g} s wall",
          flush=True)


def _versus_sched_sim() -> None:
    """(e): requests per CPU second against sched-sim 0.2.1 on the matched chatbot workload
    (benchmarks/vs_sched_sim.py); skipped when sched-sim is not installed."""
    from benchmarks import vs_sched_sim

    if not vs_sched_sim.have_sched_sim():
        print("(e) skipped: sched-sim is not installed (pip install -e '.[bench]'); "
              "python -m benchmarks.vs_sched_sim measures batchsim alone", flush=True)
        return
    print(f"(e) matched chatbot workload against sched-sim 0.2.1, "
          f"{vs_sched_sim.REQUESTS:,} requests (medians of 3; target >= "
          f"{vs_sched_sim.TARGET:g}x sched-sim's requests per CPU second):", flush=True)
    vs_sched_sim.compare(reps=3, prefix="    ")


WHOLE_COMMANDS = {"f": _cli_start, "g": _capacity_plan}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("which", nargs="*", default=[*sorted(BENCHMARKS), "d", "f", "g"])
    parser.add_argument("--set", action="append", default=[], dest="overrides")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(Path(args.child), args.overrides)))
        return
    for key in args.which:
        if key == "d":
            _scaling(args.overrides)
            continue
        if key == "e":  # its own fixed workload: --set does not apply
            _versus_sched_sim()
            continue
        if key in WHOLE_COMMANDS:  # the shipped files as they are: --set does not apply
            WHOLE_COMMANDS[key]()
            continue
        title, path = BENCHMARKS[key]
        stats = _child(path, args.overrides)
        target = f"; {TARGETS[key]}" if key in TARGETS else ""
        print(f"({key}) {title}: {stats['wall_s']:.2f} s wall ({stats['cpu_s']:.2f} s CPU, "
              f"simulation {stats['simulation_cpu_s']:.2f} s), {stats['requests']:,} requests, "
              f"{stats['requests_per_s']:,.0f} req/s, {stats['tokens_per_s']:,.0f} tokens/s, "
              f"peak RSS {stats['peak_rss_mb']:,.0f} MB{target}", flush=True)


if __name__ == "__main__":
    main()
