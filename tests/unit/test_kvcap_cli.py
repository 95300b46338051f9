"""`slo-gateway kv-capacity` through Typer: presets, config.json, --json, the fit verdict."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from gateway.bench.bench_command import register


def _flat(output: str) -> str:
    """Error text without the box Typer draws around it and its line breaks."""
    return " ".join(output.replace("│", " ").split())


@pytest.fixture
def run() -> Any:
    app = typer.Typer()
    register(app)
    runner = CliRunner()

    def invoke(*args: str) -> Any:
        return runner.invoke(app, ["kv-capacity", *args])

    return invoke


def test_json_has_kv_bytes_per_token_and_capacity(run: Any) -> None:
    result = run("--model", "Llama-3-8B", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["kv_bytes_per_token"] == 131_072
    assert data["capacity_tokens"] == 439_760
    assert data["max_concurrent_seqs"] == 53
    assert data["target"] is None


def test_fifty_users_at_8k_on_one_80gb_gpu_fits(run: Any) -> None:
    result = run("--model", "Llama-3-8B", "--concurrency", "50", "--context-tokens", "8192")
    assert result.exit_code == 0, result.output
    assert "50 x 8,192 tokens = 409,600 tokens: FITS" in result.output


def test_not_fitting_prints_levers(run: Any) -> None:
    result = run("--model", "Llama-3-8B", "--concurrency", "80", "--json")
    target = json.loads(result.output)["target"]
    assert target["fits"] is False
    levers = [a["lever"] for a in target["advice"]]
    assert levers == ["shorter context", "fewer slots", "more GPUs", "quantised KV"]


def test_fp8_kv_doubles_capacity(run: Any) -> None:
    bf16 = json.loads(run("--model", "Qwen2.5-7B", "--json").output)
    fp8 = json.loads(run("--model", "Qwen2.5-7B", "--kv-dtype", "fp8", "--json").output)
    assert (bf16["kv_bytes_per_token"], fp8["kv_bytes_per_token"]) == (57_344, 28_672)
    assert fp8["capacity_tokens"] == pytest.approx(2 * bf16["capacity_tokens"], abs=16)


def test_reads_hugging_face_config(run: Any, tmp_path: Path) -> None:
    config = {
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "hidden_size": 3584,
        "torch_dtype": "bfloat16",
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    result = run("--config", str(path), "--weights-gib", "14.2", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert (data["layers"], data["kv_heads"], data["head_dim"]) == (28, 4, 128)
    assert data["kv_bytes_per_token"] == 57_344
    assert data["source"] == "config.json"


def test_config_without_sizes_needs_weights(run: Any, tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"num_hidden_layers": 2, "num_attention_heads": 2, "head_dim": 8}))
    result = run("--config", str(path))
    assert result.exit_code != 0
    assert "--weights-gib or --params-b" in _flat(result.output)


def test_explicit_shape_and_gpu_memory(run: Any) -> None:
    args = ("--shape", "4,2,64", "--params-b", "1")
    result = run(*args, "--gpu-memory-gib", "24", "--overhead-gib", "1", "--json")
    data = json.loads(result.output)
    assert data["kv_bytes_per_token"] == 2 * 4 * 2 * 64 * 2
    assert data["gpu_memory_gib"] == 24


def test_two_model_sources_are_refused(run: Any) -> None:
    result = run("--model", "Llama-3-8B", "--shape", "32,8,128")
    assert result.exit_code != 0
    assert "exactly one of" in _flat(result.output)


def test_unknown_preset_lists_the_presets(run: Any) -> None:
    result = run("--model", "gpt-4o")
    assert result.exit_code != 0
    assert "Mixtral-8x7B" in _flat(result.output)


def test_malformed_shape_is_refused(run: Any) -> None:
    result = run("--shape", "32,8")
    assert result.exit_code != 0
    assert "LAYERS,KV_HEADS,HEAD_DIM" in _flat(result.output)


def test_unknown_gpu_is_refused(run: Any) -> None:
    result = run("--model", "Llama-3-8B", "--gpu", "TPU")
    assert result.exit_code != 0
    assert "H100-80G" in _flat(result.output)
