"""`batchsim` command line: thin wrappers that call the library and report errors in one line."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

from batchsim.apps.calibrate_cli import calibrate_app
from batchsim.apps.error_types import ClassNames, is_one_of
from batchsim.apps.terminal import output_console, print_error, print_plain
from batchsim.apps.version import installed_version

if TYPE_CHECKING:
    from batchsim.apps import api
    from batchsim.experiment.runner import ArmResult
    from batchsim.experiment.schema import Experiment
    from batchsim.gpu.model_spec import ModelSpec

# Each command imports the library it calls when it runs: `batchsim --help` and every
# command's --help load only typer and rich, not pandas, scipy or the simulator.

app = typer.Typer(
    help="Discrete-event simulator of LLM-serving batching policies.",
    no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(calibrate_app, name="calibrate")
# What a user can cause: one line and exit 2, never a traceback (apps/error_types.py: named,
# so that catching them imports nothing).
_USER_ERRORS: ClassNames = (
    ("batchsim.experiment.loader", "ConfigError"),
    ("batchsim.experiment.policy_factory", "ArmError"),
    ("batchsim.experiment.engine_profile", "EngineProfileError"),
    ("batchsim.experiment.speculative_setup", "SpeculativeSetupError"),
    ("batchsim.gpu.hardware", "HardwareError"),
    ("batchsim.gpu.dtypes", "DtypeError"),
    ("batchsim.gpu.model_spec", "ModelError"),
    ("batchsim.gpu.memory", "ModelDoesNotFitError"),
    ("batchsim.workloads.errors", "WorkloadError"),
    ("batchsim.apps.report.results", "ReportError"),
    ("batchsim.apps.executors", "ExecutorError"),
    ("batchsim.apps.replay.measured", "ReplayError"),
    ("batchsim.experiment.output_folder", "OutputFolderError"),
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"batchsim {installed_version()}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True,
        help="Print the version and exit.")] = False,
) -> None:
    del version  # acted on by its eager callback; each command has its own options


@contextmanager
def _user_errors(source: Path | None) -> Iterator[None]:
    """Print a user error as one line and exit 2, never a traceback."""
    try:
        yield
    except Exception as err:
        if not is_one_of(err, _USER_ERRORS):
            raise
        message = str(err)
        if source is not None and str(source) not in message:
            message = f"{source}: {message}"
        print_error(message)
        raise typer.Exit(2) from None


FileArg = Annotated[Path, typer.Argument(help="Experiment YAML file.")]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a key: dotted.key=value (repeatable)."),
]
OutOpt = Annotated[Path | None, typer.Option("--out", help="Output folder.")]


@app.command()
def run(
    file: FileArg,
    out: OutOpt = None,
    set_: SetOpt = None,
    trace: Annotated[bool, typer.Option(
        "--trace", help="Write each arm's timeline, traces/<arm>.json (output.trace: true)."),
    ] = False,
) -> None:
    """Simulate every policy arm of FILE on the same traffic and write the results."""
    if trace:  # the last override, so it wins over a --set of the same key
        set_ = [*(set_ or ()), "output.trace=true"]
    from batchsim.apps.console import print_summary
    from batchsim.experiment.loader import load_experiment
    from batchsim.experiment.output_folder import hold_folder, output_folder
    from batchsim.experiment.outputs import write_results
    from batchsim.experiment.preflight import check_before_run

    console = output_console()
    with _user_errors(file):
        exp, base_dir = load_experiment(file, set_ or ())
    if exp.sweep is not None or exp.replications > 1:
        _sweep(file, set_ or [], [], out, jobs=DEFAULT_JOBS, executor="local",
               address=None)
        return
    with _user_errors(file):
        out_dir = output_folder(out, exp)  # checked before simulating, not after
        # validate's checks, before "running" is printed: a deployment or a trace that cannot
        # be used fails here in one line (they cost milliseconds, and run repeats them).
        check_before_run(exp, base_dir)
        with hold_folder(out_dir):  # a second run into it is refused now, not after simulating
            results = _simulate(exp, base_dir, console)
            print_summary(results.result, console)
            # The report is drawn in the staging folder, so it arrives with the results.
            written = write_results(results.result, out_dir, finish=_draw_report)
    for path in written:
        print_plain(console, f"wrote {path}")
    _print_report_written(out_dir, console)


def _simulate(exp: Experiment, base_dir: Path, console: Console) -> api.Results:
    from batchsim.apps import api

    print_plain(console, f"running {exp.name} ({len(exp.policies)} arms)")
    with console.status("starting") as status:

        def arm_done(arm: ArmResult) -> None:
            print_plain(console, f"  {arm.name}: simulated in {arm.wall_s:.1f} s wall")

        def progress(arm_name: str, now: float) -> None:
            status.update(escape(f"{arm_name}: simulated {now:,.0f} s"))

        return api.run(exp, base_dir=base_dir, on_arm_done=arm_done, on_progress=progress)


def _draw_report(results_dir: Path) -> Path:
    from batchsim.apps.report.build import write_report  # matplotlib only when drawing

    return write_report(results_dir)


def _print_report_written(results_dir: Path, console: Console) -> None:
    from batchsim.apps.report.build import PLOTS_DIR, REPORT_FILE

    print_plain(console, f"wrote {results_dir / REPORT_FILE} (and its PNGs in "
                         f"{results_dir / PLOTS_DIR})")


@app.command()
def report(
    results_dir: Annotated[Path, typer.Argument(
        help="A folder written by `batchsim run`, `batchsim sweep` or `batchsim plan`.")],
) -> None:
    """Rebuild RESULTS_DIR/report.html and its plots from the files there, without simulating."""
    from batchsim.apps.plan.rebuild import is_plan_folder, rebuild_plan_report
    from batchsim.apps.report.rebuild import rebuild_report  # matplotlib only when drawing

    console = output_console()
    if is_plan_folder(results_dir):  # a plan's page and front, from its plan.json
        with _user_errors(results_dir):
            page = rebuild_plan_report(results_dir)
        print_plain(console, f"wrote {page} (and {page.parent / 'pareto.png'})")
        return
    with _user_errors(results_dir):
        rebuild_report(results_dir)  # under the folder's lock, moved in whole
    _print_report_written(results_dir, console)


# Options shared by the commands that run many simulations (sweep, plan).
DEFAULT_JOBS = os.cpu_count() or 1
JobsOpt = Annotated[int, typer.Option(help="Worker processes (local executor).")]
ExecutorOpt = Annotated[str, typer.Option(help="local | ray")]
AddressOpt = Annotated[str | None, typer.Option(
    help="Ray cluster address (default: start a local Ray).")]

ParamOpt = Annotated[
    list[str] | None,
    typer.Option("--param", help="A swept key: dotted.key=v1,v2,... (repeat to form a grid)."),
]


@app.command()
def sweep(
    file: FileArg,
    param: ParamOpt = None,
    replications: Annotated[int | None, typer.Option(
        help="Runs per point with independent seeds (default: the file's).")] = None,
    jobs: JobsOpt = DEFAULT_JOBS,
    executor: ExecutorOpt = "local",
    address: AddressOpt = None,
    out: OutOpt = None,
    set_: SetOpt = None,
) -> None:
    """Run FILE at every point of a sweep (--param, or the file's `sweep:`), resumably."""
    overrides = list(set_ or [])
    if replications is not None:
        overrides.append(f"replications={replications}")
    _sweep(file, overrides, param or [], out, jobs=jobs, executor=executor, address=address)


def _sweep(file: Path, overrides: list[str], params: list[str], out: Path | None, *,
           jobs: int, executor: str, address: str | None) -> None:
    from batchsim.apps.sweep.cli import run_sweep_command  # the sweep machinery only when sweeping

    with _user_errors(file):
        run_sweep_command(file, overrides, params, out, jobs=jobs, executor=executor,
                          address=address)


@app.command()
def plan(
    file: FileArg,
    jobs: JobsOpt = DEFAULT_JOBS,
    executor: ExecutorOpt = "local",
    address: AddressOpt = None,
    out: OutOpt = None,
    set_: SetOpt = None,
) -> None:
    """Answer FILE's `plan:` (max rate under the SLO, cheapest configuration, what-ifs)."""
    from batchsim.apps.plan.cli import run_plan_command  # the planner only when planning

    with _user_errors(file):
        run_plan_command(file, list(set_ or []), out, jobs=jobs, executor=executor,
                         address=address)


@app.command()
def replay(
    files: Annotated[list[Path], typer.Argument(
        help="Measured benchmarks: CSV files of aggregate rows (engine, model, GPU, layout, "
             "isl/osl/concurrency, measured mean TTFT and TPOT), or the JSON results of "
             "`vllm bench serve --save-result --save-detailed`, SGLang's bench_serving "
             "(.json / .jsonl) and AIPerf's profile_export.jsonl.")],
    out: Annotated[Path, typer.Option(help="Folder for replay.json and replay.parquet.")] = Path(
        "results/replay"),
    requests_per_user: Annotated[int, typer.Option(
        min=1, help="Requests each closed-loop user sends in a simulated case.")] = 22,
    warmup_per_user: Annotated[int, typer.Option(
        min=0, help="Of those, the first ones per user are warm-up, not measured.")] = 2,
    drained_warmup: Annotated[bool, typer.Option(
        "--drained-warmup/--continuous-warmup",
        help="Start the measured requests only once every warm-up request has ended, as "
             "AIPerf does.")] = True,
    engine: Annotated[list[str] | None, typer.Option(
        help="Engine profile: NAME_OR_PATH for every case, or BACKEND=NAME_OR_PATH for one "
             "backend's cases (repeatable). Default: each case's own engine.")] = None,
    metadata: Annotated[list[str] | None, typer.Option(
        help="KEY=VALUE for what a JSON result does not say (gpu, tensor_parallel, "
             "pipeline_parallel, quantization, engine, model; for AIPerf records also "
             "concurrency, request_rate); repeatable.")] = None,
    jobs: JobsOpt = DEFAULT_JOBS,
) -> None:
    """Simulate measured serving benchmarks case by case and report the error of each."""
    from batchsim.apps.replay.cli import run_replay_command  # only when replaying

    with _user_errors(files[0]):
        run_replay_command(files, out, requests_per_user, warmup_per_user, engine or [],
                           jobs=jobs, metadata=metadata or [], drained_warmup=drained_warmup)


@app.command()
def validate(file: FileArg, set_: SetOpt = None) -> None:
    """Check FILE (and the model and hardware it names) and print the resolved config."""
    from batchsim.experiment.loader import dump_resolved, load_experiment
    from batchsim.experiment.output_folder import output_folder
    from batchsim.experiment.preflight import check_before_run

    with _user_errors(file):
        exp, base_dir = load_experiment(file, set_ or ())
        check_before_run(exp, base_dir)
        if exp.sweep is not None or exp.replications > 1:
            _check_sweep_points(file, list(set_ or []), exp)
        if exp.plan is not None:  # what `plan` would refuse before its first run
            from batchsim.apps.plan.checks import check_plan

            check_plan(file, list(set_ or []), exp)
        output_folder(None, exp)  # `run` checks it too, before simulating
    typer.echo(dump_resolved(exp), nl=False)


def _check_sweep_points(file: Path, overrides: list[str], exp: Experiment) -> None:
    """Every point of the file's sweep, checked as `run` (which sweeps it) checks them."""
    from batchsim.apps.sweep.cli import sweep_axes
    from batchsim.apps.sweep.runs import plan_sweep

    plan_sweep(file, overrides, sweep_axes(exp, []), exp.replications, Path("."))


@app.command()
def profiles() -> None:
    """List the shipped GPU hardware profiles, their calibration and held-out error."""
    from batchsim.calibration.summary import calibration_summary
    from batchsim.gpu.hardware import list_gpu_profiles, load_gpu_profile

    for name in list_gpu_profiles():
        gpu = load_gpu_profile(name)
        typer.echo(f"{name:16s} {gpu.memory_bytes / 1e9:6.1f} GB  {calibration_summary(gpu)}")


@app.command()
def engines() -> None:
    """List the shipped serving-engine profiles (the experiment key `engine`)."""
    from batchsim.experiment.engine_profile import list_engine_profiles, load_engine_profile

    for name in list_engine_profiles():
        typer.echo(f"{name:8s} {load_engine_profile(name).describe()}")


@app.command()
def models() -> None:
    """List the model library."""
    from batchsim.gpu.model_spec import library_model_names, load_model

    for name in library_model_names():
        spec = load_model(name)
        active = spec.active_params()
        kind = "dense" if spec.moe is None else f"MoE, {active / 1e9:.1f} B active"
        attention = "; MLA" if spec.mla is not None else ""
        if spec.layer_kinds is not None:
            attention += f"; layers {spec.layer_kinds.describe()}"
        typer.echo(f"{name:16s} {spec.num_params / 1e9:6.1f} B params ({kind}{attention})  "
                   f"KV {spec.kv_bytes_per_token(2) / 1024:.0f} KiB/token (bf16)"
                   f"{_bounded_cache(spec)}  "
                   f"max_position_embeddings {spec.max_position_embeddings}")


def _bounded_cache(spec: ModelSpec) -> str:
    """A hybrid model's cache that stops growing: its window's KV and its state."""
    kinds = spec.layer_kinds
    if kinds is None:
        return ""
    parts = []
    if kinds.sliding:
        parts.append(f" + {spec.windowed_kv_bytes_per_token(2) / 1024:.0f} KiB/token up to "
                     f"{kinds.window} tokens")
    if kinds.linear:
        parts.append(f" + {spec.state_bytes_per_sequence() / 2**20:.1f} MiB state/sequence")
    return "".join(parts)


def main() -> None:  # pragma: no cover - console-script entry
    try:
        app()
    except Exception as err:
        if not is_one_of(err, (("batchsim.sim.engine", "SimulationStalled"),)):
            raise
        print_error(str(err), label="internal error")
        raise SystemExit(3) from None
