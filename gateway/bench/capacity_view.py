"""What `slo-gateway kv-capacity` resolves and prints: the model, the deployment, the verdict.

The model comes from exactly one source: a preset (`--model`), a Hugging Face config.json
(`--config`), or an explicit `--shape LAYERS,KV_HEADS,HEAD_DIM`. The weights size comes from
`--weights-gib`, else parameters (`--params-b`, the preset's count or an estimate from
config.json) times the weights dtype.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.bench import hf_config
from gateway.bench.kvcap import (
    GIB,
    PRESETS,
    Deployment,
    Fit,
    ModelShape,
    dtype_bytes,
    find_preset,
    weights_bytes,
)


@dataclass(frozen=True, slots=True)
class ModelSource:
    name: str
    origin: str  # "preset", "config.json" or "--shape"
    shape: ModelShape
    dtype: str  # the model's own dtype: default for weights and for an "auto" KV cache
    params_b: float | None = None
    params_estimated: bool = False


def resolve_model(
    model: str | None, config: Path | None, shape: tuple[int, int, int] | None
) -> ModelSource:
    """The model from exactly one source; ValueError names the problem."""
    if sum(x is not None for x in (model, config, shape)) > 1:
        raise ValueError("give exactly one of --model, --config or --shape")
    if model is not None:
        return _from_preset(model)
    if config is not None:
        return _from_config(config)
    if shape is not None:
        return ModelSource("custom", "--shape", ModelShape(*shape), "bf16")
    raise ValueError("give exactly one of --model, --config or --shape")


def _from_preset(model: str) -> ModelSource:
    preset = find_preset(model)
    if preset is None:
        names = ", ".join(p.name for p in PRESETS)
        raise ValueError(f"no preset matches {model!r}; presets: {names} (or use --config)")
    return ModelSource(preset.name, "preset", preset.shape, "bf16", preset.params_b)


def _from_config(path: Path) -> ModelSource:
    config = hf_config.read_config(path)
    dtype = hf_config.dtype(config) or "bf16"
    params_b = hf_config.estimate_params_b(config)
    name = str(config.get("_name_or_path") or path.parent.name or "config.json")
    shape = hf_config.shape(config)
    return ModelSource(name, "config.json", shape, dtype, params_b, params_estimated=True)


def served_dtype(source: ModelSource) -> str:
    """The dtype vLLM's "auto" serves in: the checkpoint's, except float32 becomes 16-bit."""
    return "bf16" if dtype_bytes(source.dtype) > 2 else source.dtype


def resolve_weights(
    source: ModelSource, weights_gib: float | None, params_b: float | None, weights_dtype: str
) -> tuple[float, str]:
    """Weights in bytes, and how that number was reached."""
    if weights_gib is not None:
        return weights_gib * GIB, "given"
    if params_b is not None:
        how = "given"
    elif source.params_b is not None:
        params_b = source.params_b
        how = "estimated from config.json" if source.params_estimated else "from the preset"
    else:
        raise ValueError("cannot tell the weights size: give --weights-gib or --params-b")
    note = f"{params_b:.2f}B parameters {how}, {weights_dtype}"
    return weights_bytes(params_b, dtype_bytes(weights_dtype)), note


@dataclass(frozen=True, slots=True)
class CapacityPlan:
    source: ModelSource
    deployment: Deployment
    context_tokens: int
    fit: Fit | None
    weights_note: str


def as_dict(plan: CapacityPlan) -> dict[str, Any]:
    source, d, context_tokens, fit = plan.source, plan.deployment, plan.context_tokens, plan.fit
    return {
        "model": source.name,
        "source": source.origin,
        "layers": source.shape.layers,
        "kv_heads": source.shape.kv_heads,
        "head_dim": source.shape.head_dim,
        "kv_dtype_bytes": d.kv_dtype_bytes,
        "kv_bytes_per_token": d.kv_bytes_per_token,
        "gpus": d.gpus,
        "gpu_memory_gib": round(d.gpu_memory_bytes / GIB, 2),
        "gpu_memory_utilization": d.gpu_memory_utilization,
        "weights_gib": round(d.weights_bytes / GIB, 2),
        "weights_from": plan.weights_note,
        "overhead_gib_per_gpu": round(d.overhead_bytes_per_gpu / GIB, 2),
        "kv_pool_gib": round(d.kv_pool_bytes / GIB, 2),
        "block_size_tokens": d.block_size_tokens,
        "capacity_tokens": d.capacity_tokens,
        "context_tokens": context_tokens,
        "max_concurrent_seqs": d.max_seqs(context_tokens),
        "target": None if fit is None else _fit_dict(fit),
    }


def _fit_dict(fit: Fit) -> dict[str, Any]:
    return {
        "concurrency": fit.concurrency,
        "context_tokens": fit.context_tokens,
        "needed_tokens": fit.needed_tokens,
        "fits": fit.fits,
        "advice": [{"lever": a.lever, "detail": a.detail} for a in fit.advice],
    }


def render(plan: CapacityPlan) -> str:
    source, d, context_tokens, fit = plan.source, plan.deployment, plan.context_tokens, plan.fit
    shape = source.shape
    kib = d.kv_bytes_per_token / 1024
    lines = [
        f"model           {source.name} ({source.origin}): {shape.layers} layers x "
        f"{shape.kv_heads} KV heads x {shape.head_dim} head_dim",
        f"KV per token    {kib:g} KiB ({d.kv_bytes_per_token:,} bytes at "
        f"{_bytes(d.kv_dtype_bytes)} per element)",
        f"GPU memory      {d.gpus} x {d.gpu_memory_bytes / GIB:.1f} GiB at utilisation "
        f"{d.gpu_memory_utilization:.2f}",
        f"weights         {d.weights_bytes / GIB:.1f} GiB ({plan.weights_note})",
        f"overhead        {d.overhead_bytes_per_gpu / GIB:.1f} GiB per GPU "
        "(activations, CUDA graphs)",
        f"KV pool         {d.kv_pool_bytes / GIB:.1f} GiB{_short_note(d)}",
        f"KV capacity     {d.capacity_tokens:,} tokens "
        f"({d.capacity_tokens // d.block_size_tokens:,} blocks of {d.block_size_tokens})",
        f"max sequences   {d.max_seqs(context_tokens)} at {context_tokens:,} tokens of context"
        + _no_start_note(d, context_tokens),
    ]
    return "\n".join(lines + ([] if fit is None else _render_fit(fit)))


def _bytes(n: float) -> str:
    return f"{n:g} byte" + ("" if n == 1 else "s")


def _no_start_note(d: Deployment, context_tokens: int) -> str:
    if d.max_seqs(context_tokens) > 0:
        return ""
    return " (vLLM would refuse to start with this --max-model-len)"


def _short_note(d: Deployment) -> str:
    return " (weights + overhead exceed usable memory)" if d.kv_pool_bytes <= 0 else ""


def _render_fit(fit: Fit) -> list[str]:
    head = f"target          {fit.concurrency} x {fit.context_tokens:,} tokens = "
    head += f"{fit.needed_tokens:,} tokens: "
    if fit.fits:
        spare = 1 - fit.needed_tokens / fit.capacity_tokens
        return [head + f"FITS ({spare:.0%} of the pool to spare)"]
    short = f"DOES NOT FIT (pool holds {fit.capacity_tokens:,})"
    return [head + short, "what to change (any one):"] + [
        f"  - {a.lever}: {a.detail}" for a in fit.advice
    ]
