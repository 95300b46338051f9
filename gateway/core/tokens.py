"""Prompt-token estimation from an OpenAI request body, cheap by default.

Default estimate: ceil(characters / 4) over every piece of prompt text, plus
MESSAGE_OVERHEAD_TOKENS per chat message (role and separators, as OpenAI counts them),
REPLY_PRIMING_TOKENS once per chat, one token for a message `name`, and MEDIA_PART_TOKENS for
each non-text content part (an image: OpenAI bills a high-detail 1024x1024 image 765 tokens).
Token-id prompts (`prompt: [1, 2, 3]`) count exactly. Only string lengths are summed: the body
is never serialised, so the cost does not grow with the prompt (len() of a str is O(1)).

Text counted: chat `messages` (string content, text parts of content lists, tool-call names and
arguments), `tools`/`functions` definitions (every string in them, keys included), and the
completions `prompt` or embeddings `input` (a string, a list of strings, token ids, or lists of
token ids).

Optional exact counting: `load_counter("tiktoken:o200k_base")` returns a counter when tiktoken
is installed and the encoding loads (it may need to download its vocabulary once), else None, and
the caller keeps the estimate. tiktoken is not a dependency.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD_TOKENS = 4
REPLY_PRIMING_TOKENS = 3
NAME_TOKENS = 1
MEDIA_PART_TOKENS = 765
MAX_SCHEMA_DEPTH = 32  # tool schemas nest; deeper is malformed or hostile, and is not counted

TokenCounter = Callable[[str], int]


def estimate_prompt_tokens(body: Mapping[str, Any], counter: TokenCounter | None = None) -> int:
    """Prompt tokens of a chat, completions or embeddings request body (0 if it has none)."""
    texts: list[str] = []
    fixed_tokens = 0
    messages = body.get("messages")
    if isinstance(messages, list):
        fixed_tokens += _chat(messages, texts) + REPLY_PRIMING_TOKENS
        for key in ("tools", "functions"):
            texts.extend(_strings(body.get(key), MAX_SCHEMA_DEPTH))
    else:
        prompt = body.get("prompt", body.get("input"))
        fixed_tokens += _prompt(prompt, texts)
    return fixed_tokens + count_texts(texts, counter)


def count_texts(texts: list[str], counter: TokenCounter | None = None) -> int:
    if counter is not None:
        return sum(counter(text) for text in texts)
    chars = sum(len(text) for text in texts)
    return -(-chars // CHARS_PER_TOKEN)


def load_counter(spec: str | None) -> TokenCounter | None:
    """A real tokenizer from "tiktoken:<encoding>", or None for the estimate.

    None also when tiktoken is not installed or the encoding cannot be loaded; an unknown
    scheme is a configuration error (ValueError).
    """
    if spec is None or spec == "chars":
        return None
    scheme, _, encoding = spec.partition(":")
    if scheme != "tiktoken" or not encoding:
        raise ValueError(f"unknown tokenizer {spec!r}: use 'chars' or 'tiktoken:<encoding>'")
    try:
        tiktoken = importlib.import_module("tiktoken")
        encoder = tiktoken.get_encoding(encoding)
    except (ImportError, ValueError, OSError):
        return None

    def count(text: str) -> int:
        return len(encoder.encode_ordinary(text))

    return count


def _chat(messages: list[Any], texts: list[str]) -> int:
    """Collect the messages' text into `texts`; returns their fixed (non-text) tokens."""
    fixed_tokens = 0
    for message in messages:
        if type(message) is not dict:  # a parsed JSON object; also the fast check per message
            continue
        fixed_tokens += MESSAGE_OVERHEAD_TOKENS
        content = message.get("content")
        if type(content) is str:
            texts.append(content)
        elif type(content) is list:
            fixed_tokens += _parts(content, texts)
        if "name" in message:
            fixed_tokens += NAME_TOKENS
        if "tool_calls" in message:
            texts.extend(_strings(message["tool_calls"], MAX_SCHEMA_DEPTH))
    return fixed_tokens


def _parts(parts: list[Any], texts: list[str]) -> int:
    fixed_tokens = 0
    for part in parts:
        if type(part) is str:
            texts.append(part)
        elif type(part) is dict:
            text = part.get("text")
            if type(text) is str:
                texts.append(text)
            else:
                fixed_tokens += MEDIA_PART_TOKENS
    return fixed_tokens


def _prompt(prompt: Any, texts: list[str]) -> int:
    """Collect a completions prompt; returns the tokens given as ids."""
    if isinstance(prompt, str):
        texts.append(prompt)
        return 0
    if not isinstance(prompt, list):
        return 0
    ids = 0
    for item in prompt:
        if isinstance(item, str):
            texts.append(item)
        elif isinstance(item, int):
            ids += 1
        elif isinstance(item, list):
            ids += len(item)
    return ids


def _strings(value: Any, depth: int) -> Iterator[str]:
    """Every string in a JSON value, mapping keys included, to a bounded depth."""
    if isinstance(value, str):
        yield value
    elif depth <= 0:
        return
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield str(key)
            yield from _strings(item, depth - 1)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item, depth - 1)
