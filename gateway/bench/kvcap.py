"""KV-cache capacity arithmetic: how many tokens of KV cache fit, and how many sequences that is.

    kv_bytes_per_token = 2 (K and V) x layers x kv_heads x head_dim x kv_dtype_bytes
    kv_pool_bytes      = gpus x (gpu_memory x gpu_memory_utilization - overhead_per_gpu) - weights
    capacity_tokens    = floor(kv_pool_bytes / (kv_bytes_per_token x block)) x block
    max_seqs(context)  = floor(capacity_tokens / context rounded up to a block)

This is how vLLM sizes its pool: `--gpu-memory-utilization` (default 0.9) of each GPU covers the
weights, the activations and CUDA graphs profiled at startup (`overhead`, typically 1-5 GiB) and
the KV blocks (16 tokens each on CUDA). Tensor parallelism splits weights and KV heads across the
GPUs, so the pool is the sum over GPUs. A sequence needs blocks for prompt plus generated tokens,
so "max_seqs" at the maximum context is the concurrency vLLM can guarantee.

Everything here is pure; `kv_bytes_per_token` and `kv_capacity_tokens` are what the gateway uses
when an engine's /metrics lacks `cache_config_info`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

GIB = 1024**3
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
DEFAULT_OVERHEAD_GIB = 3.0
DEFAULT_BLOCK_SIZE_TOKENS = 16

DTYPE_BYTES: dict[str, float] = {
    **dict.fromkeys(("fp32", "float32"), 4.0),
    **dict.fromkeys(("bf16", "bfloat16", "fp16", "float16", "half", "auto"), 2.0),
    **dict.fromkeys(("fp8", "fp8_e4m3", "fp8_e5m2", "float8_e4m3fn", "int8"), 1.0),
    "int4": 0.5,
}

# Memory the CUDA driver reports for the card (an "80 GB" H100 shows 79.6 GiB); the values are
# the ones the pool-size table in serving-numbers.md section 3 was computed with.
GPU_MEMORY_GIB: dict[str, float] = {
    "H100-80G": 79.6,
    "A100-80G": 79.6,
    "H200": 139.8,
    "A100-40G": 39.4,
}


@dataclass(frozen=True, slots=True)
class ModelShape:
    layers: int
    kv_heads: int
    head_dim: int


@dataclass(frozen=True, slots=True)
class ModelPreset:
    name: str
    shape: ModelShape
    params_b: float  # billions of parameters, for the weights size
    aliases: tuple[str, ...] = ()


# Shapes from serving-numbers.md section 3 (public HF configs); parameters from the model cards.
PRESETS: tuple[ModelPreset, ...] = (
    ModelPreset("Llama-3-8B", ModelShape(32, 8, 128), 8.03, ("Llama-3.1-8B",)),
    ModelPreset("Llama-3-70B", ModelShape(80, 8, 128), 70.6, ("Llama-3.1-70B", "Llama-3.3-70B")),
    ModelPreset("Qwen2.5-7B", ModelShape(28, 4, 128), 7.62),
    ModelPreset("Qwen2.5-32B", ModelShape(64, 8, 128), 32.8),
    ModelPreset("Mistral-7B", ModelShape(32, 8, 128), 7.25),
    ModelPreset("Mixtral-8x7B", ModelShape(32, 8, 128), 46.7),
)


def _squash(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def find_preset(model: str) -> ModelPreset | None:
    """The preset whose name or alias appears in `model` ("meta-llama/Meta-Llama-3-8B-Instruct")."""
    squashed = _squash(model)
    for preset in PRESETS:
        if any(_squash(n) in squashed for n in (preset.name, *preset.aliases)):
            return preset
    return None


def dtype_bytes(name: str) -> float:
    try:
        return DTYPE_BYTES[name.lower()]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; known: {', '.join(DTYPE_BYTES)}") from None


def kv_bytes_per_token(shape: ModelShape, dtype_bytes: float) -> int:
    return math.ceil(2 * shape.layers * shape.kv_heads * shape.head_dim * dtype_bytes)


def weights_bytes(params_b: float, dtype_bytes: float) -> float:
    return params_b * 1e9 * dtype_bytes


def kv_pool_bytes(
    *,
    gpu_memory_bytes: float,
    weights_bytes: float,
    gpus: int = 1,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    overhead_bytes_per_gpu: float = DEFAULT_OVERHEAD_GIB * GIB,
) -> float:
    """Bytes left for KV blocks; negative when weights and overhead alone do not fit."""
    per_gpu = gpu_memory_bytes * gpu_memory_utilization - overhead_bytes_per_gpu
    return gpus * per_gpu - weights_bytes


def kv_capacity_tokens(
    pool_bytes: float, kv_bytes_per_token: int, block_size_tokens: int = DEFAULT_BLOCK_SIZE_TOKENS
) -> int:
    """Whole blocks of KV that fit in `pool_bytes`, in tokens."""
    if pool_bytes <= 0:
        return 0
    blocks = int(pool_bytes // (kv_bytes_per_token * block_size_tokens))
    return blocks * block_size_tokens


def max_concurrent_seqs(
    capacity_tokens: int, context_tokens: int, block_size_tokens: int = DEFAULT_BLOCK_SIZE_TOKENS
) -> int:
    """Sequences of `context_tokens` (prompt + output) that fit at once."""
    return capacity_tokens // _round_up(context_tokens, block_size_tokens)


def _round_up(tokens: int, block_size_tokens: int) -> int:
    return math.ceil(tokens / block_size_tokens) * block_size_tokens


@dataclass(frozen=True, slots=True)
class Deployment:
    """One model served on `gpus` GPUs of `gpu_memory_bytes` each (tensor parallel)."""

    shape: ModelShape
    weights_bytes: float
    gpu_memory_bytes: float
    gpus: int = 1
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
    overhead_bytes_per_gpu: float = DEFAULT_OVERHEAD_GIB * GIB
    kv_dtype_bytes: float = 2.0
    block_size_tokens: int = DEFAULT_BLOCK_SIZE_TOKENS

    @property
    def kv_bytes_per_token(self) -> int:
        return kv_bytes_per_token(self.shape, self.kv_dtype_bytes)

    @property
    def kv_pool_bytes(self) -> float:
        return kv_pool_bytes(
            gpu_memory_bytes=self.gpu_memory_bytes,
            weights_bytes=self.weights_bytes,
            gpus=self.gpus,
            gpu_memory_utilization=self.gpu_memory_utilization,
            overhead_bytes_per_gpu=self.overhead_bytes_per_gpu,
        )

    @property
    def capacity_tokens(self) -> int:
        pool_bytes, block = self.kv_pool_bytes, self.block_size_tokens
        return kv_capacity_tokens(pool_bytes, self.kv_bytes_per_token, block)

    def max_seqs(self, context_tokens: int) -> int:
        return max_concurrent_seqs(self.capacity_tokens, context_tokens, self.block_size_tokens)

    def needed_tokens(self, concurrency: int, context_tokens: int) -> int:
        return concurrency * _round_up(context_tokens, self.block_size_tokens)


@dataclass(frozen=True, slots=True)
class Advice:
    lever: str  # "shorter context", "fewer slots", "more GPUs", "quantised KV", "weights"
    detail: str


@dataclass(frozen=True, slots=True)
class Fit:
    concurrency: int
    context_tokens: int
    needed_tokens: int
    capacity_tokens: int
    advice: tuple[Advice, ...]

    @property
    def fits(self) -> bool:
        return self.needed_tokens <= self.capacity_tokens


def check_fit(d: Deployment, concurrency: int, context_tokens: int) -> Fit:
    """Whether `concurrency` sequences of `context_tokens` fit, and if not, what would."""
    needed = d.needed_tokens(concurrency, context_tokens)
    advice = () if needed <= d.capacity_tokens else _advice(d, concurrency, context_tokens)
    return Fit(concurrency, context_tokens, needed, d.capacity_tokens, advice)


def _advice(d: Deployment, concurrency: int, context_tokens: int) -> tuple[Advice, ...]:
    levers = [
        _shorter_context(d, concurrency),
        _fewer_slots(d, context_tokens),
        _more_gpus(d, concurrency, context_tokens),
        _quantised_kv(d, concurrency, context_tokens),
    ]
    if d.capacity_tokens == 0:
        levers.append(Advice("weights", _WEIGHTS_ADVICE))
    return tuple(a for a in levers if a is not None)


_WEIGHTS_ADVICE = (
    "weights + overhead exceed usable memory: quantise the weights (fp8 halves them) "
    "or shard over more GPUs"
)


def _shorter_context(d: Deployment, concurrency: int) -> Advice | None:
    blocks_each = d.capacity_tokens // d.block_size_tokens // concurrency
    if blocks_each == 0:
        return None
    context = blocks_each * d.block_size_tokens
    return Advice("shorter context", f"cap the context at {context:,} tokens (--max-model-len)")


def _fewer_slots(d: Deployment, context_tokens: int) -> Advice | None:
    seqs = d.max_seqs(context_tokens)
    if seqs == 0:
        return None
    return Advice(
        "fewer slots",
        f"serve at most {seqs} sequences at {context_tokens:,} tokens (--max-num-seqs {seqs}); "
        "queue or route the rest elsewhere",
    )


def _more_gpus(d: Deployment, concurrency: int, context_tokens: int) -> Advice | None:
    needed = d.needed_tokens(concurrency, context_tokens)
    tp = d.gpus * 2
    while tp <= 64:  # tensor-parallel sizes are powers of two that divide the attention heads
        bigger = replace(d, gpus=tp)
        if bigger.capacity_tokens >= needed:
            detail = f"tensor parallel over {tp} GPUs holds {bigger.capacity_tokens:,} tokens"
            return Advice("more GPUs", detail + _replicas_note(d, needed))
        tp *= 2
    return None


def _replicas_note(d: Deployment, needed_tokens: int) -> str:
    if d.capacity_tokens == 0:
        return ""
    replicas = math.ceil(needed_tokens / d.capacity_tokens)
    return f"; or {replicas} replicas of this deployment with the users split across them"


def _quantised_kv(d: Deployment, concurrency: int, context_tokens: int) -> Advice | None:
    if d.kv_dtype_bytes <= 1:
        return None
    fp8 = replace(d, kv_dtype_bytes=1)
    if fp8.capacity_tokens == 0:
        return None
    fits = fp8.needed_tokens(concurrency, context_tokens) <= fp8.capacity_tokens
    enough = "enough" if fits else "not enough alone"
    return Advice(
        "quantised KV",
        f"--kv-cache-dtype fp8 halves KV per token to {fp8.kv_bytes_per_token // 1024} KiB: "
        f"{fp8.capacity_tokens:,} tokens, {fp8.max_seqs(context_tokens)} sequences ({enough})",
    )
