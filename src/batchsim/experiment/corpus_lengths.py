"""A `lengths: {kind: corpus}` section -> paired prompt / output samplers.

The two samplers pick the same corpus rows when driven by generators from the same seed (see
``workloads/corpus.py``); ``traffic.py`` gives them the same seed for that reason.
"""

from __future__ import annotations

from pathlib import Path

import batchsim.workloads as wl
from batchsim.experiment.schema import CorpusLengths
from batchsim.workloads.corpus import CorpusColumn, load_length_corpus


def corpus_samplers(config: CorpusLengths, base_dir: Path) -> tuple[CorpusColumn, CorpusColumn]:
    """(prompt sampler, output sampler) over the corpus rows."""
    path = wl.resolve_trace_path(config.path, base_dir)
    corpus = load_length_corpus(path, config.prompt_column, config.output_column)
    return corpus.prompt, corpus.output
