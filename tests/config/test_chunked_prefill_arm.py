"""The `chunked_prefill` arm: its defaults, its one cross-field rule, and the policy it builds."""

from collections.abc import Callable
from pathlib import Path
from typing import Any

from batchsim.experiment.policy_factory import build_policy
from batchsim.experiment.schema import ChunkedPrefillArm, Experiment
from batchsim.policies.chunked_prefill import ChunkedPrefill
from tests.config.test_config_loader import only_problem

WriteYaml = Callable[[str | dict[str, Any]], Path]


def test_defaults_are_vllm_v1_style() -> None:
    arm = ChunkedPrefillArm(name="sarathi")
    assert (arm.token_budget, arm.max_num_seqs) == (2048, 256)
    assert arm.long_prefill_token_threshold is None
    assert arm.preemption == "recompute"


def test_parses_by_kind(minimal_data: dict[str, Any]) -> None:
    minimal_data["policies"].append(
        {"name": "sarathi", "kind": "chunked_prefill", "token_budget": 512,
         "long_prefill_token_threshold": 256, "preemption": "swap"})
    arm = Experiment.model_validate(minimal_data).policies[2]
    assert arm == ChunkedPrefillArm(name="sarathi", token_budget=512,
                                    long_prefill_token_threshold=256, preemption="swap")


def test_a_budget_below_max_num_seqs_names_the_key(write_yaml: WriteYaml,
                                                   minimal_data: dict[str, Any]) -> None:
    minimal_data["policies"].append(
        {"name": "sarathi", "kind": "chunked_prefill", "token_budget": 128, "max_num_seqs": 256})
    assert only_problem(write_yaml(minimal_data)) == (
        "policies.2.token_budget: must be >= max_num_seqs (got token_budget=128, "
        "max_num_seqs=256), as in vLLM: every running request decodes one token per step"
    )


def test_builds_a_chunked_prefill_policy_with_its_knobs() -> None:
    arm = ChunkedPrefillArm(name="sarathi", token_budget=512, long_prefill_token_threshold=128)
    policy = build_policy(arm, 0, num_blocks=100, block_size=16, swap_blocks=10,
                          max_model_len=8192)
    assert isinstance(policy, ChunkedPrefill)
    assert (policy.token_budget, policy.long_prefill_token_threshold) == (512, 128)
    assert policy.swap_space is not None and policy.swap_space.capacity_blocks == 10
