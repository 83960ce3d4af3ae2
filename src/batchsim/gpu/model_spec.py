"""The architecture of a decoder-only model, and how to load one by name or from a config.

A `ModelSpec` holds only what sizes memory and cost: layer count and widths, attention heads,
vocabulary, and — for mixture-of-experts models — the experts (`gpu.moe_spec.MoESpec`) and —
for multi-head latent attention — the latent widths (`gpu.mla.MLASpec`). Models come from the
shipped library (`hardware_profiles/models/library.yaml`) or from a Hugging Face `config.json`
(dense Llama/Mistral/Qwen, Mixtral, Qwen3-MoE and DeepSeek-V2/V3 layouts).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from batchsim.gpu.attention_layers import (
    LINEAR,
    SLIDING,
    STATE_ELEMENT_BYTES,
    LayerKinds,
    LayerKindsError,
    LinearAttentionSpec,
    interval_layer_types,
)
from batchsim.gpu.mla import MLASpec
from batchsim.gpu.moe_spec import MoESpec
from batchsim.gpu.yaml_load import safe_load

_LIBRARY_PACKAGE = "batchsim.hardware_profiles"
_LIBRARY_FILE = ("models", "library.yaml")



class ModelError(ValueError):
    """A model that cannot be found, parsed or used; the message is one line."""


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """Dimensions of a transformer with grouped-query (or latent) attention and gated MLPs.

    `intermediate_size` is the dense MLP's width: every layer's for a dense model, only the
    first `moe.first_dense_layers` layers' for a mixture-of-experts one. For an MLA model
    `num_kv_heads` equals `num_heads` and `head_dim` is the query/key head width; its cache
    is `mla.latent_dim` per layer instead.
    """

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    num_params: int
    tie_word_embeddings: bool
    source: str = ""
    moe: MoESpec | None = None
    mla: MLASpec | None = None
    num_active_params: int = 0  # published parameters used per token (MoE); 0 for dense
    layer_kinds: LayerKinds | None = None  # None: every layer full attention

    @property
    def is_hybrid(self) -> bool:
        """Whether some layers are sliding-window or linear attention."""
        return self.layer_kinds is not None and self.layer_kinds.is_hybrid

    @property
    def num_full_attention_layers(self) -> int:
        """Layers whose KV grows with the context."""
        return self.num_layers if self.layer_kinds is None else self.layer_kinds.full

    @property
    def num_linear_layers(self) -> int:
        return 0 if self.layer_kinds is None else self.layer_kinds.linear

    @property
    def num_moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts (none for a dense model)."""
        if self.moe is None:
            return 0
        return max(0, self.num_layers - self.moe.first_dense_layers)

    @property
    def num_dense_layers(self) -> int:
        """Layers with a dense MLP."""
        return self.num_layers - self.num_moe_layers

    def weight_params(self) -> int:
        """Parameter count implied by the dimensions (biases, e.g. Qwen's qkv bias, ignored)."""
        return self._params(active=False)

    def active_params(self) -> int:
        """Parameters one token passes through: the routed experts it uses, not all of them."""
        return self._params(active=True)

    def _params(self, *, active: bool) -> int:
        h = self.hidden_size
        embedding = self.vocab_size * h
        lm_head = 0 if self.tie_word_embeddings else embedding
        final_norm = h
        norms = self.num_layers * 2 * h  # two RMSNorm weight vectors a layer
        mlp = self.num_dense_layers * 3 * h * self.intermediate_size
        if self.moe is not None:
            mlp += self.num_moe_layers * self.moe.layer_params(h, active=active)
        return embedding + self.attention_params() + norms + mlp + final_norm + lm_head

    def attention_params(self) -> int:
        """Token-mixer parameters of all layers: attention layers' projections and linear
        layers' (which have their own shapes)."""
        linear = self.num_linear_layers
        total = (self.num_layers - linear) * self.attention_params_per_layer()
        if linear and self.layer_kinds is not None and self.layer_kinds.linear_spec is not None:
            total += linear * self.layer_kinds.linear_spec.params(self.hidden_size)
        return total

    def attention_params_per_layer(self) -> int:
        """Q, K, V and output projections (MLA: its down/up projections and their norms)."""
        if self.mla is not None:
            return self.mla.params(self.hidden_size, self.num_heads)
        h, d = self.hidden_size, self.head_dim
        return h * (self.num_heads + 2 * self.num_kv_heads) * d + self.num_heads * d * h

    def kv_bytes_per_token(self, kv_dtype_bytes: float) -> float:
        """KV-cache bytes one token occupies over the whole model (one copy, before any
        replication across GPUs). MLA: one latent per layer shared by all heads.

        Hybrid models: the full-attention layers only, the part that grows with the context
        (`windowed_kv_bytes_per_token` and `state_bytes_per_sequence` are the bounded rest)."""
        layers = self.num_full_attention_layers
        if self.mla is not None:
            return self.mla.kv_bytes_per_token(layers, kv_dtype_bytes)
        return 2 * layers * self.num_kv_heads * self.head_dim * kv_dtype_bytes

    def windowed_kv_bytes_per_token(self, kv_dtype_bytes: float) -> float:
        """KV bytes per token of the sliding-window layers, held for at most `window`
        tokens of a sequence."""
        kinds = self.layer_kinds
        sliding = 0 if kinds is None else kinds.sliding
        return 2 * sliding * self.num_kv_heads * self.head_dim * kv_dtype_bytes

    def state_bytes_per_sequence(self) -> int:
        """Bytes of linear-attention state one sequence holds, whatever its length."""
        if self.layer_kinds is None:
            return 0
        return self.layer_kinds.state_elements_per_sequence() * STATE_ELEMENT_BYTES

    def kv_bytes_per_sequence(self, context_tokens: int, kv_dtype_bytes: float) -> float:
        """Cache bytes of one sequence of `context_tokens` tokens over the whole model:
        full layers grow with it, sliding layers stop at the window, state is fixed."""
        window = 0 if self.layer_kinds is None else self.layer_kinds.window
        return (self.kv_bytes_per_token(kv_dtype_bytes) * context_tokens
                + self.windowed_kv_bytes_per_token(kv_dtype_bytes)
                * min(context_tokens, window)
                + self.state_bytes_per_sequence())

    def check_tensor_parallel(self, tensor_parallel: int) -> None:
        """Raise ModelError unless the attention heads can be split over `tensor_parallel` GPUs.

        Query heads must divide evenly. KV heads must either divide evenly or, when there are
        fewer KV heads than GPUs, be replicated — the rules vLLM enforces.
        """
        tp = tensor_parallel
        if tp < 1:
            raise ModelError(f"tensor_parallel must be a positive integer, got {tp}")
        if self.num_heads % tp:
            raise ModelError(
                f"{self.name} has {self.num_heads} attention heads, which tensor_parallel={tp} "
                "does not divide"
            )
        if self.mla is None and self.num_kv_heads % tp and tp % self.num_kv_heads:
            raise ModelError(
                f"{self.name} has {self.num_kv_heads} KV heads: tensor_parallel={tp} must divide "
                "them or be a multiple of them"
            )

    def kv_heads_per_gpu(self, tensor_parallel: int) -> int:
        """KV heads each GPU holds; below one head per GPU the heads are replicated (vLLM).

        Not meaningful for MLA, whose cache is one latent (`mla.latent_dim`) per layer.
        """
        return max(1, self.num_kv_heads // tensor_parallel)


def load_model(spec: str, base_dir: Path | None = None) -> ModelSpec:
    """A library model by name (case-insensitive), or a Hugging Face config.json by path.

    A spec that ends in `.json` or contains a path separator is a path, relative to
    `base_dir` (default: the working directory); a directory means its `config.json`.
    """
    if _looks_like_path(spec):
        path = Path(spec).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        return load_hf_config(path)
    return load_library_model(spec)


def library_model_names() -> list[str]:
    """Names of the shipped models, sorted."""
    return sorted(_read_library()[1])


def load_library_model(name: str) -> ModelSpec:
    """A model from the shipped library, by case-insensitive name."""
    where, models = _read_library()
    key = name.strip().lower()
    if key not in models:
        known = ", ".join(sorted(models))
        raise ModelError(
            f"unknown model {name!r}; known models: {known} "
            "(or give a path to a Hugging Face config.json)"
        )
    entry = models[key]
    if not isinstance(entry, Mapping):
        raise ModelError(f"{where}: models.{key} must be a mapping of architecture fields")
    return _spec_from_library_entry(key, entry, f"{where}: models.{key}")


def load_hf_config(path: Path) -> ModelSpec:
    """A ModelSpec from a Hugging Face config.json (dense, Mixtral, Qwen-MoE or DeepSeek MLA)."""
    if path.is_dir():
        path = path / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelError(f"{path}: no such model config file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelError(f"{path}: not a readable JSON file ({exc})") from None
    if not isinstance(config, dict):
        raise ModelError(f"{path}: expected a JSON object of model settings")
    return _spec_from_hf_config(_name_from_path(path), config, str(path))


def _looks_like_path(spec: str) -> bool:
    return spec.endswith(".json") or "/" in spec or "\\" in spec


def _name_from_path(path: Path) -> str:
    if path.name == "config.json":
        return path.parent.name or path.stem
    stem = path.stem
    for suffix in ("_config", "-config", ".config"):
        if stem.endswith(suffix):
            return stem[: -len(suffix)]
    return stem


def _read_library() -> tuple[str, Mapping[str, Any]]:
    resource = resources.files(_LIBRARY_PACKAGE).joinpath(*_LIBRARY_FILE)
    where = f"{_LIBRARY_PACKAGE}/{'/'.join(_LIBRARY_FILE)}"
    try:
        document = safe_load(resource.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ModelError(f"{where}: not valid YAML ({exc})") from None
    models = document.get("models") if isinstance(document, dict) else None
    if not isinstance(models, dict):
        raise ModelError(f"{where}: expected a top-level 'models' mapping")
    return where, {str(name).lower(): entry for name, entry in models.items()}


_LIBRARY_INT_FIELDS = (
    "num_layers",
    "hidden_size",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
    "num_params",
)


def _spec_from_library_entry(name: str, entry: Mapping[str, Any], where: str) -> ModelSpec:
    allowed = {*_LIBRARY_INT_FIELDS, "tie_word_embeddings", "source", "moe", "mla",
               "num_active_params", "attention_layers", "linear_attention"}
    unknown = sorted(set(entry) - allowed)
    if unknown:
        expected = ", ".join(sorted(allowed))
        raise ModelError(f"{where}: unknown key {unknown[0]!r}; expected one of {expected}")
    ints = {key: _positive_int(entry, key, where) for key in _LIBRARY_INT_FIELDS}
    moe = _library_block(entry, "moe", where, _MOE_FIELDS)
    mla = _library_block(entry, "mla", where, _MLA_FIELDS)
    spec = ModelSpec(
        name=name,
        layer_kinds=_library_layer_kinds(entry, ints["num_layers"], where),
        tie_word_embeddings=_bool(entry, "tie_word_embeddings", where, default=None),
        source=str(entry.get("source", "")),
        moe=MoESpec(**moe) if moe is not None else None,
        mla=MLASpec(**mla) if mla is not None else None,
        num_active_params=(
            _positive_int(entry, "num_active_params", where) if moe is not None else 0
        ),
        **ints,
    )
    _check_heads(spec, where)
    return spec


# Library `moe:` / `mla:` blocks: key -> required (True) or optional with default 0 / None.
_MOE_FIELDS = {
    "num_experts": True,
    "experts_per_token": True,
    "expert_intermediate_size": True,
    "num_shared_experts": False,
    "shared_expert_intermediate_size": False,
    "first_dense_layers": False,
}
_LAYER_FIELDS = {"full": True, "sliding": False, "window": False, "linear": False}
_LINEAR_FIELDS = {"num_key_heads": True, "num_value_heads": True, "key_head_dim": True,
                  "value_head_dim": True, "conv_kernel": True}


def _library_layer_kinds(entry: Mapping[str, Any], num_layers: int,
                         where: str) -> LayerKinds | None:
    """A library entry's `attention_layers:` (counts of each kind) and `linear_attention:`
    (the linear layers' widths) blocks; None without them (all full attention)."""
    counts = _library_block(entry, "attention_layers", where, _LAYER_FIELDS)
    if counts is None:
        if entry.get("linear_attention") is not None:
            raise ModelError(f"{where}: linear_attention needs an attention_layers block")
        return None
    widths = _library_block(entry, "linear_attention", where, _LINEAR_FIELDS)
    return _layer_kinds(counts, widths, num_layers, f"{where}.attention_layers")


def _layer_kinds(counts: Mapping[str, int], widths: Mapping[str, int] | None, num_layers: int,
                 where: str) -> LayerKinds:
    try:
        kinds = LayerKinds(
            full=counts["full"], sliding=counts.get("sliding", 0),
            window=counts.get("window", 0), linear=counts.get("linear", 0),
            linear_spec=LinearAttentionSpec(**widths) if widths is not None else None)
    except LayerKindsError as exc:
        raise ModelError(f"{where}: {exc}") from None
    if kinds.num_layers != num_layers:
        raise ModelError(f"{where}: {kinds.num_layers} layers of the listed kinds, but the "
                         f"model has {num_layers} (num_layers)")
    return kinds


_MLA_FIELDS = {
    "kv_lora_rank": True,
    "qk_rope_head_dim": True,
    "qk_nope_head_dim": True,
    "v_head_dim": True,
    "q_lora_rank": False,
}


def _library_block(
    entry: Mapping[str, Any], key: str, where: str, fields: Mapping[str, bool]
) -> dict[str, Any] | None:
    block = entry.get(key)
    if block is None:
        return None
    here = f"{where}.{key}"
    if not isinstance(block, Mapping):
        raise ModelError(f"{here}: must be a mapping of {', '.join(fields)}")
    unknown = sorted(set(block) - set(fields))
    if unknown:
        raise ModelError(f"{here}: unknown key {unknown[0]!r}; expected one of "
                         f"{', '.join(fields)}")
    values: dict[str, Any] = {}
    for name, required in fields.items():
        if required or block.get(name) is not None:
            values[name] = _positive_int(block, name, here) if required else _count(
                block, name, here)
    return values


def _spec_from_hf_config(name: str, config: Mapping[str, Any], where: str) -> ModelSpec:
    text = config.get("text_config")
    if isinstance(text, Mapping):  # a multimodal checkpoint (Gemma 3, Qwen3.5): its LM's keys
        config = {**config, **text}
    hidden = _positive_int(config, "hidden_size", where)
    heads = _positive_int(config, "num_attention_heads", where)
    mla = _mla_from_hf(config, where)
    moe = _moe_from_hf(config, where)
    if mla is not None:  # one latent for all heads; head_dim is the query/key width
        kv_heads, head_dim = heads, mla.qk_head_dim
    else:
        kv_heads = _positive_int(config, "num_key_value_heads", where, default=heads)
        head_dim = _positive_int(config, "head_dim", where, default=hidden // heads or None)
    partial = ModelSpec(
        name=name,
        num_layers=_positive_int(config, "num_hidden_layers", where),
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=_positive_int(config, "intermediate_size", where),
        vocab_size=_positive_int(config, "vocab_size", where),
        max_position_embeddings=_positive_int(config, "max_position_embeddings", where),
        num_params=0,
        tie_word_embeddings=_bool(config, "tie_word_embeddings", where, default=False),
        source=f"Hugging Face config {where}",
        moe=moe,
        mla=mla,
        layer_kinds=_hf_layer_kinds(config, where),
    )
    _check_heads(partial, where)
    # A config.json carries no parameter count; the architecture's count is exact for the
    # models it can describe (a DeepSeek checkpoint's multi-token-prediction layer is not
    # served and not counted).
    return replace(
        partial, num_params=partial.weight_params(),
        num_active_params=partial.active_params() if moe is not None else 0,
    )


def _moe_from_hf(config: Mapping[str, Any], where: str) -> MoESpec | None:
    """Mixtral (`num_local_experts`), Qwen-MoE (`num_experts`) or DeepSeek
    (`n_routed_experts`) routing; None for a dense config."""
    key = next((k for k in ("num_local_experts", "num_experts", "n_routed_experts")
                if config.get(k)), None)
    if key is None:
        return None
    if config.get("moe_layer_freq", 1) != 1 or config.get("decoder_sparse_step", 1) != 1:
        raise ModelError(f"{where}: MoE layers interleaved with dense ones "
                         "(moe_layer_freq / decoder_sparse_step != 1) are not supported")
    if config.get("mlp_only_layers"):
        raise ModelError(f"{where}: key 'mlp_only_layers' must be empty (dense layers inside "
                         "the MoE stack are not supported)")
    # Mixtral's experts are `intermediate_size` wide; Qwen and DeepSeek name the width.
    width_key = "intermediate_size" if key == "num_local_experts" else "moe_intermediate_size"
    expert_width = _positive_int(config, width_key, where)
    shared = _count(config, "n_shared_experts", where)  # DeepSeek: each expert-sized
    shared_width = expert_width if shared else 0
    qwen_shared = _count(config, "shared_expert_intermediate_size", where)
    if qwen_shared:  # Qwen2-MoE: one shared expert of its own width
        shared, shared_width = 1, qwen_shared
    return MoESpec(
        num_experts=_positive_int(config, key, where),
        experts_per_token=_positive_int(config, "num_experts_per_tok", where),
        expert_intermediate_size=expert_width,
        num_shared_experts=shared,
        shared_expert_intermediate_size=shared_width,
        first_dense_layers=_count(config, "first_k_dense_replace", where),
    )


def _hf_layer_kinds(config: Mapping[str, Any], where: str) -> LayerKinds | None:
    """Per-layer attention kinds: `layer_types` (gpt-oss, newer transformers configs), else
    `full_attention_interval` (Qwen3-Next, Qwen3.5: the others linear attention), else
    `sliding_window_pattern` (Gemma 3: the others sliding). None when every layer is full
    attention — or when a config names a `sliding_window` alone (Mistral), which batchsim
    keeps modelling as full attention, as before."""
    layers = _positive_int(config, "num_hidden_layers", where)
    types = config.get("layer_types")
    if types is None and config.get("full_attention_interval"):
        interval = _positive_int(config, "full_attention_interval", where)
        types = interval_layer_types(layers, interval, LINEAR)
    elif types is None and config.get("sliding_window_pattern"):
        pattern = _positive_int(config, "sliding_window_pattern", where)
        types = interval_layer_types(layers, pattern, SLIDING)
    if types is None:
        return None
    if not isinstance(types, list) or len(types) != layers:
        raise ModelError(f"{where}: key 'layer_types' must list one type for each of the "
                         f"{layers} layers")
    window = _count(config, "sliding_window", where)
    linear = _hf_linear_attention(config, where) if LINEAR in types else None
    try:
        kinds = LayerKinds.from_layer_types(types, window=window, linear_spec=linear)
    except LayerKindsError as exc:
        raise ModelError(f"{where}: key 'layer_types': {exc}") from None
    return kinds if kinds.is_hybrid else None


def _hf_linear_attention(config: Mapping[str, Any], where: str) -> LinearAttentionSpec:
    return LinearAttentionSpec(
        num_key_heads=_positive_int(config, "linear_num_key_heads", where),
        num_value_heads=_positive_int(config, "linear_num_value_heads", where),
        key_head_dim=_positive_int(config, "linear_key_head_dim", where),
        value_head_dim=_positive_int(config, "linear_value_head_dim", where),
        conv_kernel=_positive_int(config, "linear_conv_kernel_dim", where),
    )


def _mla_from_hf(config: Mapping[str, Any], where: str) -> MLASpec | None:
    if not config.get("kv_lora_rank"):
        return None
    q_lora = config.get("q_lora_rank")
    return MLASpec(
        kv_lora_rank=_positive_int(config, "kv_lora_rank", where),
        qk_rope_head_dim=_positive_int(config, "qk_rope_head_dim", where),
        qk_nope_head_dim=_positive_int(config, "qk_nope_head_dim", where),
        v_head_dim=_positive_int(config, "v_head_dim", where),
        q_lora_rank=None if q_lora is None else _positive_int(config, "q_lora_rank", where),
    )


def _check_heads(spec: ModelSpec, where: str) -> None:
    moe = spec.moe
    if moe is not None and moe.experts_per_token > moe.num_experts:
        raise ModelError(f"{where}: experts per token ({moe.experts_per_token}) exceed the "
                         f"{moe.num_experts} experts")
    if spec.num_heads % spec.num_kv_heads:
        raise ModelError(
            f"{where}: num_heads ({spec.num_heads}) must be a multiple of num_kv_heads "
            f"({spec.num_kv_heads})"
        )


def _positive_int(
    mapping: Mapping[str, Any], key: str, where: str, default: int | None = None
) -> int:
    value = mapping.get(key)
    if value is None:
        if default is not None:
            return default
        raise ModelError(f"{where}: missing required key {key!r}")
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ModelError(f"{where}: key {key!r} must be a positive integer, got {value!r}")
    return value


def _count(mapping: Mapping[str, Any], key: str, where: str) -> int:
    """An optional non-negative integer, 0 when absent or null."""
    value = mapping.get(key)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ModelError(f"{where}: key {key!r} must be a non-negative integer, got {value!r}")
    return value


def _bool(mapping: Mapping[str, Any], key: str, where: str, default: bool | None) -> bool:
    value = mapping.get(key, default)
    if value is None:
        raise ModelError(f"{where}: missing required key {key!r}")
    if not isinstance(value, bool):
        raise ModelError(f"{where}: key {key!r} must be true or false, got {value!r}")
    return value


__all__ = [
    "MLASpec",
    "MoESpec",
    "ModelError",
    "ModelSpec",
    "library_model_names",
    "load_hf_config",
    "load_library_model",
    "load_model",
]
