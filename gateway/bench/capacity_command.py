"""The `slo-gateway kv-capacity` command: options in, `capacity_view` out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from gateway.bench import capacity_view, kvcap

_PRESET_NAMES = ", ".join(p.name for p in kvcap.PRESETS)
_GPU_NAMES = ", ".join(kvcap.GPU_MEMORY_GIB)

ModelOpt = Annotated[str | None, typer.Option("--model", help=f"Preset: {_PRESET_NAMES}.")]
ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", exists=True, dir_okay=False, help="A Hugging Face config.json."),
]
ShapeOpt = Annotated[
    str | None, typer.Option(metavar="LAYERS,KV_HEADS,HEAD_DIM", help="An explicit model shape.")
]
KvDtype = Annotated[str, typer.Option(help="KV cache dtype: auto (the model's), bf16, fp8, ...")]
Gpu = Annotated[str, typer.Option(help=f"GPU preset: {_GPU_NAMES}.")]
GpuMemoryGib = Annotated[
    float | None, typer.Option(min=1, help="Memory per GPU in GiB (overrides --gpu).")
]
Gpus = Annotated[int, typer.Option(min=1, help="GPUs per replica (tensor parallel).")]
Utilization = Annotated[
    float, typer.Option(min=0.05, max=1.0, help="vLLM --gpu-memory-utilization.")
]
WeightsGib = Annotated[
    float | None, typer.Option(min=0, help="Weights size in GiB (overrides parameters).")
]
ParamsB = Annotated[float | None, typer.Option(min=0, help="Parameters in billions.")]
WeightsDtype = Annotated[str | None, typer.Option(help="Weights dtype (default: the model's).")]
OverheadGib = Annotated[float, typer.Option(min=0, help="Activations + CUDA graphs per GPU, GiB.")]
ContextTokens = Annotated[int, typer.Option(min=1, help="Tokens per sequence (prompt + output).")]
TargetConcurrency = Annotated[
    int | None, typer.Option("--concurrency", min=1, help="Sequences that must fit at once.")
]
BlockSize = Annotated[int, typer.Option(min=1, help="KV block size in tokens.")]
JsonOut = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]


def kv_capacity(
    model: ModelOpt = None,
    config: ConfigOpt = None,
    shape: ShapeOpt = None,
    kv_dtype: KvDtype = "auto",
    gpu: Gpu = "H100-80G",
    gpu_memory_gib: GpuMemoryGib = None,
    gpus: Gpus = 1,
    gpu_memory_utilization: Utilization = kvcap.DEFAULT_GPU_MEMORY_UTILIZATION,
    weights_gib: WeightsGib = None,
    params_b: ParamsB = None,
    weights_dtype: WeightsDtype = None,
    overhead_gib: OverheadGib = kvcap.DEFAULT_OVERHEAD_GIB,
    context_tokens: ContextTokens = 8192,
    concurrency: TargetConcurrency = None,
    block_size: BlockSize = kvcap.DEFAULT_BLOCK_SIZE_TOKENS,
    json_output: JsonOut = False,
) -> None:
    """KV-cache token capacity, max sequences at a context and, with --concurrency, the fit."""
    try:
        source = capacity_view.resolve_model(model, config, _shape(shape))
        served = capacity_view.served_dtype(source)
        weights, note = capacity_view.resolve_weights(
            source, weights_gib, params_b, weights_dtype or served
        )
        deployment = kvcap.Deployment(
            shape=source.shape,
            weights_bytes=weights,
            gpu_memory_bytes=_gpu_memory_gib(gpu, gpu_memory_gib) * kvcap.GIB,
            gpus=gpus,
            gpu_memory_utilization=gpu_memory_utilization,
            overhead_bytes_per_gpu=overhead_gib * kvcap.GIB,
            kv_dtype_bytes=kvcap.dtype_bytes(served if kv_dtype.lower() == "auto" else kv_dtype),
            block_size_tokens=block_size,
        )
    except (ValueError, OSError) as exc:
        raise typer.BadParameter(str(exc)) from None
    fit = None if concurrency is None else kvcap.check_fit(deployment, concurrency, context_tokens)
    _print(capacity_view.CapacityPlan(source, deployment, context_tokens, fit, note), json_output)


def _print(plan: capacity_view.CapacityPlan, json_output: bool) -> None:
    if json_output:
        typer.echo(json.dumps(capacity_view.as_dict(plan), indent=2))
    else:
        typer.echo(capacity_view.render(plan))


def _shape(text: str | None) -> tuple[int, int, int] | None:
    if text is None:
        return None
    try:
        layers, kv_heads, head_dim = (int(v) for v in text.split(","))
    except ValueError:
        raise ValueError(f"--shape wants LAYERS,KV_HEADS,HEAD_DIM, got {text!r}") from None
    if min(layers, kv_heads, head_dim) < 1:
        raise ValueError(f"--shape values must be positive, got {text!r}")
    return layers, kv_heads, head_dim


def _gpu_memory_gib(gpu: str, gpu_memory_gib: float | None) -> float:
    if gpu_memory_gib is not None:
        return gpu_memory_gib
    by_name = {name.lower(): gib for name, gib in kvcap.GPU_MEMORY_GIB.items()}
    if gpu.lower() not in by_name:
        raise ValueError(f"unknown --gpu {gpu!r}; known: {_GPU_NAMES} (or --gpu-memory-gib)")
    return by_name[gpu.lower()]
