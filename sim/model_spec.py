"""The architecture of a dense decoder-only model, and how to load one by name or from a config.

A `ModelSpec` holds only what sizes memory and cost: layer count and widths, attention heads,
vocabulary. Models come from the shipped library (`hardware_profiles/models/library.yaml`) or
from a Hugging Face `config.json`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

_LIBRARY_PACKAGE = "hardware_profiles"
_LIBRARY_FILE = ("models", "library.yaml")

# Keys of a config.json that mark architectures the cost model cannot price yet.
_MOE_KEYS = ("num_local_experts", "n_routed_experts", "num_experts")
_MLA_KEYS = ("kv_lora_rank",)


class ModelError(ValueError):
    """A model that cannot be found, parsed or used; the message is one line."""


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """Dimensions of a dense transformer with grouped-query attention and a gated MLP."""

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

    def weight_params(self) -> int:
        """Parameter count implied by the dimensions (biases, e.g. Qwen's qkv bias, ignored)."""
        embedding = self.vocab_size * self.hidden_size
        lm_head = 0 if self.tie_word_embeddings else embedding
        final_norm = self.hidden_size
        return embedding + self.num_layers * self.params_per_layer() + final_norm + lm_head

    def params_per_layer(self) -> int:
        """Attention projections, the three MLP matrices and the two RMSNorm weight vectors."""
        h, d = self.hidden_size, self.head_dim
        qkv = h * (self.num_heads + 2 * self.num_kv_heads) * d
        out = self.num_heads * d * h
        mlp = 3 * h * self.intermediate_size
        norms = 2 * h
        return qkv + out + mlp + norms

    def kv_bytes_per_token(self, kv_dtype_bytes: float) -> float:
        """KV-cache bytes one token occupies over the whole model (all GPUs together)."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * kv_dtype_bytes

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
        if self.num_kv_heads % tp and tp % self.num_kv_heads:
            raise ModelError(
                f"{self.name} has {self.num_kv_heads} KV heads: tensor_parallel={tp} must divide "
                "them or be a multiple of them"
            )

    def kv_heads_per_gpu(self, tensor_parallel: int) -> int:
        """KV heads each GPU holds; below one head per GPU the heads are replicated (vLLM)."""
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
    """A ModelSpec from a Hugging Face config.json; MoE and MLA models are refused."""
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
    if any(config.get(key) for key in _MOE_KEYS):
        raise ModelError(f"{path}: mixture-of-experts models are not supported yet")
    if any(config.get(key) for key in _MLA_KEYS):
        raise ModelError(f"{path}: multi-head latent attention (MLA) models are not supported yet")
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
        document = yaml.safe_load(resource.read_text(encoding="utf-8"))
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
    allowed = {*_LIBRARY_INT_FIELDS, "tie_word_embeddings", "source"}
    unknown = sorted(set(entry) - allowed)
    if unknown:
        expected = ", ".join(sorted(allowed))
        raise ModelError(f"{where}: unknown key {unknown[0]!r}; expected one of {expected}")
    ints = {key: _positive_int(entry, key, where) for key in _LIBRARY_INT_FIELDS}
    spec = ModelSpec(
        name=name,
        tie_word_embeddings=_bool(entry, "tie_word_embeddings", where, default=None),
        source=str(entry.get("source", "")),
        **ints,
    )
    _check_heads(spec, where)
    return spec


def _spec_from_hf_config(name: str, config: Mapping[str, Any], where: str) -> ModelSpec:
    hidden = _positive_int(config, "hidden_size", where)
    heads = _positive_int(config, "num_attention_heads", where)
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
    )
    _check_heads(partial, where)
    # A config.json carries no parameter count; the architecture's count is exact for the
    # dense models it can describe.
    return replace(partial, num_params=partial.weight_params())


def _check_heads(spec: ModelSpec, where: str) -> None:
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


def _bool(mapping: Mapping[str, Any], key: str, where: str, default: bool | None) -> bool:
    value = mapping.get(key, default)
    if value is None:
        raise ModelError(f"{where}: missing required key {key!r}")
    if not isinstance(value, bool):
        raise ModelError(f"{where}: key {key!r} must be true or false, got {value!r}")
    return value


__all__ = [
    "ModelError",
    "ModelSpec",
    "library_model_names",
    "load_hf_config",
    "load_library_model",
    "load_model",
]
