"""The `calibration:` block of a fitted GPU profile: what it was fitted on, and how wrong it is."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

FAMILIES = ("gemm", "decode_attention", "prefill_attention", "allreduce", "gemm_fp8", "moe",
            "moe_fp8", "gemm_fp4", "moe_fp4", "moe_mxfp4")
"""Operator families, in the order the fit, the profiles and the report list them. A family's
place also seeds its held-out split, so new ones go last. `gemm_fp8`: GEMMs with per-tensor
fp8 weights and activations, fitted into the profile's `gemm_by_weights.fp8` keys. `moe`,
`moe_fp8`: fused-MoE expert kernels with bf16 and (block-scaled) fp8 weights, fitted into
`moe_by_weights.bf16` and `moe_by_weights.fp8`. `gemm_fp4`: GEMMs with NVFP4 weights and
activations on FP4 tensor cores, fitted into `gemm_by_weights.nvfp4`. `moe_fp4`, `moe_mxfp4`:
fused-MoE expert kernels with NVFP4 weights (W4A4) and with MXFP4 weights run weight-only
(W4A16, as vLLM runs gpt-oss), fitted into `moe_by_weights.nvfp4` and `moe_by_weights.mxfp4`."""


class FieldReader(Protocol):
    """The typed field access of `batchsim.gpu.hardware` (names file and key in every error)."""

    @property
    def where(self) -> str: ...

    def error(self, key: str, expected: str, got: object) -> ValueError: ...

    def no_unknown_keys(
        self, block: Mapping[str, Any], allowed: set[str] | frozenset[str], prefix: str
    ) -> None: ...

    def mapping(self, block: Mapping[str, Any], key: str) -> Mapping[str, Any]: ...

    def string(self, block: Mapping[str, Any], key: str) -> str: ...

    def number(self, block: Mapping[str, Any], key: str, prefix: str, positive: bool) -> float: ...


@dataclass(frozen=True, slots=True)
class HeldOutError:
    """Absolute percentage error of the fitted model on rows the fit did not see."""

    rows: int
    median_ape: float  # fraction: 0.05 = 5%
    p90_ape: float


@dataclass(frozen=True, slots=True)
class MeasurementSource:
    """One measurement table a profile was fitted on."""

    family: str
    file: str
    rows: int  # rows used after the filter (fit + held out)
    filter: str  # which rows of the file were used, in words
    origin: str = ""  # where the file was cut from (its folder's provenance.yaml), if known


@dataclass(frozen=True, slots=True)
class CalibrationRecord:
    """Provenance and held-out error of a fitted profile."""

    method: str
    seed: int
    holdout_fraction: float
    sources: tuple[MeasurementSource, ...]
    heldout_error: Mapping[str, HeldOutError]
    not_fitted: tuple[str, ...]  # efficiency keys kept from priors (no measurement covers them)


def parse_calibration_record(block: Mapping[str, Any], read: FieldReader) -> CalibrationRecord:
    """Validate a profile's `calibration:` mapping."""
    prefix = "calibration."
    read.no_unknown_keys(
        block,
        {"method", "seed", "holdout_fraction", "sources", "heldout_error", "not_fitted"},
        prefix,
    )
    for key in ("method", "seed", "holdout_fraction", "sources", "heldout_error"):
        if block.get(key) is None:
            raise read.error(f"{prefix}{key}", "present (it is required)", None)
    fraction = read.number(block, "holdout_fraction", prefix, positive=True)
    if fraction >= 1:
        raise read.error(f"{prefix}holdout_fraction", "a fraction in (0, 1)", fraction)
    return CalibrationRecord(
        method=read.string(block, "method"),
        seed=int(read.number(block, "seed", prefix, positive=False)),
        holdout_fraction=fraction,
        sources=_sources(block, read, prefix),
        heldout_error=_errors(read.mapping(block, "heldout_error"), read, prefix),
        not_fitted=_names(block.get("not_fitted", []), read, f"{prefix}not_fitted"),
    )


def _sources(
    block: Mapping[str, Any], read: FieldReader, prefix: str
) -> tuple[MeasurementSource, ...]:
    entries = block.get("sources")
    if not isinstance(entries, list) or not entries:
        raise read.error(f"{prefix}sources", "a non-empty list of measurement files", entries)
    sources = []
    for index, entry in enumerate(entries):
        where = f"{prefix}sources[{index}]."
        if not isinstance(entry, dict):
            raise read.error(where.rstrip("."), "a mapping", entry)
        read.no_unknown_keys(entry, {"family", "file", "rows", "filter", "origin"}, where)
        family = _family(entry.get("family"), read, f"{where}family")
        sources.append(
            MeasurementSource(
                family=family,
                file=read.string(entry, "file"),
                rows=int(read.number(entry, "rows", where, positive=True)),
                filter=str(entry.get("filter", "")),
                origin=str(entry.get("origin", "")),
            )
        )
    return tuple(sources)


def _errors(
    block: Mapping[str, Any], read: FieldReader, prefix: str
) -> dict[str, HeldOutError]:
    errors = {}
    for family, entry in block.items():
        key = f"{prefix}heldout_error.{family}"
        _family(family, read, key)
        if not isinstance(entry, dict):
            raise read.error(key, "a mapping of rows, median_ape, p90_ape", entry)
        read.no_unknown_keys(entry, {"rows", "median_ape", "p90_ape"}, f"{key}.")
        median = read.number(entry, "median_ape", f"{key}.", positive=False)
        p90 = read.number(entry, "p90_ape", f"{key}.", positive=False)
        if p90 < median:
            raise read.error(f"{key}.p90_ape", f"at least median_ape ({median})", p90)
        rows = int(read.number(entry, "rows", f"{key}.", positive=True))
        errors[str(family)] = HeldOutError(rows=rows, median_ape=median, p90_ape=p90)
    return errors


def _family(value: object, read: FieldReader, key: str) -> str:
    if value not in FAMILIES:
        raise read.error(key, f"one of {', '.join(FAMILIES)}", value)
    return str(value)


def _names(value: object, read: FieldReader, key: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise read.error(key, "a list of efficiency keys", value)
    return tuple(value)
