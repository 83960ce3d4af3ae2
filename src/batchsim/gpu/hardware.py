"""GPU hardware profiles: spec-sheet peaks plus the roofline efficiencies that temper them.

A profile is a YAML file (schema: any file in `hardware_profiles/gpus/`). Shipped profiles are
read through `importlib.resources`, so they load the same from a wheel as from a checkout.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from types import MappingProxyType
from typing import Any

from batchsim.gpu.calibration_record import CalibrationRecord, parse_calibration_record
from batchsim.gpu.dtypes import (
    COMPUTE_RATE_OF_WEIGHTS,
    FITTED_FP4_KEYS,
    FP4_WEIGHT_DTYPES,
    WEIGHT_DTYPES,
    check_kv_dtype_on,
    check_weight_dtype,
    gemm_kernel_dtype,
)
from batchsim.gpu.graph_padding import GraphPadding
from batchsim.gpu.yaml_load import load_mapping

_PROFILE_PACKAGE = "batchsim.hardware_profiles"
_PROFILE_DIR = "gpus"


class HardwareError(ValueError):
    """A GPU profile that cannot be found or parsed; the message names the file and key."""


@dataclass(frozen=True, slots=True)
class PeakFlops:
    """Dense tensor-core FLOP/s (no 2:4 sparsity) per compute format."""

    bf16: float
    fp8: float | None  # None where the GPU has no fp8 tensor cores (A100)
    int8: float
    fp4: float | None = None  # None where the GPU has no FP4 tensor cores (before Blackwell)

    def for_weights(self, weight_dtype: str) -> float:
        """Peak FLOP/s of a GEMM with weights in `weight_dtype` (see batchsim.gpu.dtypes)."""
        rate = COMPUTE_RATE_OF_WEIGHTS[check_weight_dtype(weight_dtype)]
        # Without cores of their format, fp8 and fp4 weights are upcast and multiplied at the
        # bf16 rate.
        if rate == "fp8":
            return self.fp8 if self.fp8 is not None else self.bf16
        if rate == "fp4":
            return self.fp4 if self.fp4 is not None else self.bf16
        return self.int8 if rate == "int8" else self.bf16

    def gemm_keys_for(self, weight_dtype: str, own_keys: Collection[str]) -> str:
        """The weight dtype whose efficiency keys price these weights' GEMMs on this GPU:
        `own_keys` are the dtypes the block about to be read has keys for (`gemm_by_weights`
        for `RooflineEfficiency.for_weights`, `moe_by_weights` for `for_moe`). FP4 uses
        their own keys there, else nvfp4's, else borrows fp8's or bf16's."""
        return gemm_kernel_dtype(check_weight_dtype(weight_dtype), fp4_cores=self.fp4 is not None,
                                 own_keys=own_keys)


@dataclass(frozen=True, slots=True)
class RooflineEfficiency:
    """Fractions of peak actually reached, and fixed latencies (docs/design.md §3)."""

    calibrated: bool
    note: str
    gemm_peak_efficiency: float  # e_c for large M
    gemm_ramp_tokens: float  # e_c(M) = peak * M / (M + ramp)
    memory_efficiency: float  # e_m: weight/activation streaming
    attention_compute_efficiency: float  # e_attn: prefill attention FLOPs
    kv_read_efficiency: float  # e_kv: decode attention KV streaming
    kernel_launch_s: float  # per GEMM
    allreduce_latency_s: float  # alpha of one all-reduce (2 GPUs: plus one per-GPU step)
    step_overhead_s: float  # c0
    per_seq_overhead_s: float  # c1
    gemm_overlap_power: float  # p of (compute^p + memory^p)^(1/p); large p = plain max
    gemm_k_step_s: float  # serial time per unit of K of one thread block's K loop
    gemm_k_split: float  # K beyond which the library splits K (caps the serial loop)
    attention_launch_s: float  # per attention kernel (prefill or decode)
    decode_per_seq_head_s: float  # decode attention: per (sequence, KV head) work item
    attention_ramp_tokens: float  # prefill: e_attn(W) = e_attn * W / (W + ramp), W = q-head tokens
    prefill_memory_efficiency: float  # prefill attention's per-token traffic (Q, K, V, O)
    attention_overlap_power: float  # p of prefill (compute^p + traffic^p)^(1/p)
    allreduce_latency_per_gpu_s: float  # alpha grows by this per GPU beyond the first
    allreduce_bandwidth_efficiency: float  # bus bandwidth / link bandwidth on 2 GPUs
    allreduce_scaling_exponent: float  # bus bandwidth scales as (2 / GPUs)^exponent
    gemm_ramp_k: float  # e_c(K) = ... * K / (K + ramp_k): a tile's fixed prologue/epilogue
    gemm_wave_exponent: float  # compute time * wave_efficiency^-exponent (0 = no tail effect)
    decode_mha_split_kv: bool  # the decode kernel splits MHA sequences too (FA2 does not)
    decode_unsplit_fill: float  # unsplit decode: (seq, KV head) units per SM that saturate HBM
    decode_split_fill: float  # the same for split layouts
    decode_overlap_fraction: float  # per-unit work and KV streaming: max + fraction * min
    decode_combine_s: float  # split-KV decode: the kernel that combines the splits
    decode_regroup_s: float  # grouped-query decode: copies regrouping queries and outputs
    prefill_setup_s: float  # prefill attention's fixed cost on top of the shared launch
    # The kernel that quantises a W8A8 GEMM's bf16 activations first: its time per token
    # (row) when not bandwidth-bound. 0 (none) for bf16; set only through `gemm_by_weights`.
    gemm_quant_token_s: float = 0.0
    # GEMMs whose weights run other kernels (fp8: CUTLASS scaled-mm) than the bf16 ones the
    # keys above describe: weight dtype -> every key of GEMM_KEYS and QUANT_KEYS.
    gemm_by_weights: Mapping[str, Mapping[str, float]] = field(
        default_factory=lambda: MappingProxyType({}))
    # The fused-MoE expert kernel (`gpu.moe_experts`): passes over a bf16 hidden row per routed
    # (token, expert) pair beside its GEMMs. 0 (not priced) but through `moe_by_weights`.
    moe_pair_passes: float = 0.0
    # Routed experts run fused-MoE kernels of their own: weight dtype -> every key of GEMM_KEYS
    # and MOE_KEYS, fitted on those kernels' tables.
    moe_by_weights: Mapping[str, Mapping[str, float]] = field(
        default_factory=lambda: MappingProxyType({}))

    def for_weights(self, weight_dtype: str) -> RooflineEfficiency:
        """The efficiencies a GEMM with `weight_dtype` weights runs at: its own GEMM keys
        where the profile has them, else these (the bf16 ones) unchanged, the same object."""
        keys = self.gemm_by_weights.get(weight_dtype)
        if keys is None:
            return self
        fields: dict[str, Any] = dict(keys)
        return dataclasses.replace(self, **fields)

    def for_moe(self, weight_dtype: str) -> RooflineEfficiency:
        """The efficiencies routed experts with `weight_dtype` weights run at: the MoE kernel's
        own keys where the profile has them (its activation quantisation is in its pair
        passes), else the dense GEMM keys of those weights, as before those keys were fitted."""
        keys = self.moe_by_weights.get(weight_dtype)
        if keys is None:
            return self.for_weights(weight_dtype)
        fields: dict[str, Any] = {**dict(keys), **dict.fromkeys(QUANT_KEYS, 0.0)}
        return dataclasses.replace(self, **fields)

    def compute_slowed(self, scale: float) -> RooflineEfficiency:
        """These efficiencies with every compute-bound peak (each GEMM family's, the prefill
        attention's FLOPs) divided by `scale`: kernels whose FLOPs take `scale` times the time
        the operator tables measured, their memory traffic and fixed costs unchanged."""
        if scale == 1.0:
            return self

        def slowed(block: Mapping[str, float]) -> Mapping[str, float]:
            peak = block["gemm_peak_efficiency"] / scale
            return MappingProxyType({**block, "gemm_peak_efficiency": peak})

        return dataclasses.replace(
            self, gemm_peak_efficiency=self.gemm_peak_efficiency / scale,
            attention_compute_efficiency=self.attention_compute_efficiency / scale,
            gemm_by_weights=MappingProxyType(
                {dtype: slowed(keys) for dtype, keys in self.gemm_by_weights.items()}),
            moe_by_weights=MappingProxyType(
                {dtype: slowed(keys) for dtype, keys in self.moe_by_weights.items()}))

    def with_moe_for(self, weight_dtype: str, values: Mapping[str, float]) -> RooflineEfficiency:
        """These efficiencies with some MoE keys of `weight_dtype` replaced; a dtype without
        MoE keys of its own starts from its dense GEMM keys and no routing cost."""
        current = self.moe_by_weights.get(weight_dtype)
        if current is None:
            dense = self.for_weights(weight_dtype)
            current = {key: getattr(dense, key) for key in GEMM_KEYS}
            current.update(dict.fromkeys(MOE_KEYS, 0.0))
        unknown = set(values) - set(GEMM_KEYS) - set(MOE_KEYS)
        if unknown:
            raise ValueError(f"{sorted(unknown)[0]!r} is not a MoE efficiency key")
        by_weights = {**self.moe_by_weights,
                      weight_dtype: MappingProxyType({**current, **values})}
        return dataclasses.replace(self, moe_by_weights=MappingProxyType(by_weights))

    def with_gemm_for(self, weight_dtype: str, values: Mapping[str, float]) -> RooflineEfficiency:
        """These efficiencies with some GEMM keys of `weight_dtype` replaced; a dtype without
        keys of its own starts from the bf16 ones, with no quantisation kernel."""
        current = self.gemm_by_weights.get(weight_dtype)
        if current is None:
            current = {key: getattr(self, key) for key in GEMM_KEYS}
            current.update(dict.fromkeys(QUANT_KEYS, 0.0))
        unknown = set(values) - set(GEMM_KEYS) - set(QUANT_KEYS)
        if unknown:
            raise ValueError(f"{sorted(unknown)[0]!r} is not a GEMM efficiency key")
        by_weights = {**self.gemm_by_weights,
                      weight_dtype: MappingProxyType({**current, **values})}
        return dataclasses.replace(self, gemm_by_weights=MappingProxyType(by_weights))


GEMM_KEYS = (
    "gemm_peak_efficiency",
    "gemm_ramp_tokens",
    "memory_efficiency",
    "kernel_launch_s",
    "gemm_overlap_power",
    "gemm_k_step_s",
    "gemm_k_split",
    "gemm_ramp_k",
    "gemm_wave_exponent",
)
"""The keys `roofline.gemm_seconds` reads: what a weight dtype's own GEMM block restates."""
QUANT_KEYS = ("gemm_quant_token_s",)
"""The activation-quantisation kernel's keys: only in a weight dtype's own GEMM block. Its
launch is not one: it would only add to `kernel_launch_s`, which then covers both kernels."""
MOE_KEYS = ("moe_pair_passes",)
"""The fused-MoE kernel's keys beyond its GEMM keys: only in a `moe_by_weights` block."""


@dataclass(frozen=True, slots=True)
class BoardPower:
    """Board power of one GPU in watts (docs/how-to/energy-and-cost.md, `batchsim.metrics.energy`).

    `idle_w`: no step running (the model loaded, the GPU waiting); `memory_bound_w`: running
    a step that streams weights at full memory bandwidth but leaves the tensor cores mostly
    idle (small-batch decode); `max_w`: the board limit (TDP), reached by compute-bound steps.
    """

    idle_w: float
    memory_bound_w: float
    max_w: float
    source: str


@dataclass(frozen=True, slots=True)
class GpuProfile:
    """One GPU model: peaks from its spec sheet, memory, links and roofline efficiencies."""

    name: str
    description: str
    aliases: tuple[str, ...]
    source: str
    peak_flops: PeakFlops
    memory_bandwidth_bytes_per_s: float
    memory_bytes: int
    intra_node_bandwidth_bytes_per_s: float  # NVLink (PCIe on cards without it), per direction
    pcie_bandwidth_bytes_per_s: float  # host link, per direction
    p2p_latency_s: float
    gpus_per_node: int
    runtime_reserve_bytes: int  # activations, CUDA graphs, NCCL, allocator slack
    efficiency: RooflineEfficiency
    calibration: CalibrationRecord | None = None  # where a fitted profile's values came from
    sm_count: int | None = None  # streaming multiprocessors (compute units): wave/occupancy terms
    power: BoardPower | None = None  # None: the profile gives no power, so no energy metrics
    # GPUs one NVLink fabric joins (gpu/network.py): None is one node's `gpus_per_node`.
    nvlink_domain_gpus: int | None = None
    # Each GPU's own NIC to the other domains; None: layouts beyond a domain are refused.
    inter_node_bandwidth_bytes_per_s: float | None = None  # per direction
    inter_node_latency_s: float | None = None  # per step of a ring over the network
    # The serving engine's CUDA-graph sizes, set by its engine profile (None: every step runs
    # at its own token count, as the operator tables timed the kernels).
    graph_padding: GraphPadding | None = None

    def check_kv_dtype(self, kv_dtype: str) -> str:
        """`kv_dtype` if this GPU's attention kernels read a KV cache stored in it (an FP4 one
        needs FP4 tensor cores), else DtypeError."""
        return check_kv_dtype_on(kv_dtype, gpu_name=self.name,
                                 fp4_cores=self.peak_flops.fp4 is not None)

    @property
    def domain_gpus(self) -> int:
        """GPUs of one NVLink domain: tensor and expert parallelism inside it stay on NVLink."""
        return self.nvlink_domain_gpus or self.gpus_per_node

    @property
    def parallel_units(self) -> float:
        """SMs the wave and occupancy terms divide work over.

        A profile without `sm_count` must have those terms switched off (checked on load), so
        any positive stand-in gives the same times.
        """
        return float(self.sm_count) if self.sm_count else 1.0


def list_gpu_profiles() -> list[str]:
    """Canonical names of the shipped GPU profiles, sorted."""
    return sorted(name for name, _ in _shipped_profile_files())


def load_gpu_profile(spec: str, base_dir: Path | None = None) -> GpuProfile:
    """A shipped profile by name or alias (case-insensitive), or a profile YAML by path.

    A spec ending in `.yaml`/`.yml` or containing a path separator is a path, relative to
    `base_dir` (default: the working directory).
    """
    if spec.endswith((".yaml", ".yml")) or "/" in spec or "\\" in spec:
        path = Path(spec).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise HardwareError(f"{path}: no such GPU profile file") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise HardwareError(f"{path}: cannot read GPU profile ({exc})") from None
        return parse_gpu_profile(text, str(path))
    return _load_shipped(spec.strip().lower())


def parse_gpu_profile(text: str, where: str) -> GpuProfile:
    """Parse and validate a profile YAML document; `where` names it in error messages."""
    document = load_mapping(text, where, HardwareError, "GPU profile fields")
    return _profile_from_mapping(document, _Reader(where))


def _shipped_profile_files() -> list[tuple[str, Traversable]]:
    folder = resources.files(_PROFILE_PACKAGE).joinpath(_PROFILE_DIR)
    return [
        (entry.name.removesuffix(".yaml"), entry)
        for entry in folder.iterdir()
        if entry.name.endswith(".yaml")
    ]


def _load_shipped(key: str) -> GpuProfile:
    files = _shipped_profile_files()
    profiles = {}
    for name, entry in files:
        where = f"{_PROFILE_PACKAGE}/{_PROFILE_DIR}/{entry.name}"
        if name == key:
            return parse_gpu_profile(entry.read_text(encoding="utf-8"), where)
        profiles[name] = (entry, where)
    # Not a canonical name: aliases live inside the files, so read them all.
    for entry, where in profiles.values():
        profile = parse_gpu_profile(entry.read_text(encoding="utf-8"), where)
        if key in profile.aliases:
            return profile
    known = ", ".join(sorted(profiles))
    raise HardwareError(
        f"unknown GPU profile {key!r}; shipped profiles: {known} (aliases such as a100, h100, "
        "h200 also work), or give a path to a profile YAML"
    )


_TOP_LEVEL_KEYS = frozenset(
    {
        "name",
        "description",
        "aliases",
        "source",
        "peak_flops",
        "memory_bandwidth_bytes_per_s",
        "memory_bytes",
        "intra_node_bandwidth_bytes_per_s",
        "pcie_bandwidth_bytes_per_s",
        "p2p_latency_s",
        "gpus_per_node",
        "runtime_reserve_bytes",
        "efficiency",
        "calibration",
        "sm_count",
        "power",
        "nvlink_domain_gpus",
        "inter_node_bandwidth_bytes_per_s",
        "inter_node_latency_s",
    }
)
_EFFICIENCY_FRACTIONS = (
    "gemm_peak_efficiency",
    "memory_efficiency",
    "attention_compute_efficiency",
    "kv_read_efficiency",
    "prefill_memory_efficiency",
    "allreduce_bandwidth_efficiency",
)
# Fractions that may be 0 (a term switched off) up to 1.
_EFFICIENCY_UNIT_INTERVAL = ("gemm_wave_exponent", "decode_overlap_fraction")
_EFFICIENCY_SECONDS = (
    "kernel_launch_s",
    "allreduce_latency_s",
    "step_overhead_s",
    "per_seq_overhead_s",
    "gemm_k_step_s",
    "attention_launch_s",
    "decode_per_seq_head_s",
    "allreduce_latency_per_gpu_s",
    "decode_combine_s",
    "decode_regroup_s",
    "prefill_setup_s",
)
_EFFICIENCY_COUNTS = (
    "gemm_ramp_tokens",
    "attention_ramp_tokens",
    "gemm_ramp_k",
    "decode_unsplit_fill",
    "decode_split_fill",
)
# Terms that divide work over the SMs: a profile without `sm_count` must keep them at 0.
SM_TERMS = ("gemm_wave_exponent", "decode_unsplit_fill", "decode_split_fill")
# Powers of the overlap p-norm: 1 = no overlap; past 16 it is a max (and p-th powers of
# seconds would underflow).
_EFFICIENCY_POWERS = ("gemm_overlap_power", "attention_overlap_power")
MAX_OVERLAP_POWER = 16.0
# (2 / GPUs)^exponent: negative where more GPUs reach a higher bus bandwidth (NVSwitch).
ALLREDUCE_EXPONENT_RANGE = (-2.0, 4.0)


def _profile_from_mapping(doc: Mapping[str, Any], read: _Reader) -> GpuProfile:
    read.no_unknown_keys(doc, _TOP_LEVEL_KEYS, "")
    flops = read.mapping(doc, "peak_flops")
    read.no_unknown_keys(flops, {"bf16", "fp8", "int8", "fp4"}, "peak_flops.")
    bf16 = read.number(flops, "bf16", "peak_flops.", positive=True)
    peak_flops = PeakFlops(
        bf16=bf16,
        fp8=read.number(flops, "fp8", "peak_flops.", positive=True) if "fp8" in flops else None,
        int8=read.number(flops, "int8", "peak_flops.", positive=True),
        fp4=read.number(flops, "fp4", "peak_flops.", positive=True) if "fp4" in flops else None,
    )
    aliases = doc.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise read.error("aliases", "a list of names", aliases)
    efficiency = _efficiency_from_mapping(read.mapping(doc, "efficiency"), read)
    sm_count = _sm_count(doc, efficiency, read)
    return GpuProfile(
        name=read.string(doc, "name").lower(),
        description=str(doc.get("description", "")),
        aliases=tuple(a.lower() for a in aliases),
        source=str(doc.get("source", "")),
        peak_flops=peak_flops,
        memory_bandwidth_bytes_per_s=read.number(
            doc, "memory_bandwidth_bytes_per_s", "", positive=True
        ),
        memory_bytes=int(read.number(doc, "memory_bytes", "", positive=True)),
        intra_node_bandwidth_bytes_per_s=read.number(
            doc, "intra_node_bandwidth_bytes_per_s", "", positive=True
        ),
        pcie_bandwidth_bytes_per_s=read.number(
            doc, "pcie_bandwidth_bytes_per_s", "", positive=True
        ),
        p2p_latency_s=read.number(doc, "p2p_latency_s", "", positive=False),
        gpus_per_node=int(read.number(doc, "gpus_per_node", "", positive=True)),
        runtime_reserve_bytes=int(read.number(doc, "runtime_reserve_bytes", "", positive=False)),
        efficiency=efficiency,
        calibration=(
            parse_calibration_record(read.mapping(doc, "calibration"), read)
            if "calibration" in doc
            else None
        ),
        sm_count=sm_count,
        power=_board_power(read.mapping(doc, "power"), read) if "power" in doc else None,
        **_node_network(doc, read),
    )


_NETWORK_KEYS = ("inter_node_bandwidth_bytes_per_s", "inter_node_latency_s")


def _node_network(doc: Mapping[str, Any], read: _Reader) -> dict[str, Any]:
    """The optional NVLink domain (whole nodes, at least one) and the network between domains
    (both keys or neither)."""
    per_node = int(read.number(doc, "gpus_per_node", "", positive=True))
    domain = None
    if "nvlink_domain_gpus" in doc:
        value = read.number(doc, "nvlink_domain_gpus", "", positive=True)
        if value != int(value) or int(value) % per_node:
            raise read.error("nvlink_domain_gpus",
                             f"a whole number of {per_node}-GPU nodes", doc["nvlink_domain_gpus"])
        domain = int(value)
    given = [key for key in _NETWORK_KEYS if key in doc]
    if len(given) == 1:
        missing = next(key for key in _NETWORK_KEYS if key not in doc)
        raise HardwareError(f"{read.where}: key '{given[0]}' needs '{missing}' beside it "
                            "(the network between NVLink domains)")
    network: dict[str, Any] = {"nvlink_domain_gpus": domain}
    if given:
        network["inter_node_bandwidth_bytes_per_s"] = read.number(
            doc, "inter_node_bandwidth_bytes_per_s", "", positive=True)
        network["inter_node_latency_s"] = read.number(doc, "inter_node_latency_s", "",
                                                      positive=False)
    return network


_POWER_KEYS = ("idle_w", "memory_bound_w", "max_w")


def _board_power(block: Mapping[str, Any], read: _Reader) -> BoardPower:
    """The optional `power` block: idle <= memory-bound <= max watts, all positive."""
    read.no_unknown_keys(block, {*_POWER_KEYS, "source"}, "power.")
    watts = {key: read.number(block, key, "power.", positive=True) for key in _POWER_KEYS}
    if not watts["idle_w"] <= watts["memory_bound_w"] <= watts["max_w"]:
        raise HardwareError(
            f"{read.where}: key 'power' must have idle_w <= memory_bound_w <= max_w, got "
            f"{watts['idle_w']:g}, {watts['memory_bound_w']:g}, {watts['max_w']:g}"
        )
    return BoardPower(**watts, source=str(block.get("source", "")))


def _sm_count(doc: Mapping[str, Any], eff: RooflineEfficiency, read: _Reader) -> int | None:
    """The optional SM count; the wave and occupancy terms cannot work without it."""
    if "sm_count" not in doc:
        needing = [key for key in SM_TERMS if getattr(eff, key) != 0]
        needing += [f"gemm_by_weights.{dtype}.{key}" for dtype, keys in eff.gemm_by_weights.items()
                    for key in SM_TERMS if keys.get(key, 0.0) != 0]
        needing += [f"moe_by_weights.{dtype}.{key}" for dtype, keys in eff.moe_by_weights.items()
                    for key in SM_TERMS if keys.get(key, 0.0) != 0]
        if needing:
            raise HardwareError(
                f"{read.where}: missing key 'sm_count' (streaming multiprocessors), which "
                f"'efficiency.{needing[0]}' needs; add it from the GPU's spec sheet, or set "
                f"{', '.join(SM_TERMS)} to 0"
            )
        return None
    value = read.number(doc, "sm_count", "", positive=True)
    if value != int(value):
        raise read.error("sm_count", "a whole number of SMs", doc["sm_count"])
    return int(value)


def _efficiency_from_mapping(block: Mapping[str, Any], read: _Reader) -> RooflineEfficiency:
    prefix = "efficiency."
    allowed = {
        "calibrated",
        "note",
        "decode_mha_split_kv",
        *_EFFICIENCY_UNIT_INTERVAL,
        *_EFFICIENCY_COUNTS,
        *_EFFICIENCY_POWERS,
        "gemm_k_split",
        "allreduce_scaling_exponent",
        *_EFFICIENCY_FRACTIONS,
        *_EFFICIENCY_SECONDS,
    }
    read.no_unknown_keys(block, {*allowed, "gemm_by_weights", "moe_by_weights"}, prefix)
    calibrated = read.boolean(block, "calibrated", prefix)
    fractions = {}
    for key in _EFFICIENCY_FRACTIONS:
        value = read.number(block, key, prefix, positive=True)
        if value > 1:
            raise read.error(f"{prefix}{key}", "a fraction of peak in (0, 1]", value)
        fractions[key] = value
    for key in _EFFICIENCY_UNIT_INTERVAL:
        value = read.number(block, key, prefix, positive=False)
        if value > 1:
            raise read.error(f"{prefix}{key}", "a number in [0, 1]", value)
        fractions[key] = value
    seconds = {key: read.number(block, key, prefix, positive=False) for key in _EFFICIENCY_SECONDS}
    counts = {key: read.number(block, key, prefix, positive=False) for key in _EFFICIENCY_COUNTS}
    powers = {}
    for key in _EFFICIENCY_POWERS:
        value = read.number(block, key, prefix, positive=True)
        if not 1.0 <= value <= MAX_OVERLAP_POWER:
            raise read.error(f"{prefix}{key}", f"a power in [1, {MAX_OVERLAP_POWER:g}]", value)
        powers[key] = value
    low, high = ALLREDUCE_EXPONENT_RANGE
    exponent = read.real(block, "allreduce_scaling_exponent", prefix)
    if not low <= exponent <= high:
        raise read.error(
            f"{prefix}allreduce_scaling_exponent", f"a number in [{low:g}, {high:g}]", exponent
        )
    return RooflineEfficiency(
        calibrated=calibrated,
        note=str(block.get("note", "")),
        gemm_by_weights=_gemm_by_weights(block, read, prefix),
        moe_by_weights=_moe_by_weights(block, read, prefix),
        decode_mha_split_kv=read.boolean(block, "decode_mha_split_kv", prefix),
        gemm_k_split=read.number(block, "gemm_k_split", prefix, positive=True),
        allreduce_scaling_exponent=exponent,
        **counts,
        **powers,
        **fractions,
        **seconds,
    )


def _gemm_by_weights(
    block: Mapping[str, Any], read: _Reader, prefix: str
) -> Mapping[str, Mapping[str, float]]:
    """The optional `gemm_by_weights` block: per weight dtype, every GEMM and quantisation key,
    each in the range its top-level namesake allows."""
    if "gemm_by_weights" not in block:
        return MappingProxyType({})
    prefix = f"{prefix}gemm_by_weights."
    by_weights = read.mapping(block, "gemm_by_weights")
    # Of the FP4 formats only nvfp4 has tables to fit; mxfp4 GEMMs use its keys
    # (`PeakFlops.gemm_keys_for`).
    allowed = (WEIGHT_DTYPES - {"bf16"} - FP4_WEIGHT_DTYPES) | {FITTED_FP4_KEYS}
    read.no_unknown_keys(by_weights, allowed, prefix)
    result = {}
    for dtype in sorted(by_weights):
        keys = read.mapping(by_weights, dtype)
        where = f"{prefix}{dtype}."
        read.no_unknown_keys(keys, {*GEMM_KEYS, *QUANT_KEYS}, where)
        result[str(dtype)] = MappingProxyType(
            {key: _gemm_value(keys, key, where, read) for key in (*GEMM_KEYS, *QUANT_KEYS)})
    return MappingProxyType(result)


def _moe_by_weights(
    block: Mapping[str, Any], read: _Reader, prefix: str
) -> Mapping[str, Mapping[str, float]]:
    """The optional `moe_by_weights` block: per weight dtype (bf16 included), every GEMM key
    of the expert kernel, each in its top-level namesake's range, and the MoE keys (>= 0)."""
    if "moe_by_weights" not in block:
        return MappingProxyType({})
    prefix = f"{prefix}moe_by_weights."
    by_weights = read.mapping(block, "moe_by_weights")
    # Both FP4 formats have fused-MoE tables (nvfp4 W4A4, mxfp4 weight-only).
    read.no_unknown_keys(by_weights, WEIGHT_DTYPES, prefix)
    result = {}
    for dtype in sorted(by_weights):
        keys = read.mapping(by_weights, dtype)
        where = f"{prefix}{dtype}."
        read.no_unknown_keys(keys, {*GEMM_KEYS, *MOE_KEYS}, where)
        values = {key: _gemm_value(keys, key, where, read) for key in (*GEMM_KEYS, *MOE_KEYS)}
        result[str(dtype)] = MappingProxyType(values)
    return MappingProxyType(result)


def _gemm_value(keys: Mapping[str, Any], key: str, prefix: str, read: _Reader) -> float:
    """One GEMM key of a weight dtype's block, checked as the top-level key of its kind."""
    if key in _EFFICIENCY_FRACTIONS:
        value = read.number(keys, key, prefix, positive=True)
        if value > 1:
            raise read.error(f"{prefix}{key}", "a fraction of peak in (0, 1]", value)
        return value
    if key in _EFFICIENCY_UNIT_INTERVAL:
        value = read.number(keys, key, prefix, positive=False)
        if value > 1:
            raise read.error(f"{prefix}{key}", "a number in [0, 1]", value)
        return value
    if key in _EFFICIENCY_POWERS:
        value = read.number(keys, key, prefix, positive=True)
        if not 1.0 <= value <= MAX_OVERLAP_POWER:
            raise read.error(f"{prefix}{key}", f"a power in [1, {MAX_OVERLAP_POWER:g}]", value)
        return value
    # Seconds, counts and the K split: non-negative (the split positive).
    return read.number(keys, key, prefix, positive=key == "gemm_k_split")


@dataclass(frozen=True, slots=True)
class _Reader:
    """Typed field access that names the file and the key path in every error."""

    where: str

    def error(self, key: str, expected: str, got: object) -> HardwareError:
        return HardwareError(f"{self.where}: key '{key}' must be {expected}, got {got!r}")

    def no_unknown_keys(
        self, block: Mapping[str, Any], allowed: set[str] | frozenset[str], prefix: str
    ) -> None:
        unknown = sorted(str(k) for k in block if k not in allowed)
        if unknown:
            raise HardwareError(
                f"{self.where}: unknown key '{prefix}{unknown[0]}'; expected one of "
                f"{', '.join(sorted(allowed))}"
            )

    def mapping(self, block: Mapping[str, Any], key: str) -> Mapping[str, Any]:
        value = block.get(key)
        if value is None:
            raise HardwareError(f"{self.where}: missing required key '{key}'")
        if not isinstance(value, dict):
            raise self.error(key, "a mapping", value)
        return value

    def string(self, block: Mapping[str, Any], key: str) -> str:
        value = block.get(key)
        if value is None:
            raise HardwareError(f"{self.where}: missing required key '{key}'")
        if not isinstance(value, str) or not value.strip():
            raise self.error(key, "a non-empty string", value)
        return value.strip()

    def boolean(self, block: Mapping[str, Any], key: str, prefix: str) -> bool:
        value = block.get(key)
        if value is None:
            raise HardwareError(f"{self.where}: missing required key '{prefix}{key}'")
        if not isinstance(value, bool):
            raise self.error(f"{prefix}{key}", "true or false", value)
        return value

    def real(self, block: Mapping[str, Any], key: str, prefix: str) -> float:
        """A finite number of either sign."""
        value = block.get(key)
        if value is None:
            raise HardwareError(f"{self.where}: missing required key '{prefix}{key}'")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise self.error(f"{prefix}{key}", "a number", value) from None
        if isinstance(value, bool) or not math.isfinite(number):
            raise self.error(f"{prefix}{key}", "a number", value)
        return number

    def number(self, block: Mapping[str, Any], key: str, prefix: str, positive: bool) -> float:
        """A number; YAML 1.1 reads `1e-5` (no dot) as a string, so numeric strings count."""
        full_key = f"{prefix}{key}"
        value = block.get(key)
        if value is None:
            raise HardwareError(f"{self.where}: missing required key '{full_key}'")
        number: float | None = None
        if isinstance(value, int | float) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                number = None
        expected = "a positive number" if positive else "a non-negative number"
        if number is None or not math.isfinite(number) or number < 0 or (positive and number == 0):
            raise self.error(full_key, expected, value)
        return number
