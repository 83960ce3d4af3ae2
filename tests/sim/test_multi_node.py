"""Layouts beyond one NVLink domain (gpu/network.py): hand-computed collectives on two HGX
nodes, and tensor parallelism across nodes against the same group inside one domain."""

from __future__ import annotations

import dataclasses
from importlib import resources
from typing import Any

import numpy as np
import pytest

from batchsim.gpu.cost_model import RooflineCostModel
from batchsim.gpu.hardware import GpuProfile, HardwareError, load_gpu_profile, parse_gpu_profile
from batchsim.gpu.memory import ModelDoesNotFitError, plan_memory
from batchsim.gpu.model_spec import load_model
from batchsim.gpu.network import (
    cross_domain_alltoall_seconds,
    group_allreduce_seconds,
    group_span,
    span_problem,
)
from batchsim.gpu.pipeline_stages import boundary_bandwidths
from batchsim.gpu.roofline import allreduce_seconds

H200 = load_gpu_profile("h200-sxm")  # 8-GPU NVLink domain, 450 GB/s NVLink, 50 GB/s NIC, 9.6 µs
GB200 = load_gpu_profile("gb200")  # 72-GPU NVLink domain
MESSAGE = 8.0e6  # bytes


def test_two_node_allreduce_is_the_domain_ring_plus_a_network_ring_of_one_eighth() -> None:
    span = group_span(H200, 16)
    assert (span.domains, span.per_domain) == (2, 8)
    eff = H200.efficiency
    inside = allreduce_seconds(MESSAGE, 8.0, link_bw=450e9, eff=eff)
    # Two domains: a ring of 2 over the network, 2 steps, each moving half of a 1/8 shard.
    network = 2 * 9.6e-6 + 2 * (1 / 2) * (MESSAGE / 8) / 50e9
    assert network == pytest.approx(39.2e-6)
    got = group_allreduce_seconds(MESSAGE, span, gpu=H200, eff=eff)
    assert got == pytest.approx(inside + network, rel=1e-12)


def test_two_node_alltoall_is_bound_by_the_half_that_leaves_the_node() -> None:
    span = group_span(H200, 16)
    # Each GPU keeps 1/16, sends 7/16 over NVLink and 8/16 over its NIC, at once.
    nvlink = 1e-5 + 7 / 16 * MESSAGE / 450e9
    network = 9.6e-6 + 8 / 16 * MESSAGE / 50e9
    assert network > nvlink
    got = cross_domain_alltoall_seconds(MESSAGE, span, gpu=H200)
    assert got == pytest.approx(network, rel=1e-12)
    assert got == pytest.approx(89.6e-6)


def test_a_group_inside_one_domain_is_priced_as_before() -> None:
    for gpu, gpus in ((H200, 8), (GB200, 16), (GB200, 72)):
        span = group_span(gpu, gpus)
        assert not span.crosses_domains
        tokens = np.arange(1.0, 300.0) * 14336.0
        expected = allreduce_seconds(tokens, float(gpus),
                                     link_bw=gpu.intra_node_bandwidth_bytes_per_s,
                                     eff=gpu.efficiency)
        assert np.array_equal(group_allreduce_seconds(tokens, span, gpu=gpu, eff=gpu.efficiency),
                              expected)


def _communication(gpu: GpuProfile, step: tuple[list[int], list[int]],
                   layout: dict[str, Any]) -> float:
    model = load_model("deepseek-v3")
    cost = RooflineCostModel(model, gpu, tensor_parallel=16, weight_dtype="fp8",
                             kv_dtype="bf16", **layout)
    new, context = step
    return cost.step_time(np.array(new), np.array(context), len(new)).communication_s


PREFILL = ([8192], [0])  # one 8,192-token chunk: the collectives are bandwidth-bound
DECODE = ([1] * 64, [2000] * 64)  # 64 decodes: latency-bound


@pytest.mark.parametrize("layout", [{}, {"expert_parallel": 16, "data_parallel_attention": True}])
def test_tp16_across_two_hgx_nodes_pays_more_communication_than_inside_one_domain(
    layout: dict[str, Any]
) -> None:
    one_domain = dataclasses.replace(H200, nvlink_domain_gpus=16)  # the same GPU, a wider fabric
    across = _communication(H200, PREFILL, layout)
    assert across > 1.5 * _communication(one_domain, PREFILL, layout) > 0
    # Inside an NVL72 rack the same layout stays on NVLink (a faster one, too).
    assert across > 1.5 * _communication(GB200, PREFILL, layout)
    assert _communication(H200, DECODE, layout) > _communication(one_domain, DECODE, layout)


def test_a_group_beyond_the_domain_needs_the_network_and_whole_domains() -> None:
    a100 = load_gpu_profile("a100-sxm-80gb")  # no network in its profile
    problem = span_problem(a100, 16, "tensor_parallel=16")
    assert problem is not None and "inter_node_bandwidth_bytes_per_s" in problem
    problem = span_problem(H200, 12, "tensor_parallel=12")
    assert problem is not None and "multiple of the 8-GPU NVLink domain" in problem
    assert span_problem(H200, 16, "tensor_parallel=16") is None
    assert span_problem(GB200, 72, "tensor_parallel=72") is None
    with pytest.raises(ModelDoesNotFitError, match="inter_node_bandwidth_bytes_per_s"):
        plan_memory(load_model("llama-3.1-70b"), a100, tensor_parallel=16, weight_dtype="bf16",
                    kv_dtype="bf16", gpu_memory_utilization=0.9, block_size=16)


def test_a_pipeline_boundary_between_domains_takes_the_slower_of_nic_and_pcie() -> None:
    # TP8 x PP2 on HGX H200: the hand-off leaves the node over the 50 GB/s NIC (PCIe: 64).
    assert boundary_bandwidths(H200, 8, 2) == (50e9,)
    # On an NVL72 rack it stays on NVLink, though it leaves a 4-GPU compute tray.
    assert boundary_bandwidths(GB200, 8, 2) == (GB200.intra_node_bandwidth_bytes_per_s,)


def test_profile_network_keys_come_together_and_domains_hold_whole_nodes() -> None:
    text = (resources.files("batchsim.hardware_profiles").joinpath("gpus/h100-sxm.yaml")
            .read_text(encoding="utf-8"))
    lonely = text.replace("inter_node_latency_s: 9.6e-6", "")
    with pytest.raises(HardwareError, match="needs 'inter_node_latency_s'"):
        parse_gpu_profile(lonely, "p.yaml")
    odd = text.replace("gpus_per_node: 8 ", "gpus_per_node: 8\nnvlink_domain_gpus: 12 ")
    with pytest.raises(HardwareError, match="nvlink_domain_gpus"):
        parse_gpu_profile(odd, "p.yaml")
