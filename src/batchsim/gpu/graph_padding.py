"""A serving engine's CUDA-graph batch sizes: what a step's GEMMs really compute.

An engine captures a CUDA graph for each of a few batch sizes and replays the smallest one
that holds a step, so a step of 33 tokens runs the 40-token graph: its GEMMs and all-reduces
compute the padding rows too, and throw them away. Attention and the LM head see only the real
tokens (vLLM runs attention outside its piecewise graphs and computes logits for the sampled
rows only; the padding sequences of a decode graph have no KV to read). A step larger than the
largest size runs without a graph, at its own size. docs/background/engines.md gives each
engine's sizes and the steps it graphs.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise


@dataclass(frozen=True, slots=True)
class GraphPadding:
    """`sizes`: the captured batch sizes (tokens of a step), ascending; `decode_only`: only
    steps in which every sequence computes one token replay a graph (SGLang, TensorRT-LLM),
    otherwise any step of at most the largest size does (vLLM's piecewise graphs)."""

    sizes: tuple[int, ...]
    decode_only: bool = False

    def __post_init__(self) -> None:
        if not self.sizes:
            raise ValueError("CUDA-graph sizes: at least one size is needed")
        if any(size < 1 for size in self.sizes):
            raise ValueError("CUDA-graph sizes must be at least 1")
        if any(later <= earlier for earlier, later in pairwise(self.sizes)):
            raise ValueError("CUDA-graph sizes must be strictly ascending")

    def table(self) -> list[int]:
        """`table[n]`: the tokens a step of `n` tokens computes, for `n` up to the largest size
        (`table[0]` is 0: no step has no tokens)."""
        padded = [0]
        for size in self.sizes:
            padded.extend([size] * (size - len(padded) + 1))
        return padded
