"""Collectives of a GPU group that spans more than one NVLink domain (docs/design.md §3,
multi-node layouts).

A profile's NVLink domain (`nvlink_domain_gpus`: an HGX board's 8, an NVL72 rack's 72) is the
set of GPUs one NVLink fabric joins. A tensor-parallel or expert-parallel group of t GPUs
larger than that is placed on n = t / d whole domains of d GPUs each, and every GPU reaches the
other domains through its own NIC (one rail per GPU, as the DGX and NVL72 compute trays are
built) at `inter_node_bandwidth_bytes_per_s` after `inter_node_latency_s`.

- **All-reduce** is hierarchical: a reduce-scatter inside each domain, an all-reduce of each
  GPU's 1/d shard with its peers of the other domains (the d shards in parallel, one per rail),
  an all-gather inside each domain. The two intra-domain halves together move what one
  all-reduce over d GPUs moves, so they are priced by the fitted `roofline.allreduce_seconds`
  over d; the inter-domain ring over n ranks moves 2(n−1)/n of the shard at the NIC's rate and
  pays a latency at each of its 2(n−1) steps, as NCCL's tuning model counts a ring's network
  steps (src/graph/tuning.cc, `nInterSteps`).
- **All-to-all** sends (d−1)/t of each GPU's buffer to its own domain over NVLink and (t−d)/t
  to the other domains over its NIC, both at once: the slower of the two sets the time.

The network terms use the spec rate with no fitted efficiency (no multi-node table has been
fitted), so they are optimistic, as the intra-node all-to-all is (docs/fidelity.md).
A group that fits one domain never reaches this module's arithmetic: its cost is the
single-domain formula, unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from batchsim.gpu.hardware import GpuProfile, RooflineEfficiency
from batchsim.gpu.roofline import allreduce_seconds

_FloatOrArray = TypeVar("_FloatOrArray", float, np.ndarray)


@dataclass(frozen=True, slots=True)
class GroupSpan:
    """How a group of `gpus` GPUs lies on NVLink domains: `domains` of `per_domain` each."""

    gpus: int
    domains: int

    @property
    def per_domain(self) -> int:
        return self.gpus // self.domains

    @property
    def crosses_domains(self) -> bool:
        return self.domains > 1


def group_span(gpu: GpuProfile, gpus: int) -> GroupSpan:
    """The domains a group of `gpus` fills; call `span_problem` first to know it can."""
    domain = gpu.domain_gpus
    return GroupSpan(gpus, 1 if gpus <= domain else gpus // domain)


def span_problem(gpu: GpuProfile, gpus: int, what: str) -> str | None:
    """Why a group of `gpus` GPUs (`what`, e.g. "tensor_parallel=16") cannot be priced on
    `gpu`, or None when it can: within one domain always; beyond it only on whole domains of a
    profile that gives the network between them."""
    domain = gpu.domain_gpus
    if gpus <= domain:
        return None
    if gpu.inter_node_bandwidth_bytes_per_s is None or gpu.inter_node_latency_s is None:
        return (f"{what} spans more than the {domain}-GPU NVLink domain of {gpu.name}, whose "
                "profile gives no network between domains (inter_node_bandwidth_bytes_per_s, "
                "inter_node_latency_s); keep it within one domain or use a profile that gives "
                "them")
    if gpus % domain:
        return (f"{what} must be a multiple of the {domain}-GPU NVLink domain of {gpu.name} "
                f"to span several (whole domains, one NIC per GPU), got {gpus}")
    return None


def group_allreduce_seconds(
    message_bytes: _FloatOrArray, span: GroupSpan, *, gpu: GpuProfile, eff: RooflineEfficiency,
) -> _FloatOrArray:
    """One all-reduce of `message_bytes` over the group: the fitted ring inside a domain, the
    hierarchical one across domains."""
    link_bw = gpu.intra_node_bandwidth_bytes_per_s
    if not span.crosses_domains:
        return allreduce_seconds(message_bytes, float(span.gpus), link_bw=link_bw, eff=eff)
    d, n = float(span.per_domain), float(span.domains)
    inside = (allreduce_seconds(message_bytes, d, link_bw=link_bw, eff=eff) if d > 1
              else 0.0 * message_bytes)
    return inside + _inter_domain_allreduce(message_bytes / d, n, gpu)


def _inter_domain_allreduce(shard_bytes: _FloatOrArray, domains: float,
                            gpu: GpuProfile) -> _FloatOrArray:
    """A ring all-reduce of one GPU's shard with its peers on the other domains' rails."""
    bandwidth, latency = gpu.inter_node_bandwidth_bytes_per_s, gpu.inter_node_latency_s
    assert bandwidth is not None and latency is not None  # span_problem refused it otherwise
    steps = 2.0 * (domains - 1.0)
    return steps * latency + steps / domains * shard_bytes / bandwidth


def cross_domain_alltoall_seconds(
    message_bytes: _FloatOrArray, span: GroupSpan, *, gpu: GpuProfile,
) -> _FloatOrArray:
    """One all-to-all in which each GPU sends `message_bytes` spread evenly over the group's
    GPUs on several domains: its own domain's share over NVLink, the rest over its NIC."""
    bandwidth, latency = gpu.inter_node_bandwidth_bytes_per_s, gpu.inter_node_latency_s
    assert bandwidth is not None and latency is not None  # span_problem refused it otherwise
    t, d = float(span.gpus), float(span.per_domain)
    nvlink_bw = gpu.intra_node_bandwidth_bytes_per_s
    nvlink = gpu.p2p_latency_s + (d - 1.0) / t * message_bytes / nvlink_bw
    network = latency + (t - d) / t * message_bytes / bandwidth
    return np.maximum(nvlink, network) if isinstance(network, np.ndarray) else max(nvlink, network)


__all__ = ["GroupSpan", "cross_domain_alltoall_seconds", "group_allreduce_seconds",
           "group_span", "span_problem"]
