"""Mixture-of-experts and MLA models: parameters, active parameters, KV bytes per token."""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path

import pytest

from batchsim.gpu.model_spec import ModelError, load_model

_MODELS = Path(str(files("batchsim.hardware_profiles"))) / "models"
_DEEPSEEK_CONFIG = _MODELS / "deepseek-ai--DeepSeek-V3_config.json"
_MIXTRAL_CONFIG = _MODELS / "mistralai--Mixtral-8x7B-v0.1_config.json"
_BF16 = 2.0

# Published counts: Mistral AI (46.7B / 12.9B), the Qwen3 model cards (30.5B / 3.3B,
# 235B / 22B), the DeepSeek-V3 report (671B / 37B, multi-token-prediction module excluded).
_PUBLISHED = {
    "mixtral-8x7b": (46.7e9, 12.9e9),
    "qwen3-30b-a3b": (30.5e9, 3.3e9),
    "qwen3-235b-a22b": (235e9, 22e9),
    "deepseek-v3": (671e9, 37e9),
}


@pytest.mark.parametrize(("name", "counts"), sorted(_PUBLISHED.items()))
def test_total_and_active_parameters_match_published_counts(
    name: str, counts: tuple[float, float]
) -> None:
    spec = load_model(name)
    total, active = counts
    assert spec.weight_params() == pytest.approx(total, rel=0.02)
    assert spec.active_params() == pytest.approx(active, rel=0.02)
    assert spec.num_active_params == pytest.approx(active, rel=0.02)


def test_mixtral_parameters_by_hand() -> None:
    h, layers, vocab, experts, k, width = 4096, 32, 32000, 8, 2, 14336
    attention = h * (32 + 2 * 8) * 128 + 32 * 128 * h
    norms = 2 * h
    router = h * experts
    expert = 3 * h * width
    ends = 2 * vocab * h + h  # embedding, LM head, final norm
    spec = load_model("mixtral-8x7b")
    assert spec.weight_params() == ends + layers * (attention + norms + router + experts * expert)
    assert spec.active_params() == ends + layers * (attention + norms + router + k * expert)
    assert spec.weight_params() == 46_702_792_704  # models/model_architectures.csv
    assert spec.active_params() == 12_879_925_248


def test_deepseek_v3_mla_attention_parameters_by_hand() -> None:
    h, heads, q_rank, kv_rank, rope, nope, v = 7168, 128, 1536, 512, 64, 128, 128
    query = h * q_rank + q_rank + q_rank * heads * (nope + rope)
    kv = h * (kv_rank + rope) + kv_rank + kv_rank * heads * (nope + v)
    out = heads * v * h
    assert load_model("deepseek-v3").attention_params_per_layer() == query + kv + out


def test_deepseek_v3_parameters_by_hand() -> None:
    spec = load_model("deepseek-v3")
    h = 7168
    per_layer = spec.attention_params_per_layer() + 2 * h
    dense_mlp = 3 * h * 18432
    moe = h * 256 + 3 * h * 2048 * (256 + 1)  # router, 256 routed + 1 shared expert
    ends = 2 * 129280 * h + h
    assert spec.weight_params() == ends + 61 * per_layer + 3 * dense_mlp + 58 * moe
    # The table's count also holds the routers' 256-element correction biases (58 x 256).
    assert spec.weight_params() + 58 * 256 == 671_026_419_200


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("mixtral-8x7b", 2 * 32 * 8 * 128 * _BF16),  # K and V of 8 KV heads, 32 layers
        ("qwen3-30b-a3b", 2 * 48 * 4 * 128 * _BF16),
        ("qwen3-235b-a22b", 2 * 94 * 4 * 128 * _BF16),
        ("deepseek-v3", 61 * (512 + 64) * _BF16),  # one latent + rotary key a layer
    ],
)
def test_kv_bytes_per_token(name: str, expected: float) -> None:
    assert load_model(name).kv_bytes_per_token(_BF16) == expected


def test_deepseek_v3_kv_matches_the_published_table() -> None:
    assert load_model("deepseek-v3").kv_bytes_per_token(_BF16) == 70272  # model_architectures


def test_hf_configs_give_the_library_models() -> None:
    for path, name in ((_DEEPSEEK_CONFIG, "deepseek-v3"), (_MIXTRAL_CONFIG, "mixtral-8x7b")):
        from_config, library = load_model(str(path)), load_model(name)
        assert from_config.moe == library.moe
        assert from_config.mla == library.mla
        assert from_config.weight_params() == library.weight_params()
        assert from_config.active_params() == library.active_params()
        assert from_config.num_active_params == from_config.active_params()


def test_qwen3_moe_config_is_read(tmp_path: Path) -> None:
    config = {
        "model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144,
        "moe_intermediate_size": 768, "num_hidden_layers": 48, "num_attention_heads": 32,
        "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128,
        "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [],
        "vocab_size": 151936, "max_position_embeddings": 40960, "tie_word_embeddings": False,
    }
    path = tmp_path / "qwen3_config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    spec = load_model(str(path))
    assert spec.moe == load_model("qwen3-30b-a3b").moe
    assert spec.weight_params() == load_model("qwen3-30b-a3b").weight_params()


def test_interleaved_dense_layers_are_refused(tmp_path: Path) -> None:
    config = json.loads(_MIXTRAL_CONFIG.read_text(encoding="utf-8"))
    config["decoder_sparse_step"] = 2
    path = tmp_path / "sparse.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(ModelError, match="decoder_sparse_step"):
        load_model(str(path))


def test_first_dense_layers_keep_the_dense_width() -> None:
    spec = load_model("deepseek-v3")
    assert (spec.num_dense_layers, spec.num_moe_layers) == (3, 58)
    assert load_model("mixtral-8x7b").num_dense_layers == 0


def test_expected_experts_touched_grows_to_all() -> None:
    moe = load_model("deepseek-v3").moe
    assert moe is not None
    assert moe.expected_experts_touched(1) == pytest.approx(8)
    assert moe.expected_experts_touched(4) == pytest.approx(256 * (1 - (1 - 8 / 256) ** 4))
    assert moe.expected_experts_touched(2000) == pytest.approx(256)


def test_the_models_command_lists_total_and_active_parameters() -> None:
    from typer.testing import CliRunner

    from batchsim.apps.cli import app

    result = CliRunner().invoke(app, ["models"])
    assert result.exit_code == 0, result.output
    lines = {line.split()[0]: line for line in result.output.splitlines()}
    assert "46.7 B params (MoE, 12.9 B active)" in lines["mixtral-8x7b"]
    assert "(MoE, 37.6 B active; MLA)" in lines["deepseek-v3"]
    assert "KV 69 KiB/token" in lines["deepseek-v3"]  # 61 layers x 576 latent elements x 2 B
    assert "(dense)" in lines["llama-3.1-8b"] and "KV 128 KiB/token" in lines["llama-3.1-8b"]
