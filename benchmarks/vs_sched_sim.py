"""Issue #23's side-by-side: batchsim against sched-sim 0.2.1 on a matched chatbot workload.

    python -m benchmarks.vs_sched_sim             # three repetitions of each measurement
    python -m benchmarks.vs_sched_sim --reps 5
    python -m benchmarks.run e                    # the same, as benchmark (e)

Both simulators run the workload of `benchmarks/matched_chatbot.yaml`: Poisson arrivals at
20 requests/s, 20,000 requests, prompts int(triangular(30, 400, mode 120)) and outputs
int(triangular(20, 300, mode 90)) tokens, chunked prefill with a 512-token budget, Llama-3-8B on
one H100 priced by a bare roofline. Two measurements, each in a fresh child process, repeated
and reported as the median of simulated requests per CPU second (user + system):

- simulation alone: batchsim's Python API (`batchsim.apps.api.run`, which loads the file,
  draws the traffic, simulates and builds the tables, and writes nothing) against sched-sim's
  `Simulator.submit_workload` and `Simulator.run` (its requests generated before the clock
  starts), timed with `time.process_time` inside the child;
- the whole command line: `batchsim run FILE --out DIR` (results, plots and report) against
  `sched-sim run ... --output FILE.json` (its summary and JSON), timed by the child's
  `resource.getrusage(RUSAGE_CHILDREN)`.

The target (issue #23) is batchsim at >= 10x sched-sim's requests per CPU second in both.
sched-sim is the `bench` extra (`pip install -e '.[bench]'`); without it only batchsim's part
runs. docs/performance.md records the results and what could not be matched exactly.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.util import find_spec
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXPERIMENT = HERE / "matched_chatbot.yaml"
CORPUS = HERE / "matched_chatbot_lengths.csv"

RATE = 20.0  # requests per second
REQUESTS = 20_000
SEED = 42  # sched-sim's default seed; the corpus is drawn from the same stream
PROMPT = (30, 400, 120)  # triangular (low, high, mode), as sched-sim's chatbot preset
OUTPUT = (20, 300, 90)
TOKEN_BUDGET = 512
MAX_SEQS = 32
TARGET = 10.0  # batchsim / sched-sim, requests per CPU second

# sched-sim's H100 preset carries Llama-3-70B; this is that GPU with the Llama-3-8B model of
# its A100 preset (the fields of its HardwareProfile), so that both price the same pair.
SCHED_SIM_HARDWARE = {
    "name": "NVIDIA H100 SXM5 (80GB), Llama-3-8B",
    "vram_gb": 80.0,
    "memory_bandwidth_gb_s": 3350.0,
    "fp16_tflops": 989.0,
    "tensor_core_efficiency": 0.55,
    "kernel_launch_overhead_ms": 0.03,
    "pcie_bandwidth_gb_s": 128.0,
    "network_bandwidth_gbps": 400.0,
    "model_name": "Meta-Llama-3-8B-Instruct",
    "parameter_count_billions": 8.03,
    "num_layers": 32,
    "hidden_size": 4096,
    "num_heads": 32,
    "num_kv_heads": 8,
    "head_dim": 128,
    "dtype_bytes": 2,
}

INSTALL_HINT = ("sched-sim is not installed: pip install -e '.[bench]' (sched-sim==0.2.1) "
                "to compare; measuring batchsim alone")


def have_sched_sim() -> bool:
    try:
        return find_spec("sched_sim") is not None
    except (ImportError, ValueError):
        return False


def draw_stream(count: int, seed: int = SEED) -> tuple[list[float], list[tuple[int, int]]]:
    """Arrival times and (prompt, output) lengths of the first `count` requests, drawn from
    Python's `random` seeded with `seed` in the order sched-sim's generator draws them: per
    request an exponential gap at RATE, then the prompt, then the output (each the integer
    part of a triangular draw, at least 1). Also yields the arrival of request `count` + 1."""
    rng = random.Random(seed)
    arrivals: list[float] = []
    lengths: list[tuple[int, int]] = []
    now = 0.0
    while len(arrivals) <= count:
        now += rng.expovariate(RATE)
        arrivals.append(now)
        prompt = max(1, int(rng.triangular(*PROMPT)))
        output = max(1, int(rng.triangular(*OUTPUT)))
        lengths.append((prompt, output))
    return arrivals, lengths[:count]


def write_corpus(path: Path = CORPUS) -> None:
    """The lengths corpus that `matched_chatbot.yaml` replays in order (rewritten only when
    its content would change)."""
    _, lengths = draw_stream(REQUESTS)
    text = "prompt_tokens,output_tokens\n" + "".join(f"{p},{o}\n" for p, o in lengths)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def sched_sim_duration() -> float:
    """The arrival window that makes sched-sim's generator yield exactly REQUESTS requests:
    halfway between the last arrival kept and the next one."""
    arrivals, _ = draw_stream(REQUESTS)
    return (arrivals[REQUESTS - 1] + arrivals[REQUESTS]) / 2


# --- children: one measurement each, in a fresh process ------------------------------------

def _child_batchsim_simulation() -> dict[str, float]:
    from batchsim.apps import api
    from benchmarks.run import _simulation_cpu

    started = time.process_time()
    with _simulation_cpu() as kernel:
        results = api.run(EXPERIMENT)
    cpu = time.process_time() - started
    requests = sum(len(arm.requests) for arm in results.result.arms)
    return {"cpu_s": cpu, "kernel_cpu_s": kernel[0], "requests": requests}


def _child_sched_sim_simulation(hardware_json: str) -> dict[str, float]:
    from sched_sim.core.event_engine import Simulator
    from sched_sim.hardware.presets import get_hardware_profile
    from sched_sim.schedulers.factory import create_scheduler
    from sched_sim.workloads.generator import generate_workload

    hardware = get_hardware_profile(hardware_json)
    requests = generate_workload(rate_req_per_s=RATE, duration_s=sched_sim_duration(),
                                 workload_type="chatbot", pattern="poisson", seed=SEED)
    # The same lengths, in the same order, as the corpus batchsim replays.
    if [(r.prompt_tokens, r.output_tokens) for r in requests] != draw_stream(REQUESTS)[1]:
        raise SystemExit("sched-sim's generator no longer draws the corpus's lengths")
    started = time.process_time()
    scheduler = create_scheduler("chunked", hardware, token_budget=TOKEN_BUDGET,
                                 max_batch_size=MAX_SEQS)
    simulator = Simulator(hardware, scheduler)
    simulator.submit_workload(requests)
    metrics = simulator.run()
    cpu = time.process_time() - started
    return {"cpu_s": cpu, "requests": len(requests),
            "completed": metrics.completed_requests,
            "iterations": metrics.total_iterations}


def _run_child(*args: str) -> dict[str, float]:
    command = [sys.executable, "-m", "benchmarks.vs_sched_sim", "--child", *args]
    out = subprocess.run(command, check=True, capture_output=True, text=True,
                         cwd=HERE.parent).stdout
    stats: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return stats


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _script(name: str) -> str:
    """A console script of this environment (beside the interpreter, else on PATH)."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise SystemExit(f"{name}: console script not found")
    return found


def _timed_command(command: list[str]) -> float:
    before = _children_cpu()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   cwd=HERE.parent)
    return _children_cpu() - before


def _batchsim_cli(work: Path) -> dict[str, float]:
    out = work / "batchsim-out"
    shutil.rmtree(out, ignore_errors=True)
    cpu = _timed_command([_script("batchsim"), "run", str(EXPERIMENT), "--out", str(out)])
    return {"cpu_s": cpu, "requests": REQUESTS}


def _sched_sim_cli(work: Path, hardware_json: str) -> dict[str, float]:
    out = work / "sched-sim.json"
    out.unlink(missing_ok=True)
    cpu = _timed_command([
        _script("sched-sim"), "run", "--scheduler", "chunked", "--workload", "chatbot",
        "--hardware", hardware_json, "--rate", repr(RATE),
        "--duration", repr(sched_sim_duration()), "--pattern", "poisson",
        "--token-budget", str(TOKEN_BUDGET), "--seed", str(SEED), "--no-gantt",
        "--output", str(out)])
    requests = json.loads(out.read_text())["total_requests"]
    return {"cpu_s": cpu, "requests": requests}


# --- the comparison ------------------------------------------------------------------------

def _rates(samples: list[dict[str, float]]) -> list[float]:
    """Simulated requests per CPU second of each repetition."""
    return [s["requests"] / s["cpu_s"] for s in samples]


def _spread(rates: list[float]) -> str:
    return f" ({min(rates):,.0f}-{max(rates):,.0f})" if len(rates) > 1 else ""


def _line(label: str, ours: list[float], peer: list[float] | None) -> str:
    """One measurement's verdict: the medians, their ratio and the target."""
    text = (f"{label}: batchsim {statistics.median(ours):,.0f}{_spread(ours)} requests per "
            "CPU second")
    if not peer:
        return text + "; sched-sim not measured"
    ratio = statistics.median(ours) / statistics.median(peer)
    verdict = "met" if ratio >= TARGET else "unmet"
    return (f"{text}, sched-sim {statistics.median(peer):,.0f}{_spread(peer)}: {ratio:.1f}x "
            f"(target >= {TARGET:g}x: {verdict})")


def compare(reps: int = 3, prefix: str = "") -> dict[str, float]:
    """Run both measurements `reps` times each (alternating the two simulators) and print
    one line per measurement, the median and the range of each; returns the medians."""
    peer = have_sched_sim()
    if not peer:
        print(prefix + INSTALL_HINT, flush=True)
    write_corpus()
    with tempfile.TemporaryDirectory(prefix="vs-sched-sim-") as tmp:
        work = Path(tmp)
        hardware_json = str(work / "h100_llama3_8b.json")
        Path(hardware_json).write_text(json.dumps(SCHED_SIM_HARDWARE))
        ours_sim, ours_cli, peer_sim, peer_cli = [], [], [], []
        details: list[dict[str, float]] = []
        for _ in range(reps):
            ours_sim.append(_run_child("batchsim"))
            if peer:
                peer_sim.append(_run_child("sched-sim", hardware_json))
                details.append(peer_sim[-1])
            ours_cli.append(_batchsim_cli(work))
            if peer:
                peer_cli.append(_sched_sim_cli(work, hardware_json))
    rates = {"batchsim_simulation": _rates(ours_sim), "batchsim_cli": _rates(ours_cli)}
    if peer:
        rates |= {"sched_sim_simulation": _rates(peer_sim), "sched_sim_cli": _rates(peer_cli)}
        cpu = statistics.median(s["cpu_s"] for s in peer_sim)
        print(f"{prefix}sched-sim simulated {int(details[0]['requests']):,} requests "
              f"({int(details[0]['completed']):,} completed, "
              f"{int(details[0]['iterations']):,} steps); simulation {cpu:.2f} s CPU (median)",
              flush=True)
    cpu_ours = statistics.median(s["cpu_s"] for s in ours_sim)
    kernel = statistics.median(s["kernel_cpu_s"] for s in ours_sim)
    print(f"{prefix}batchsim simulated {REQUESTS:,} requests; simulation {cpu_ours:.2f} s CPU "
          f"(Simulation.run {kernel:.2f} s), whole CLI "
          f"{statistics.median(s['cpu_s'] for s in ours_cli):.2f} s CPU (medians of {reps})",
          flush=True)
    print(prefix + _line("simulation alone", rates["batchsim_simulation"],
                         rates.get("sched_sim_simulation")), flush=True)
    print(prefix + _line("whole CLI", rates["batchsim_cli"], rates.get("sched_sim_cli")),
          flush=True)
    return {key: statistics.median(values) for key, values in rates.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=3, help="repetitions (median reported)")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, *rest = args.child
        stats = (_child_batchsim_simulation() if kind == "batchsim"
                 else _child_sched_sim_simulation(*rest))
        print(json.dumps(stats))
        return
    compare(args.reps)


if __name__ == "__main__":
    main()
