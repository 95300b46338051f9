"""Build the engine tier's tiny random Llama and its tokenizer, with no download.

    <engine venv>/bin/python tests/engines/tiny_model.py OUTPUT_DIR

Runs in the ENGINE virtualenv (it needs torch, tokenizers and transformers, which the gateway's
venv does not carry). The model is a `LlamaForCausalLM` of 4 layers, hidden 512, 8 heads
(head_dim 64, no GQA), FFN 1024 and 4,096 positions, randomly initialised from SEED and saved as
float32 safetensors (about 75 MB; KV 16 KiB per token). The tokenizer is a byte-level BPE of
VOCAB_SIZE tokens trained on the Python stdlib's *.py files (local text every machine has),
wrapped with bos/eos/pad and a small chat template so /v1/chat/completions works.

Random weights never emit EOS: callers always send max_tokens. The fixture caches the output
under a hash of this file, so editing anything here builds a fresh model.
"""

from __future__ import annotations

import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SEED = 20261201
VOCAB_SIZE = 8192
MAX_POSITIONS = 4096
SPECIAL_TOKENS = ["<s>", "</s>", "<pad>"]
# Role-tagged turns, then the assistant's opening tag when a reply is wanted.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def stdlib_sources() -> Iterator[str]:
    """Every stdlib *.py file's text, in a fixed order so training is repeatable."""
    root = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(root.rglob("*.py")):
        if "site-packages" not in path.parts:
            yield path.read_text(encoding="utf-8", errors="replace")


def train_tokenizer() -> PreTrainedTokenizerFast:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(stdlib_sources(), trainer=trainer)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        model_max_length=MAX_POSITIONS,
    )
    wrapped.chat_template = CHAT_TEMPLATE
    return wrapped


def random_llama(tokenizer: PreTrainedTokenizerFast) -> LlamaForCausalLM:
    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=512,
        intermediate_size=1024,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=8,
        max_position_embeddings=MAX_POSITIONS,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    return LlamaForCausalLM(config).to(torch.float32)


def main(output: Path) -> None:
    tokenizer = train_tokenizer()
    model = random_llama(tokenizer)
    output.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(output)
    model.save_pretrained(output, safe_serialization=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
