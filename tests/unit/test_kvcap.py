"""KV-capacity arithmetic against hand-computed values (serving-numbers.md section 3)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.bench import hf_config
from gateway.bench.kvcap import (
    GIB,
    PRESETS,
    Deployment,
    ModelShape,
    check_fit,
    find_preset,
    kv_bytes_per_token,
    kv_capacity_tokens,
    kv_pool_bytes,
    max_concurrent_seqs,
)

KIB = 1024


@pytest.mark.parametrize(
    ("name", "bf16_bytes"),
    [
        ("Llama-3-8B", 2 * 32 * 8 * 128 * 2),  # 128 KiB
        ("Llama-3-70B", 2 * 80 * 8 * 128 * 2),  # 320 KiB
        ("Qwen2.5-7B", 2 * 28 * 4 * 128 * 2),  # 56 KiB
        ("Qwen2.5-32B", 2 * 64 * 8 * 128 * 2),  # 256 KiB
        ("Mistral-7B", 2 * 32 * 8 * 128 * 2),  # 128 KiB
        ("Mixtral-8x7B", 2 * 32 * 8 * 128 * 2),  # 128 KiB
    ],
)
def test_preset_kv_bytes_per_token_matches_hand_computed(name: str, bf16_bytes: int) -> None:
    preset = find_preset(name)
    assert preset is not None and preset.name == name
    assert kv_bytes_per_token(preset.shape, 2) == bf16_bytes
    assert kv_bytes_per_token(preset.shape, 1) == bf16_bytes // 2


def test_reference_table_values_in_kib() -> None:
    per_token_kib = {p.name: kv_bytes_per_token(p.shape, 2) // KIB for p in PRESETS}
    assert per_token_kib == {
        "Llama-3-8B": 128,
        "Llama-3-70B": 320,
        "Qwen2.5-7B": 56,
        "Qwen2.5-32B": 256,
        "Mistral-7B": 128,
        "Mixtral-8x7B": 128,
    }


def test_llama_8b_on_one_h100_holds_about_440k_tokens() -> None:
    # 0.9 x 79.6 GiB - 3 GiB overhead - 8.03e9 x 2 bytes of weights = 53.7 GiB of KV;
    # / (128 KiB x 16) = 27,485 whole blocks = 439,760 tokens; / 8,192 = 53 sequences.
    pool = kv_pool_bytes(gpu_memory_bytes=79.6 * GIB, weights_bytes=8.03e9 * 2)
    assert pool == pytest.approx(0.9 * 79.6 * GIB - 3 * GIB - 16.06e9)
    tokens = kv_capacity_tokens(pool, 131_072)
    assert tokens == 439_760
    assert max_concurrent_seqs(tokens, 8192) == 53
    assert max_concurrent_seqs(tokens, 4096) == 107


def test_llama_70b_tensor_parallel_4_pools_every_gpu() -> None:
    # 4 x (0.9 x 79.6 - 3) GiB - 70.6e9 x 2 bytes = 143.06 GiB; / 320 KiB -> 468,768 tokens
    d = Deployment(ModelShape(80, 8, 128), 70.6e9 * 2, 79.6 * GIB, gpus=4)
    assert d.capacity_tokens == 468_768
    assert d.max_seqs(8192) == 57


def test_weights_larger_than_memory_give_zero_capacity() -> None:
    assert kv_capacity_tokens(-1.0, 131_072) == 0


def test_context_rounds_up_to_whole_blocks() -> None:
    assert max_concurrent_seqs(1600, 100) == 14  # 100 tokens take 7 blocks = 112 tokens
    assert max_concurrent_seqs(1600, 96) == 16


def _llama_8b(kv_dtype_bytes: float = 2.0) -> Deployment:
    return Deployment(ModelShape(32, 8, 128), 8.03e9 * 2, 79.6 * GIB, kv_dtype_bytes=kv_dtype_bytes)


def test_fifty_users_at_8k_fit_one_h100() -> None:
    fit = check_fit(_llama_8b(), concurrency=50, context_tokens=8192)
    assert fit.fits and fit.needed_tokens == 409_600 and fit.advice == ()


def test_advice_when_eighty_users_at_8k_do_not_fit() -> None:
    fit = check_fit(_llama_8b(), concurrency=80, context_tokens=8192)
    assert not fit.fits
    advice = {a.lever: a.detail for a in fit.advice}
    assert set(advice) == {"shorter context", "fewer slots", "more GPUs", "quantised KV"}
    assert "5,488 tokens" in advice["shorter context"]  # 27,485 blocks // 80 = 343 blocks
    assert "--max-num-seqs 53" in advice["fewer slots"]
    assert "2 GPUs" in advice["more GPUs"]
    assert "879,536 tokens, 107 sequences (enough)" in advice["quantised KV"]


def test_model_too_big_for_the_gpu_advises_weights_and_more_gpus_only() -> None:
    d = Deployment(ModelShape(80, 8, 128), 70.6e9 * 2, 79.6 * GIB)
    fit = check_fit(d, concurrency=10, context_tokens=8192)
    assert [a.lever for a in fit.advice] == ["more GPUs", "weights"]
    assert "4 GPUs" in fit.advice[0].detail


def test_fp8_kv_is_not_suggested_when_already_fp8() -> None:
    fit = check_fit(_llama_8b(kv_dtype_bytes=1), concurrency=200, context_tokens=8192)
    assert "quantised KV" not in {a.lever for a in fit.advice}


@pytest.mark.parametrize(
    ("served", "preset"),
    [
        ("meta-llama/Meta-Llama-3-8B-Instruct", "Llama-3-8B"),
        ("meta-llama/Llama-3.1-70B-Instruct", "Llama-3-70B"),
        ("Qwen/Qwen2.5-7B-Instruct", "Qwen2.5-7B"),
        ("mistralai/Mistral-7B-Instruct-v0.3", "Mistral-7B"),
        ("mistralai/Mixtral-8x7B-Instruct-v0.1", "Mixtral-8x7B"),
    ],
)
def test_find_preset_matches_served_model_names(served: str, preset: str) -> None:
    found = find_preset(served)
    assert found is not None and found.name == preset


def test_find_preset_does_not_match_a_different_size() -> None:
    assert find_preset("Qwen/Qwen2.5-72B-Instruct") is None
    assert find_preset("gpt-4o") is None


LLAMA_3_8B_CONFIG = {
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def test_hf_config_gives_shape_dtype_and_parameter_estimate() -> None:
    assert hf_config.shape(LLAMA_3_8B_CONFIG) == ModelShape(32, 8, 128)
    assert hf_config.dtype(LLAMA_3_8B_CONFIG) == "bfloat16"
    assert hf_config.estimate_params_b(LLAMA_3_8B_CONFIG) == pytest.approx(8.03, abs=0.01)


def test_hf_config_without_gqa_uses_attention_heads() -> None:
    mha = {"num_hidden_layers": 32, "num_attention_heads": 32, "hidden_size": 4096}
    assert hf_config.shape(mha) == ModelShape(32, 32, 128)  # Llama-2-7B: 512 KiB per token
    assert kv_bytes_per_token(hf_config.shape(mha), 2) == 512 * KIB


def test_hf_config_prefers_explicit_head_dim() -> None:
    config = {**LLAMA_3_8B_CONFIG, "head_dim": 256, "num_key_value_heads": None}
    assert hf_config.shape(config) == ModelShape(32, 32, 256)


def test_hf_config_reads_text_config_of_multimodal_models(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"torch_dtype": "float16", "text_config": LLAMA_3_8B_CONFIG}))
    config = hf_config.read_config(path)
    assert hf_config.shape(config) == ModelShape(32, 8, 128)
    assert hf_config.dtype(config) == "bfloat16"


def test_hf_config_missing_layers_is_an_error() -> None:
    with pytest.raises(ValueError, match="num_hidden_layers"):
        hf_config.shape({"num_attention_heads": 8, "hidden_size": 1024})


def test_mixtral_parameter_estimate_counts_experts() -> None:
    mixtral = {**LLAMA_3_8B_CONFIG, "vocab_size": 32000, "num_local_experts": 8}
    assert hf_config.estimate_params_b(mixtral) == pytest.approx(46.7, abs=0.1)
