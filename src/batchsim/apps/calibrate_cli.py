"""`batchsim calibrate`: measure operators, fit a profile, render the fidelity report."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from batchsim.apps.engine_fit.settings import MAX_ITERATIONS as ENGINE_FIT_ITERATIONS
from batchsim.apps.engine_fit.settings import PARAMETERS as ENGINE_COSTS
from batchsim.apps.error_types import ClassNames, is_one_of
from batchsim.apps.terminal import output_console, print_error
from batchsim.calibration.dev_data import DEV_DATA_PATH
from batchsim.calibration.measure.breakdown_defaults import (
    DEFAULT_DECODE_POINTS,
    DEFAULT_PREFILL_LENGTHS,
)

if TYPE_CHECKING:
    from batchsim.calibration.fit import FitResult

# Each command imports what it runs when it runs (pandas, scipy, torch): `batchsim --help`
# builds this group too and must stay quick.

calibrate_app = typer.Typer(
    help="Measure GPU operators, fit a hardware profile to them, report its error.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
# Named, so that catching them imports nothing (apps/error_types.py).
_ERRORS: ClassNames = (
    ("batchsim.calibration.measure.run", "MeasureError"),
    ("batchsim.calibration.tables", "MeasurementError"),
    ("batchsim.calibration.fit", "FitError"),
    ("batchsim.gpu.hardware", "HardwareError"),
    ("batchsim.gpu.model_spec", "ModelError"),
    ("batchsim.calibration.end_to_end_report", "ReplayTableError"),
)
# The held-out samples and our own measurements ship with the package (its measurements/).
DEFAULT_SAMPLES = Path(str(files("batchsim.hardware_profiles").joinpath("measurements")))


@contextmanager
def _one_line_errors() -> Iterator[None]:
    try:
        yield
    except Exception as err:
        if not is_one_of(err, _ERRORS):
            raise
        print_error(str(err))
        raise typer.Exit(2) from None


@calibrate_app.command("measure")
def measure_command(
    device: Annotated[str | None, typer.Option(help="cuda or cpu (default: cuda if seen).")] = None,
    model: Annotated[str, typer.Option(help="Model whose layer shapes to time.")] = "llama-3.1-8b",
    out: Annotated[Path, typer.Option(help="Folder for the CSVs and device.json.")] = Path(
        "measurements"
    ),
    quick: Annotated[bool, typer.Option(help="Small grid: seconds on a CPU (CI).")] = False,
    repeats: Annotated[int, typer.Option(min=1, help="Timed repeats (median).")] = 10,
    warmup: Annotated[int, typer.Option(min=0, help="Untimed runs first.")] = 3,
    forward_steps: Annotated[bool, typer.Option(
        help="Also time whole decode and prefill steps of the model (random weights).",
    )] = True,
    forward_compile: Annotated[bool, typer.Option(
        help="Time the whole steps again with layers through torch.compile (fused).",
    )] = False,
) -> None:
    """Time GEMMs, prefill and decode attention, a memory copy, all-reduce and whole steps."""
    from batchsim.calibration.measure.run import MeasureOptions, default_device, measure
    from batchsim.gpu.model_spec import load_model

    with _one_line_errors():
        options = MeasureOptions(
            device=device or default_device(), model=load_model(model), out=out, quick=quick,
            repeats=repeats, warmup=warmup, forward_steps=forward_steps,
            forward_compile=forward_compile,
        )
        for path in measure(options, progress=lambda line: typer.echo(line)):
            typer.echo(f"wrote {path}")


@calibrate_app.command("breakdown")
def breakdown_command(
    device: Annotated[str | None, typer.Option(help="cuda or cpu (default: cuda if seen).")] = None,
    model: Annotated[str, typer.Option(help="Dense model whose steps to profile.")] = (
        "llama-3.1-8b"
    ),
    out: Annotated[Path, typer.Option(help="Folder for the CSVs and breakdown.json.")] = Path(
        "measurements/breakdown"
    ),
    quick: Annotated[bool, typer.Option(
        help="A two-layer toy model instead of --model: seconds on a CPU (CI).",
    )] = False,
    prefill: Annotated[str, typer.Option(
        help="Prompt lengths of the prefill steps (batch 1), comma-separated; '' for none.",
    )] = ",".join(map(str, DEFAULT_PREFILL_LENGTHS)),
    decode: Annotated[str, typer.Option(
        help="Decode steps as BATCHxCONTEXT, comma-separated; '' for none.",
    )] = ",".join(f"{b}x{c}" for b, c in DEFAULT_DECODE_POINTS),
    compile_layers: Annotated[bool, typer.Option(
        "--compile/--no-compile", help="Profile every step again with layers through "
        "torch.compile (fused).",
    )] = False,
    runs: Annotated[int, typer.Option(min=1, help="Profiled steps (per-step means).")] = 5,
    warmup: Annotated[int, typer.Option(min=0, help="Unprofiled steps first.")] = 3,
) -> None:
    """Split whole forward steps' device time by kernel category (GEMM, attention, ...)."""
    from batchsim.calibration.measure.forward import quick_model
    from batchsim.calibration.measure.kernel_breakdown import BreakdownOptions, run_breakdown
    from batchsim.calibration.measure.run import default_device
    from batchsim.gpu.model_spec import load_model

    with _one_line_errors():
        options = BreakdownOptions(
            device=device or default_device(),
            model=quick_model() if quick else load_model(model), out=out,
            prefill_lengths=_int_list(prefill, "--prefill"),
            decode_points=_decode_points(decode), compiled=compile_layers, runs=runs,
            warmup=warmup,
        )
        result = run_breakdown(options, progress=lambda line: typer.echo(line))
    for path in result.paths:
        typer.echo(f"wrote {path}")
    if result.failed:  # every other step was still profiled and written
        typer.echo(f"{len(result.failed)} step(s) failed (listed in breakdown.json)", err=True)
        raise typer.Exit(1)


def _int_list(text: str, option: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise typer.BadParameter(f"expected comma-separated integers, got {text!r}",
                                 param_hint=option) from None
    if any(v < 1 for v in values):
        raise typer.BadParameter(f"lengths must be positive, got {text!r}", param_hint=option)
    return values


def _decode_points(text: str) -> tuple[tuple[int, int], ...]:
    points = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        match = re.fullmatch(r"(\d+)x(\d+)", part, re.IGNORECASE)
        if match is None or int(match[1]) < 1:
            raise typer.BadParameter(f"expected BATCHxCONTEXT such as 32x2048, got {part!r}",
                                     param_hint="--decode")
        points.append((int(match[1]), int(match[2])))
    return tuple(points)


@calibrate_app.command("fit")
def fit_command(
    gpu_spec: Annotated[str, typer.Option(help="Shipped profile name, profile or spec YAML.")],
    measurements: Annotated[Path, typer.Option(help="Folder of measurement CSVs.")],
    prefix: Annotated[
        str, typer.Option(help="Use only files named PREFIX* (one GPU of several).")
    ] = "",
    out: Annotated[Path | None, typer.Option(help="Profile YAML to write.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the held-out split.")] = 0,
    holdout: Annotated[float, typer.Option(help="Fraction of rows held out.")] = 0.2,
    sample_out: Annotated[
        Path | None, typer.Option(help="Also write a held-out sample of each table here.")
    ] = None,
    sample_rows: Annotated[int, typer.Option(min=1, help="Rows per sampled table.")] = 300,
    families: Annotated[
        str, typer.Option(help="Fit only these families (comma-separated, e.g. moe_fp4,"
                               "moe_mxfp4) into an already fitted profile, with its own seed "
                               "and held-out fraction; every other key stays.")
    ] = "",
) -> None:
    """Fit the roofline efficiencies to measurements; write the profile with its error."""
    from batchsim.calibration.fit import fit_families, fit_profile
    from batchsim.calibration.samples import write_samples
    from batchsim.calibration.spec import load_gpu_spec
    from batchsim.calibration.tables import load_measurements
    from batchsim.calibration.writer import write_profile
    from batchsim.gpu.hardware import load_gpu_profile

    with _one_line_errors():
        spec = load_gpu_spec(gpu_spec)
        tables = load_measurements(measurements, prefix)
        chosen = tuple(name.strip() for name in families.split(",") if name.strip())
        if chosen:
            result = fit_families(spec.profile, tables, chosen)
            calibration = result.gpu.calibration
            assert calibration is not None  # fit_families refuses an unfitted profile
            seed = calibration.seed
        else:
            result = fit_profile(spec.profile, tables, seed=seed, holdout_fraction=holdout)
        path = out or measurements / f"{spec.profile.name}.yaml"
        write_profile(path, spec.spec_text, result.gpu)
        load_gpu_profile(str(path))  # what we wrote must load
    _print_errors(result)
    typer.echo(f"wrote {path}")
    if sample_out is not None:
        for sample in write_samples(result.families, sample_out, rows=sample_rows, seed=seed):
            typer.echo(f"wrote {sample}")


@calibrate_app.command("report")
def report_command(
    out: Annotated[Path, typer.Option(help="Markdown file to write.")] = Path("docs/fidelity.md"),
    samples: Annotated[
        Path, typer.Option(help="Held-out samples, one folder per GPU profile.")
    ] = DEFAULT_SAMPLES,
    plots: Annotated[bool, typer.Option(help="Draw the predicted-vs-measured PNGs.")] = True,
    replay: Annotated[Path | None, typer.Option(
        help="A `batchsim replay` output folder of the development data "
             f"({DEV_DATA_PATH}, shipped engine profiles, default client): rewrite the "
             "end-to-end table from it first. Without it the section is rendered from the "
             "shipped table.")] = None,
) -> None:
    """Render the fidelity report of the shipped profiles (and their plots under images/)."""
    from batchsim.calibration.end_to_end_report import REPLAY_TABLE, write_replay_table
    from batchsim.calibration.moe_report import render_moe_before_after
    from batchsim.calibration.own_report import render_own_measurements
    from batchsim.calibration.report import render_fidelity
    from batchsim.calibration.tables import load_measurements
    from batchsim.gpu.hardware import list_gpu_profiles, load_gpu_profile

    with _one_line_errors():
        if replay is not None:
            # The replay package loads the simulator's API: only when a table is derived.
            from batchsim.apps.replay.fidelity_doc import replay_table

            write_replay_table(replay_table(replay), REPLAY_TABLE)
            typer.echo(f"wrote {REPLAY_TABLE}")
        profiles = [load_gpu_profile(name) for name in list_gpu_profiles()]
        image_dir = out.parent / "images"
        out.parent.mkdir(parents=True, exist_ok=True)
        own = render_own_measurements(samples)
        moe = render_moe_before_after(profiles, samples)
        out.write_text(render_fidelity(profiles, "images", own, moe), encoding="utf-8")
        typer.echo(f"wrote {out}")
        if not plots:
            return
        from batchsim.calibration.plots import plot_fidelity  # matplotlib only when drawing

        for gpu in profiles:
            folder = samples / gpu.name
            if gpu.calibration is None or not folder.is_dir():
                continue
            png = image_dir / f"fidelity-{gpu.name}.png"
            path = plot_fidelity(gpu, load_measurements(folder), png)
            typer.echo(f"wrote {path}")


def _print_errors(result: FitResult) -> None:
    from rich.table import Table

    from batchsim.calibration.report import target_met

    table = Table(title=escape(f"{result.gpu.name}: held-out error"))
    for column in ("family", "train rows", "held-out rows", "median", "p90", "target met"):
        table.add_column(column)
    for family, fit in result.families.items():
        error = fit.heldout
        table.add_row(
            family, f"{fit.train_rows:,}", f"{error.rows:,}", f"{error.median_ape:.1%}",
            f"{error.p90_ape:.1%}", target_met(result.gpu.name, family, error.median_ape,
                                               error.p90_ape),
        )
    output_console().print(table)


@calibrate_app.command("engine")
def engine_command(
    data: Annotated[list[Path], typer.Argument(
        help="Measured benchmarks (the CSV rows `batchsim replay` reads).")],
    out: Annotated[Path, typer.Option(help="The fitted engine profile YAML to write.")],
    engine: Annotated[str, typer.Option(
        help="Engine profile to start from: a shipped name or a profile YAML.")] = "vllm",
    backend: Annotated[str | None, typer.Option(
        help="Rows to fit on, by their backend column (default: the profile's name).")] = None,
    requests_per_user: Annotated[int, typer.Option(
        min=1, help="Requests each closed-loop user sends in a simulated case.")] = 22,
    warmup_per_user: Annotated[int, typer.Option(
        min=0, help="Of those, the first ones per user are warm-up, not measured.")] = 2,
    drained_warmup: Annotated[bool, typer.Option(
        "--drained-warmup/--continuous-warmup",
        help="Start the measured requests only once every warm-up request has ended, as "
             "AIPerf does.")] = True,
    jobs: Annotated[int, typer.Option(help="Worker processes.")] = os.cpu_count() or 1,
    serial_starts: Annotated[str, typer.Option(
        help="Serial front-end times (seconds, comma-separated) to start the fit from besides "
             "the profile's own costs; empty: only those.")] = "0.01",
    costs: Annotated[str, typer.Option(
        help="The costs to fit (comma-separated); the others keep the profile's values. "
             "Default: all of them.")] = ",".join(ENGINE_COSTS),
    iterations: Annotated[int, typer.Option(
        min=1, help="Gauss-Newton iterations at most, per start.")] = ENGINE_FIT_ITERATIONS,
) -> None:
    """Fit an engine profile's costs to measured benchmarks; a fifth of the cases is held out."""
    from batchsim.apps.engine_fit.cli import run_engine_fit_command
    from batchsim.apps.engine_fit.fit import EngineFitError, free_costs
    from batchsim.apps.replay.deployment import BenchmarkClient
    from batchsim.apps.replay.measured import ReplayError
    from batchsim.experiment.engine_profile import EngineProfileError

    try:
        try:
            client = BenchmarkClient(requests_per_user, warmup_per_user, drained_warmup)
            starts = [float(v) for v in serial_starts.split(",") if v.strip()]
        except ValueError as err:
            raise ReplayError(f"--warmup-per-user / --serial-starts: {err}") from None
        run_engine_fit_command(data, engine, backend, out, client, jobs=jobs,
                               serial_starts=starts, iterations=iterations,
                               free=free_costs([c.strip() for c in costs.split(",")
                                                if c.strip()]))
    except (EngineFitError, ReplayError, EngineProfileError) as err:
        print_error(str(err))
        raise typer.Exit(2) from None
