"""Reading a model's KV shape, dtype and size from a Hugging Face `config.json`.

    layers   = num_hidden_layers
    kv_heads = num_key_value_heads, else num_attention_heads (no GQA)
    head_dim = head_dim, else hidden_size / num_attention_heads
    dtype    = torch_dtype (transformers < 5) or dtype

Multimodal configs keep these under `text_config`. The parameter estimate counts the embeddings,
attention and gated-MLP matrices of a Llama-style decoder (times the experts of a Mixtral-style
MoE); it ignores norms and biases, which are well under 1% of the weights.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gateway.bench.kvcap import ModelShape


def read_config(path: str | Path) -> Mapping[str, Any]:
    """The decoder's config from a config.json file (multimodal configs: its `text_config`)."""
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a JSON object")
    text = data.get("text_config")
    if "num_hidden_layers" not in data and isinstance(text, dict):
        return {**text, "torch_dtype": dtype(text) or dtype(data)}
    return data


def _int(config: Mapping[str, Any], key: str) -> int:
    value = config.get(key)
    if not isinstance(value, int) or value <= 0:
        raise ValueError(f"config.json: {key} missing or not a positive integer")
    return value


def shape(config: Mapping[str, Any]) -> ModelShape:
    heads = _int(config, "num_attention_heads")
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or _int(config, "hidden_size") // heads
    return ModelShape(_int(config, "num_hidden_layers"), int(kv_heads), int(head_dim))


def dtype(config: Mapping[str, Any]) -> str | None:
    value = config.get("torch_dtype") or config.get("dtype")
    return str(value) if value else None


def estimate_params_b(config: Mapping[str, Any]) -> float | None:
    """Billions of parameters of a Llama- or Mixtral-style decoder; None when it cannot tell."""
    if "moe_intermediate_size" in config:  # Qwen/DeepSeek MoE layouts: shared experts, not counted
        return None
    try:
        hidden = _int(config, "hidden_size")
        vocab = _int(config, "vocab_size")
        intermediate = _int(config, "intermediate_size")
        layers = _int(config, "num_hidden_layers")
        kv = shape(config)
    except ValueError:
        return None
    heads = _int(config, "num_attention_heads")
    attention = 2 * hidden * heads * kv.head_dim + 2 * hidden * kv.kv_heads * kv.head_dim
    experts = config.get("num_local_experts") or config.get("num_experts") or 1
    mlp = 3 * hidden * intermediate * int(experts)
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings") else 2)
    return (embeddings + layers * (attention + mlp)) / 1e9
