"""Token-length distributions: how many prompt / output tokens each request carries.

Every distribution draws from a caller-supplied ``numpy.random.Generator`` (one per run, from
a ``SeedSequence``) so a run is reproducible and distributions never share hidden state.
Samples are int64 and at least 1: a request always has a token to prefill and one to decode.
Clipping to the model's context length is the runner's job, since only it knows the model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from batchsim.workloads.errors import WorkloadError
from batchsim.workloads.traces.csv_text import positive_int_column, read_csv_text, require_columns

# Upper clip for heavy-tailed draws: far above any context window, far below int64 overflow
# (a lognormal with a large cv occasionally draws values that do not fit in an int64).
_MAX_TOKENS = 2**31 - 1


@runtime_checkable
class LengthDistribution(Protocol):
    """A source of token counts."""

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` int64 token counts, each >= 1."""
        ...

    def mean(self) -> float:
        """Analytic mean where one exists; for empirical data the mean of the values."""
        ...


def _check_count(n: int) -> None:
    if n < 0:
        raise ValueError(f"sample size must be >= 0, got {n}")


@dataclass(frozen=True, slots=True)
class FixedLength:
    """Every request has exactly ``value`` tokens."""

    value: int

    def __post_init__(self) -> None:
        if self.value < 1:
            raise ValueError(f"fixed length must be >= 1, got {self.value}")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        _check_count(n)
        return np.full(n, self.value, dtype=np.int64)

    def mean(self) -> float:
        return float(self.value)


@dataclass(frozen=True, slots=True)
class UniformLength:
    """Uniform over the integers ``low..high``, both ends included."""

    low: int
    high: int

    def __post_init__(self) -> None:
        if not 1 <= self.low <= self.high:
            raise ValueError(f"uniform length needs 1 <= low <= high, got {self.low}..{self.high}")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        _check_count(n)
        return rng.integers(self.low, self.high, size=n, dtype=np.int64, endpoint=True)

    def mean(self) -> float:
        return (self.low + self.high) / 2


@dataclass(frozen=True, slots=True)
class LognormalLength:
    """Lognormal token counts with the given mean and coefficient of variation.

    ``mean_tokens`` and ``cv`` describe the token count itself (what a user measures from a
    trace), not the underlying normal. Draws are rounded to the nearest integer and clipped
    below at 1; that shifts the mean by well under a token unless ``mean_tokens`` is tiny.
    """

    mean_tokens: float
    cv: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.mean_tokens) and self.mean_tokens >= 1):
            raise ValueError(f"lognormal mean must be >= 1, got {self.mean_tokens}")
        if not (math.isfinite(self.cv) and self.cv >= 0):
            raise ValueError(f"lognormal cv must be >= 0, got {self.cv}")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        _check_count(n)
        # Moment matching: if X = exp(N(mu, sigma^2)) then cv(X)^2 = exp(sigma^2) - 1 and
        # E[X] = exp(mu + sigma^2 / 2).
        sigma2 = math.log1p(self.cv**2)
        mu = math.log(self.mean_tokens) - sigma2 / 2
        draws = rng.lognormal(mu, math.sqrt(sigma2), size=n)
        return np.clip(np.rint(draws), 1, _MAX_TOKENS).astype(np.int64)

    def mean(self) -> float:
        return float(self.mean_tokens)


@dataclass(frozen=True, slots=True)
class GeometricLength:
    """Geometric on 1, 2, 3, ... with the given mean (success probability 1 / mean).

    The discrete analogue of an exponential: with one decode step per token it gives
    exponentially distributed service, which the M/G/1 theory tests rely on.
    """

    mean_tokens: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.mean_tokens) and self.mean_tokens >= 1):
            raise ValueError(f"geometric mean must be >= 1, got {self.mean_tokens}")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        _check_count(n)
        draws = rng.geometric(1.0 / self.mean_tokens, size=n)
        return np.minimum(draws, _MAX_TOKENS).astype(np.int64)

    def mean(self) -> float:
        return float(self.mean_tokens)


@dataclass(frozen=True, slots=True, eq=False)
class EmpiricalLength:
    """Resample observed token counts with replacement.

    ``eq=False`` because comparing dataclasses would compare arrays element-wise, which has
    no single truth value. The values are copied to a read-only int64 array so the
    distribution stays immutable like the other (frozen) ones.
    """

    values: np.ndarray

    def __post_init__(self) -> None:
        raw = np.asarray(self.values)
        if raw.ndim != 1 or raw.size == 0:
            raise ValueError(f"empirical lengths need a non-empty 1-D array, got shape {raw.shape}")
        if not (np.issubdtype(raw.dtype, np.number) and np.all(np.mod(raw, 1) == 0)):
            raise ValueError("empirical lengths must be whole numbers")
        if raw.min() < 1:
            raise ValueError(f"empirical lengths must be >= 1, got a value of {raw.min()}")
        values = raw.astype(np.int64, copy=True)
        values.setflags(write=False)
        object.__setattr__(self, "values", values)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        _check_count(n)
        return self.values[rng.integers(0, self.values.size, size=n)]

    def mean(self) -> float:
        return float(self.values.mean())


@dataclass(frozen=True, slots=True)
class MixtureLength:
    """Each request picks a component with the given probability, then draws from it.

    E.g. 90% short chat + 10% long documents: the ragged case where continuous batching
    shines. Weights are normalised to sum to 1 on construction.
    """

    components: tuple[LengthDistribution, ...]
    weights: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.components:
            raise ValueError("a mixture needs at least one component")
        if len(self.weights) != len(self.components):
            raise ValueError(
                f"a mixture needs one weight per component, got {len(self.weights)} weights "
                f"for {len(self.components)} components"
            )
        if not all(math.isfinite(w) and w >= 0 for w in self.weights):
            raise ValueError(f"mixture weights must be finite and >= 0, got {self.weights}")
        total = math.fsum(self.weights)
        if total <= 0:
            raise ValueError("mixture weights must not all be zero")
        object.__setattr__(self, "components", tuple(self.components))
        object.__setattr__(self, "weights", tuple(w / total for w in self.weights))

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        _check_count(n)
        which = rng.choice(len(self.components), size=n, p=np.asarray(self.weights))
        out = np.empty(n, dtype=np.int64)
        # Components draw in index order, each once for all its requests: the stream of
        # random numbers consumed (and so the result) depends only on the seed, and the
        # draws stay vectorised.
        for index, component in enumerate(self.components):
            chosen = which == index
            out[chosen] = component.sample(rng, int(np.count_nonzero(chosen)))
        return out

    def mean(self) -> float:
        return math.fsum(w * c.mean() for w, c in zip(self.weights, self.components, strict=True))


def load_empirical_column(path: Path, column: str) -> np.ndarray:
    """One column of a CSV as int64 token counts (each >= 1), e.g. for ``EmpiricalLength``.

    Raises ``WorkloadError`` naming the file, the missing column (with the ones available),
    or the line and value of the first entry that is not a positive integer.
    """
    frame = read_csv_text(path)
    require_columns(frame, path, (column,))
    values = positive_int_column(frame, column, path)
    if values.size == 0:
        raise WorkloadError(f"{path}: column {column!r} has no values (expected at least one)")
    return values
