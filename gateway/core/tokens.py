"""Prompt-token estimation from a request body of any of the three APIs, cheap by default.

Default estimate: characters times the tokens per character of the text's kind (below), over
every piece of prompt text, plus
MESSAGE_OVERHEAD_TOKENS per chat message (role and separators, as OpenAI counts them),
REPLY_PRIMING_TOKENS once per chat, one token for a message `name`, and MEDIA_PART_TOKENS for
each non-text content part (an image: OpenAI bills a high-detail 1024x1024 image 765 tokens).
Token-id prompts (`prompt: [1, 2, 3]`) count exactly. Only string lengths are summed: the body
is never serialised, so the cost does not grow with the prompt (len() of a str is O(1)).

Tokens per character: plain characters / 4 misses by kind of text (benchmarks/token_estimate.py,
against o200k_base and cl100k_base): English prose runs 4.4-4.6 characters a token (chars/4
over-estimates chat by 10-15%), retrieval text with numbers, dates and identifiers 3.4 (under by
14%), CJK and Cyrillic far fewer (under by 40% at the median on cl100k). So the rate is read from
a sample of SAMPLE_CHARS characters, in windows spread over the prompt's text: tokens per char =
(0.21 x characters + 0.315 x UTF-8 bytes beyond one per character + 0.71 x digits
+ 0.243 x ASCII punctuation) / characters, a least-squares fit on o200k and cl100k counts (each
digit or symbol is near a token of its own; a CJK character 1-1.5). The sample bounds the cost:
one UTF-8 encode, one bytes.translate and two single-byte counts of about 1 KiB, whatever
the prompt's size (about 3 µs). Median error becomes 2-4% for chat, code and retrieval text,
10-16% for other scripts (the benchmark's figures: docs/operations.md, "Token estimate").

Responses (`estimate_response_tokens`): `instructions`, the `input` string or, per item
(MESSAGE_OVERHEAD_TOKENS each), message text parts, `function_call` name and arguments,
`function_call_output` output, reasoning summaries (other items: every string in them), plus
every string of `tools`. A turn continuing a stored response (`previous_response_id`) also
replays the parent's input and output: the caller adds those (gateway/server/responses_routes).
Messages (`estimate_message_tokens`): `system` (string or blocks), per message its text blocks,
`tool_use` name and input, `tool_result` content, thinking text, MEDIA_PART_TOKENS per image or
document, plus every string of `tools` (name, description, input_schema). Both mirror what vLLM
renders into the prompt when it translates them to chat.

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
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

CHARS_PER_TOKEN = 4  # the rule of thumb the fit below replaces (kept for callers' estimates)
SAMPLE_CHARS = 1024
SAMPLE_WINDOWS = 8
# Tokens per character, per class of the sample's UTF-8 bytes (see the module docstring).
PER_CHAR, PER_EXTRA_BYTE, PER_DIGIT, PER_PUNCT = 0.21, 0.315, 0.71, 0.243
_PUNCT = b"!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
# Each byte to its class: d digit, p ASCII punctuation, a anything else.
_CLASSES = bytes(0x64 if 0x30 <= i <= 0x39 else 0x70 if i in _PUNCT else 0x61 for i in range(256))
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


def estimate_response_tokens(body: Mapping[str, Any], counter: TokenCounter | None = None) -> int:
    """Prompt tokens of a Responses request body (its own; not a parent response's)."""
    texts: list[str] = []
    fixed_tokens = 0
    instructions = body.get("instructions")
    if type(instructions) is str:
        texts.append(instructions)
    items = body.get("input")
    if type(items) is str:
        texts.append(items)
    elif type(items) is list:
        fixed_tokens += _items(items, texts) + REPLY_PRIMING_TOKENS
    texts.extend(_strings(body.get("tools"), MAX_SCHEMA_DEPTH))
    return fixed_tokens + count_texts(texts, counter)


def estimate_message_tokens(body: Mapping[str, Any], counter: TokenCounter | None = None) -> int:
    """Prompt tokens of an Anthropic Messages request body."""
    texts: list[str] = []
    fixed_tokens = REPLY_PRIMING_TOKENS + _text_or_blocks(body.get("system"), texts)
    messages = body.get("messages")
    for message in messages if type(messages) is list else ():
        if type(message) is dict:
            fixed_tokens += MESSAGE_OVERHEAD_TOKENS + _text_or_blocks(message.get("content"), texts)
    texts.extend(_strings(body.get("tools"), MAX_SCHEMA_DEPTH))
    return fixed_tokens + count_texts(texts, counter)


def count_texts(texts: list[str], counter: TokenCounter | None = None) -> int:
    if counter is not None:
        return sum(counter(text) for text in texts)
    chars = sum(len(text) for text in texts)
    if not chars:
        return 0
    return math.ceil(chars * tokens_per_char(_sample(texts, chars)))


def tokens_per_char(sample: str) -> float:
    """The rate fitted on real tokenizers, from the sample's character classes."""
    raw = sample.encode("utf-8", "surrogatepass")
    classes = raw.translate(_CLASSES)
    tokens = (
        PER_CHAR * len(sample)
        + PER_EXTRA_BYTE * (len(raw) - len(sample))
        + PER_DIGIT * classes.count(b"d")
        + PER_PUNCT * classes.count(b"p")
    )
    return tokens / len(sample)


def _sample(texts: list[str], chars: int) -> str:
    """SAMPLE_WINDOWS windows of the texts laid end to end, spread evenly over all `chars` of
    them (the texts themselves when they are no longer): a retrieval prompt's numbers sit
    after its instructions, a chat's code after its question."""
    if chars <= SAMPLE_CHARS:
        return "".join(texts)
    width = SAMPLE_CHARS // SAMPLE_WINDOWS
    starts = [k * (chars - width) // (SAMPLE_WINDOWS - 1) for k in range(SAMPLE_WINDOWS)]
    parts: list[str] = []
    offset = 0
    for text in texts:
        end = offset + len(text)
        while starts and starts[0] < end:
            at = starts.pop(0) - offset
            parts.append(text[at : at + width])  # may end short at a text's end: still a sample
        offset = end
    return "".join(parts)


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


def _items(items: list[Any], texts: list[str]) -> int:
    """Collect Responses input items into `texts`; returns their fixed tokens."""
    fixed_tokens = 0
    for item in items:
        if type(item) is not dict:
            continue
        fixed_tokens += MESSAGE_OVERHEAD_TOKENS
        kind = item.get("type", "message")
        if kind == "message":
            content = item.get("content")
            if type(content) is str:
                texts.append(content)
            elif type(content) is list:
                fixed_tokens += _parts(content, texts)
        elif kind == "function_call":
            texts.extend(v for v in (item.get("name"), item.get("arguments")) if type(v) is str)
        elif kind == "function_call_output":
            texts.extend(_strings(item.get("output"), MAX_SCHEMA_DEPTH))
        elif kind == "reasoning":
            summary = item.get("summary")
            fixed_tokens += _parts(summary, texts) if type(summary) is list else 0
        else:
            texts.extend(_strings(item, MAX_SCHEMA_DEPTH))
    return fixed_tokens


def _text_or_blocks(content: Any, texts: list[str], depth: int = MAX_SCHEMA_DEPTH) -> int:
    """Collect Anthropic content (a string, or blocks); returns its fixed tokens."""
    if type(content) is str:
        texts.append(content)
        return 0
    return _blocks(content, texts, depth) if type(content) is list else 0


def _blocks(blocks: list[Any], texts: list[str], depth: int) -> int:
    """Collect Anthropic content blocks into `texts`; returns their fixed tokens."""
    fixed_tokens = 0
    for block in blocks:
        if type(block) is not dict or depth <= 0:
            continue
        kind = block.get("type")
        if kind in ("text", "thinking"):
            text = block.get(kind)
            texts.extend((text,) if type(text) is str else ())
        elif kind in ("tool_use", "server_tool_use"):
            texts.extend(_strings([block.get("name"), block.get("input")], MAX_SCHEMA_DEPTH))
        elif kind == "tool_result":
            fixed_tokens += _text_or_blocks(block.get("content"), texts, depth - 1)
        elif kind in ("image", "document"):
            fixed_tokens += MEDIA_PART_TOKENS
        else:
            texts.extend(_strings(block, MAX_SCHEMA_DEPTH))
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
