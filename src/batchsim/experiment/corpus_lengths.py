"""A `lengths: {kind: corpus}` section -> paired prompt / output samplers.

The two samplers pick the same corpus rows when driven by generators from the same seed (see
``workloads/corpus.py``); ``traffic.py`` gives them the same seed for that reason.
"""

from __future__ import annotations

from pathlib import Path

import batchsim.workloads as wl
from batchsim.experiment.schema import CorpusLengths
from batchsim.workloads.corpus import CorpusColumn, InOrderColumn, load_length_corpus


def corpus_samplers(config: CorpusLengths, base_dir: Path,
                    ) -> tuple[CorpusColumn, CorpusColumn] | tuple[InOrderColumn, InOrderColumn]:
    """(prompt sampler, output sampler) over the corpus rows: drawn at random, or in order."""
    path = wl.resolve_trace_path(config.path, base_dir)
    corpus = load_length_corpus(path, config.prompt_column, config.output_column)
    if config.order == "in_order":
        return InOrderColumn(corpus.prompt.values), InOrderColumn(corpus.output.values)
    return corpus.prompt, corpus.output
