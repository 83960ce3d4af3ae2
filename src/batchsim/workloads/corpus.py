"""Length corpora: prompt/output token counts of real requests, without timestamps.

E.g. ShareGPT's ``num_prefill_tokens, num_decode_tokens``. Combined with any arrival process,
a corpus gives each request the lengths of a row drawn at random (with replacement), or of the
rows in order (``InOrderColumn``: a benchmark's requests as its client sent them). Prompt and
output are drawn as a *pair* from the same row, which keeps their correlation (long documents
with short summaries, short questions with long answers) -- two independent ``empirical``
columns would lose it.

The pairing works through the generators: each column's sampler draws ``rng.integers(0,
rows)`` and nothing else, so a prompt and an output sampler driven by generators from the same
seed, asked for the same counts, pick the same rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from batchsim.workloads.errors import WorkloadError
from batchsim.workloads.traces.csv_text import positive_int_column, read_csv_text, require_columns


@dataclass(frozen=True, slots=True, eq=False)
class CorpusColumn:
    """One column of a corpus as a length distribution (``LengthDistribution``)."""

    values: np.ndarray  # int64 >= 1, one per corpus row

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if n < 0:
            raise ValueError(f"sample size must be >= 0, got {n}")
        return self.values[rng.integers(0, self.values.size, size=n)]

    def mean(self) -> float:
        return float(self.values.mean())


@dataclass(frozen=True, slots=True, eq=False)
class InOrderColumn:
    """One column of a corpus taken row by row: request i gets row i, and the rows start again
    from the first when there are more requests than rows. The generator is not used."""

    values: np.ndarray  # int64 >= 1, one per corpus row

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """The first `n` rows: a stream sampled at once (an open loop) takes them in order."""
        if n < 0:
            raise ValueError(f"sample size must be >= 0, got {n}")
        return np.resize(self.values, n)

    def chunks(self, size: int) -> Iterator[np.ndarray]:
        """The rows in order, `size` at a time, without end: for a stream drawn as it goes
        (a closed loop), which would restart at row 0 on every `sample` call."""
        start = 0
        while True:
            yield np.take(self.values, np.arange(start, start + size), mode="wrap")
            start = (start + size) % self.values.size

    def mean(self) -> float:
        return float(self.values.mean())


@dataclass(frozen=True, slots=True, eq=False)
class LengthCorpus:
    """Paired prompt and output lengths, row i of each from the same request."""

    prompt: CorpusColumn
    output: CorpusColumn

    def __len__(self) -> int:
        return int(self.prompt.values.size)


def load_length_corpus(path: Path, prompt_column: str, output_column: str) -> LengthCorpus:
    """Two columns of a CSV as paired token counts (each >= 1); errors name file and line."""
    frame = read_csv_text(path)
    require_columns(frame, path, (prompt_column, output_column))
    if frame.empty:
        raise WorkloadError(f"{path}:2: no rows after the header (expected at least one)")
    prompt = positive_int_column(frame, prompt_column, path)
    output = positive_int_column(frame, output_column, path)
    for values in (prompt, output):
        values.setflags(write=False)
    return LengthCorpus(CorpusColumn(prompt), CorpusColumn(output))
