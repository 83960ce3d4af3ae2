"""The model library and Hugging Face config loading."""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path

import pytest

from batchsim.gpu.dtypes import bytes_per_element
from batchsim.gpu.model_spec import ModelError, ModelSpec, library_model_names, load_model

_REQUIRED_LIBRARY_MODELS = {
    "llama-2-7b",
    "llama-2-70b",
    "llama-3.1-8b",
    "llama-3.1-70b",
    "mistral-7b",
    "qwen2.5-7b",
    "qwen2.5-72b",
}

# kv_bytes_per_token_fp16 column of the project's models/model_architectures.csv.
_KV_BYTES_PER_TOKEN_BF16 = {
    "llama-2-7b": 524288,
    "llama-2-70b": 327680,
    "llama-3.1-8b": 131072,
    "llama-3.1-70b": 327680,
    "mistral-7b": 131072,
    "qwen2.5-7b": 57344,
    "qwen2.5-72b": 327680,
}

_SHIPPED_8B_CONFIG = "meta-llama--Meta-Llama-3.1-8B_config.json"


def _shipped_config(file_name: str) -> Path:
    return Path(str(files("batchsim.hardware_profiles"))) / "models" / file_name


def _dims(spec: ModelSpec) -> tuple[int, ...]:
    return (
        spec.num_layers,
        spec.hidden_size,
        spec.num_heads,
        spec.num_kv_heads,
        spec.head_dim,
        spec.intermediate_size,
        spec.vocab_size,
        spec.max_position_embeddings,
        int(spec.tie_word_embeddings),
    )


def test_library_has_the_required_dense_models() -> None:
    assert set(library_model_names()) >= _REQUIRED_LIBRARY_MODELS


@pytest.mark.parametrize("name", library_model_names())
def test_parameter_count_from_architecture_matches_published_count(name: str) -> None:
    spec = load_model(name)
    assert spec.weight_params() == pytest.approx(spec.num_params, rel=0.02)


@pytest.mark.parametrize(("name", "expected"), sorted(_KV_BYTES_PER_TOKEN_BF16.items()))
def test_kv_bytes_per_token_matches_published_table(name: str, expected: int) -> None:
    assert load_model(name).kv_bytes_per_token(bytes_per_element("bf16")) == expected


def test_fp8_kv_halves_bytes_per_token() -> None:
    spec = load_model("llama-3.1-8b")
    assert spec.kv_bytes_per_token(1.0) == spec.kv_bytes_per_token(2.0) / 2


def test_library_names_are_case_insensitive() -> None:
    assert load_model("Llama-3.1-8B") == load_model("llama-3.1-8b")


def test_llama_3_and_3_1_differ_only_in_context_length() -> None:
    assert load_model("llama-3-8b").max_position_embeddings == 8192
    assert load_model("llama-3.1-8b").max_position_embeddings == 131072


def test_hf_config_gives_the_library_dimensions() -> None:
    from_config = load_model(str(_shipped_config(_SHIPPED_8B_CONFIG)))
    from_library = load_model("llama-3.1-8b")
    assert _dims(from_config) == _dims(from_library)
    assert from_config.num_params == from_library.num_params
    assert from_config.name == "meta-llama--Meta-Llama-3.1-8B"


def test_hf_70b_config_gives_the_library_dimensions() -> None:
    path = _shipped_config("meta-llama--Meta-Llama-3.1-70B_config.json")
    assert _dims(load_model(str(path))) == _dims(load_model("llama-3.1-70b"))


def test_relative_config_path_resolves_against_base_dir() -> None:
    base = _shipped_config(_SHIPPED_8B_CONFIG).parent
    assert load_model(_SHIPPED_8B_CONFIG, base_dir=base).hidden_size == 4096


def test_config_directory_means_its_config_json(tmp_path: Path) -> None:
    model_dir = tmp_path / "My-Model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(
        _shipped_config(_SHIPPED_8B_CONFIG).read_text(encoding="utf-8"), encoding="utf-8"
    )
    spec = load_model("My-Model/", base_dir=tmp_path)
    assert spec.name == "My-Model"
    assert spec.num_layers == 32


def test_missing_kv_heads_and_head_dim_default_to_multi_head_attention(tmp_path: Path) -> None:
    config = {
        "num_hidden_layers": 2,
        "hidden_size": 256,
        "num_attention_heads": 4,
        "intermediate_size": 512,
        "vocab_size": 1000,
        "max_position_embeddings": 2048,
    }
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    spec = load_model(str(path))
    assert (spec.num_kv_heads, spec.head_dim) == (4, 64)
    assert spec.num_params == spec.weight_params()


def test_unknown_name_lists_the_known_models() -> None:
    with pytest.raises(ModelError, match=r"unknown model 'gpt-5'.*llama-3\.1-8b"):
        load_model("gpt-5")


def test_config_missing_a_key_names_the_file_and_key(tmp_path: Path) -> None:
    config = json.loads(_shipped_config(_SHIPPED_8B_CONFIG).read_text(encoding="utf-8"))
    del config["hidden_size"]
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(ModelError, match=r"broken\.json: missing required key 'hidden_size'"):
        load_model(str(path))


def test_config_with_a_bad_value_names_the_key(tmp_path: Path) -> None:
    config = json.loads(_shipped_config(_SHIPPED_8B_CONFIG).read_text(encoding="utf-8"))
    config["num_hidden_layers"] = "thirty-two"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(ModelError, match=r"'num_hidden_layers' must be a positive integer"):
        load_model(str(path))


@pytest.mark.parametrize("expert_key", ["num_local_experts", "n_routed_experts"])
def test_mixture_of_experts_config_without_top_k_names_the_key(
    tmp_path: Path, expert_key: str
) -> None:
    config = json.loads(_shipped_config(_SHIPPED_8B_CONFIG).read_text(encoding="utf-8"))
    config[expert_key] = 8
    config["moe_intermediate_size"] = 1024
    path = tmp_path / "moe.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(ModelError, match="missing required key 'num_experts_per_tok'"):
        load_model(str(path))


def test_missing_or_invalid_json_files_are_model_errors(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="no such model config file"):
        load_model(str(tmp_path / "absent.json"))
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json", encoding="utf-8")
    with pytest.raises(ModelError, match=r"garbage\.json: not a readable JSON file"):
        load_model(str(garbage))


def test_errors_are_one_line_value_errors() -> None:
    with pytest.raises(ValueError) as excinfo:
        load_model("nope")
    assert "\n" not in str(excinfo.value)


def test_tensor_parallel_must_split_query_heads_evenly() -> None:
    spec = load_model("qwen2.5-7b")  # 28 query heads, 4 KV heads
    spec.check_tensor_parallel(4)
    with pytest.raises(ModelError, match="28 attention heads"):
        spec.check_tensor_parallel(8)


def test_kv_heads_are_replicated_when_fewer_than_gpus() -> None:
    spec = load_model("llama-3.1-8b")  # 8 KV heads
    assert spec.kv_heads_per_gpu(2) == 4
    assert spec.kv_heads_per_gpu(8) == 1
    assert spec.kv_heads_per_gpu(16) == 1
