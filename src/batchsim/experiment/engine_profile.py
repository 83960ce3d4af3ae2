"""Serving-engine profiles: the costs a roofline cannot see and an engine's scheduling defaults.

A profile is a YAML file (shipped ones in `hardware_profiles/engines/`, or a path). Its
`costs` reach the layers below as plain numbers: the per-step overheads replace the GPU
profile's priors in the cost model, the front-end latency goes to the simulation. Its
`scheduler` is the engine's own batching configuration, which `batchsim replay` runs; an
experiment's arms keep the knobs they name. docs/background/engines.md explains each term.
"""

from __future__ import annotations

import dataclasses
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator

from batchsim.experiment.schema.common import (
    AtLeastOne,
    ConfigModel,
    NonNegative,
    NonNegativeInt,
)
from batchsim.gpu.graph_padding import GraphPadding
from batchsim.gpu.hardware import GpuProfile
from batchsim.gpu.yaml_load import load_mapping
from batchsim.sim.disaggregated import HandoffFirstToken
from batchsim.sim.frontend import Frontend

NO_ENGINE = "none"
_PACKAGE, _FOLDER = "batchsim.hardware_profiles", "engines"


class EngineProfileError(ValueError):
    """An engine profile that cannot be found or read; the message names file and key."""


class ReserveRule(ConfigModel):
    """Admission that reserves KV for the decode still to come (SGLang's `new_token_ratio`,
    TensorRT-LLM's GUARANTEED_NO_EVICT with a ratio of 1)."""

    new_token_ratio: float = Field(gt=0, le=1)
    """Share of a request's remaining `max_tokens` reserved when it is admitted."""
    min_new_token_ratio: float = Field(gt=0, le=1)
    """Floor the ratio decays to (equal to `new_token_ratio`: a fixed ratio)."""
    decay_steps: AtLeastOne
    """Steps over which the ratio decays to its floor."""
    admitted_share: float | None = Field(default=None, gt=0, le=1)
    """Share of its remaining `max_tokens` a request reserves in the step that admits it (SGLang:
    1); null: the ratio."""
    remaining_cap: AtLeastOne | None = None
    """Cap on a request's remaining-output estimate (SGLang: 4,096); null: none."""


class EngineScheduler(ConfigModel):
    """The engine's own batching: what it runs when the user sets nothing."""

    policy: Literal["chunked_prefill", "continuous"]
    """`chunked_prefill`: prompts are split to fit the token budget; `continuous`: a prompt is
    prefilled whole in one step (beside running decodes)."""
    token_budget: AtLeastOne
    """Most tokens computed in one step (vLLM `max_num_batched_tokens`, SGLang
    `chunked_prefill_size`, TensorRT-LLM `max_num_tokens`)."""
    max_num_seqs: AtLeastOne
    """Most requests running at once (a benchmark that launched the engine with its own max
    batch replaces it: `batchsim replay` takes a table row's `batch_size`)."""
    reserved_seq_slots: NonNegativeInt = 0
    """Slots of the max batch the engine keeps for itself, so at most `max_num_seqs` minus
    these requests run (TensorRT-LLM: one, docs/background/engines.md says why)."""
    mixed_prefill: bool = True
    """Prefill chunks share steps with decodes (false: a prefill step runs alone, as SGLang
    does without `--enable-mixed-chunk`)."""
    reserve: ReserveRule | None = None
    """Admission reserving KV for future decode; null admits whenever the prompt fits and
    preempts later (vLLM)."""
    block_size: AtLeastOne
    """Tokens per KV-cache block (page)."""
    gpu_memory_utilization: float = Field(gt=0, le=1)
    """Share of GPU memory the engine takes for weights, activations and KV cache."""


class CudaGraphs(ConfigModel):
    """The engine's CUDA-graph batch sizes (gpu/graph_padding.py): a step of at most the
    largest size computes its layers at the next captured size up."""

    sizes: list[AtLeastOne] = Field(min_length=1)
    """Captured sizes in tokens per step, strictly ascending."""
    steps: Literal["any", "decode"] = "any"
    """Which steps replay a graph: `any` step of at most the largest size (vLLM's piecewise
    graphs), or `decode` steps only, every sequence computing one token (SGLang,
    TensorRT-LLM); the others run at their own size."""

    @field_validator("sizes")
    @classmethod
    def _ascending(cls, sizes: list[int]) -> list[int]:
        GraphPadding(tuple(sizes))  # its ValueError says what is wrong
        return sizes

    def padding(self) -> GraphPadding:
        return GraphPadding(tuple(self.sizes), decode_only=self.steps == "decode")


class EngineCosts(ConfigModel):
    """Costs outside the roofline's GPU kernels."""

    frontend_latency_s: NonNegative = 0.0
    """Per request, paid by each independently: network, HTTP handling, the hand-off to the
    scheduler and streaming the tokens back; seen by the client in TTFT and E2E."""
    frontend_serial_s: NonNegative = 0.0
    """Per request, paid one request at a time (one API-server process tokenises and sets up
    requests in turn): requests sent together reach the scheduler one after another."""
    frontend_stream_s: NonNegative = 0.0
    """Per streamed output message (one request's tokens from one step), paid one at a time by
    each replica's API-server process: the output-token rate it caps (sim/token_stream.py)."""
    compute_scale: float = Field(default=1.0, gt=0)
    """The engine's compute-bound kernel time (GEMM and prefill-attention FLOPs) as a multiple
    of the GPU profile's, which operator tables timed one kernel at a time: a whole model's
    steps under the engine's kernels, clocks and fusions (docs/background/engines.md)."""
    step_overhead_s: NonNegative | None = None
    """Per step: the engine loop's CPU time and launch gaps (null: the GPU profile's prior)."""
    per_seq_overhead_s: NonNegative | None = None
    """Per step and running request: input preparation, sampling, output processing (null: the
    GPU profile's prior)."""


class EngineProfileFile(ConfigModel):
    """One engine profile YAML."""

    name: str = Field(min_length=1)
    description: str = ""
    version: str = ""
    """The engine version whose defaults the scheduler section copies."""
    scheduler: EngineScheduler | None = None
    """The engine's batching defaults (null for `none`)."""
    handoff_first_token: HandoffFirstToken = "prefill"
    """Disaggregated deployments: where the client's first token comes from. `prefill`: the
    prefill instance's token, as soon as it is computed; `transfer`: the decode instance
    streams the prefill's token once the KV has arrived, when the request joins its batch
    (SGLang, TensorRT-LLM); `recompute`: the decode instance recomputes the last prompt token
    and samples the first token in its first step (vLLM's P/D connector)."""
    cuda_graphs: CudaGraphs | None = None
    """The engine's CUDA-graph sizes (null: every step runs at its own size, as with
    `--enforce-eager`)."""
    costs: EngineCosts = Field(default_factory=EngineCosts)
    sources: dict[str, str] = Field(default_factory=dict)
    """Where each default comes from (engine code or documentation, with its version)."""
    calibration: dict[str, Any] | None = None
    """What `batchsim calibrate engine` fitted the costs on, and their held-out error."""


@dataclasses.dataclass(frozen=True, slots=True)
class EngineProfile:
    """A loaded engine profile; `where` names the file it came from, `ref` is what loads it
    again (a shipped name, `none`, or the file's absolute path), `text` the file as read ("" for
    `none` and for profiles made in memory)."""

    spec: EngineProfileFile
    where: str
    ref: str
    text: str = ""

    @property
    def name(self) -> str:
        return self.spec.name

    def frontend(self, replicas: int = 1, streaming_replicas: int = 0) -> Frontend:
        """A new front end with this engine's costs (one per simulation: it has state), one
        API server per replica, and one that only streams per streaming replica (a decode
        instance of a disaggregated deployment)."""
        costs = self.spec.costs
        return Frontend(costs.frontend_latency_s, costs.frontend_serial_s, servers=replicas,
                        stream_s=costs.frontend_stream_s, stream_servers=streaming_replicas)

    def describe(self) -> str:
        """One line: what it is and how far its costs were calibrated."""
        spec = self.spec
        head = " ".join(part for part in (spec.description, spec.version and
                                          f"({spec.version})") if part)
        held_out = (spec.calibration or {}).get("held_out", {})
        if not held_out:
            return f"{head}; costs not calibrated"
        ttft, tpot = held_out.get("ttft", {}), held_out.get("tpot", {})
        return (f"{head}; held-out median error over {held_out.get('cases', '?')} cases: "
                f"TTFT {ttft.get('median_abs_error', float('nan')):.0%}, "
                f"TPOT {tpot.get('median_abs_error', float('nan')):.0%}")

    def on_gpu(self, gpu: GpuProfile) -> GpuProfile:
        """`gpu` with this engine's per-step overheads in place of the profile's priors, its
        compute-bound kernels at the engine's `compute_scale` and its CUDA-graph sizes."""
        graphs = self.spec.cuda_graphs
        if graphs is not None:
            gpu = dataclasses.replace(gpu, graph_padding=graphs.padding())
        costs, eff = self.spec.costs, gpu.efficiency
        if (costs.step_overhead_s is None and costs.per_seq_overhead_s is None
                and costs.compute_scale == 1.0):
            return gpu
        step = eff.step_overhead_s if costs.step_overhead_s is None else costs.step_overhead_s
        per_seq = (eff.per_seq_overhead_s if costs.per_seq_overhead_s is None
                   else costs.per_seq_overhead_s)
        return dataclasses.replace(gpu, efficiency=dataclasses.replace(
            eff.compute_slowed(costs.compute_scale), step_overhead_s=step,
            per_seq_overhead_s=per_seq))


def list_engine_profiles() -> list[str]:
    """Names of the shipped engine profiles, sorted (`none` first: the bare roofline)."""
    folder = resources.files(_PACKAGE).joinpath(_FOLDER)
    names = sorted(e.name.removesuffix(".yaml") for e in folder.iterdir()
                   if e.name.endswith(".yaml"))
    return [NO_ENGINE, *names]


def load_engine_profile(spec: str, base_dir: Path | None = None) -> EngineProfile:
    """A shipped profile by name, `none`, or a profile YAML by path (relative to `base_dir`)."""
    if spec == NO_ENGINE:
        return EngineProfile(EngineProfileFile(name=NO_ENGINE, description="bare roofline"),
                             NO_ENGINE, NO_ENGINE)
    if spec.endswith((".yaml", ".yml")) or "/" in spec or "\\" in spec:
        path = Path(spec).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        try:
            return parse_engine_profile(path.read_text(encoding="utf-8"), str(path),
                                        str(path.resolve()))
        except FileNotFoundError:
            raise EngineProfileError(f"{path}: no such engine profile file") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise EngineProfileError(f"{path}: cannot read engine profile ({exc})") from None
    entry = resources.files(_PACKAGE).joinpath(_FOLDER, f"{spec.strip().lower()}.yaml")
    if not entry.is_file():
        known = ", ".join(list_engine_profiles())
        raise EngineProfileError(f"unknown engine {spec!r}; shipped: {known}, or give a path "
                                 "to an engine profile YAML")
    return parse_engine_profile(entry.read_text(encoding="utf-8"),
                                f"{_PACKAGE}/{_FOLDER}/{entry.name}", spec.strip().lower())


def parse_engine_profile(text: str, where: str, ref: str) -> EngineProfile:
    """Validate an engine profile document; errors name `where` and the key."""
    document = load_mapping(text, where, EngineProfileError, "engine profile keys")
    try:
        return EngineProfile(EngineProfileFile.model_validate(document), where, ref, text)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(part) for part in first["loc"]) or "(top level)"
        raise EngineProfileError(f"{where}: {key}: {first['msg']}") from None
