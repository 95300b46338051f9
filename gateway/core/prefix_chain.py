"""A request's prompt as a chain of block hashes, computed once per request for the prefix index.

Method
- Seed: xxh3-64 of the model name, the tools (orjson, sorted keys), `cache_salt` and the
  Anthropic `system` prompt: anything that changes what the engine's cache holds for the same
  messages (a LoRA adapter is a model name of its own).
- Blocks follow message boundaries: one block per message, its content bytes (text, or its
  text parts joined by unit separators) hashed with the chain so far XOR-ed with a key of its
  envelope (role, name, tool calls, tool_call_id); a message longer than `BLOCK_CHARS` bytes
  is cut into sub-blocks of that many, so a long document shared inside one message
  still matches up to the sub-block where two prompts diverge. The completions API's prompt
  string (or the Responses `input` string) is cut the same way.
- Chained: block i's hash is xxh3-64 of its bytes seeded with block i-1's hash (the seed for
  block 0), so equal hashes mean equal prompts from the very start, as the engine's own block
  hashes do. Each block also records where it ends, in bytes: the index turns a matched
  depth into tokens as `prompt_tokens * ends[depth - 1] / ends[-1]`.

Multi-turn chat diverges exactly at message boundaries, so a replayed conversation matches every
earlier message; RAG prompts diverge inside a message, an error the sub-blocks bound to
`BLOCK_CHARS` (about 1,000 tokens at 4 characters a token). Coarse blocks keep the chain
short (an 8,000-token conversation is a hash per message plus one per 4 KB of its longer
ones), so the index walk stays a few µs; encoding the text to bytes costs most of the hashing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import orjson
from xxhash import xxh3_64_intdigest

BLOCK_CHARS = 4096
_SEP = b"\x1f"


class PrefixChain(NamedTuple):
    """Hashes of the prompt's blocks, chained, and where each block ends (characters)."""

    hashes: tuple[int, ...]
    ends: tuple[int, ...]

    def share(self, depth: int) -> float:
        """The fraction of the prompt in its first `depth` blocks."""
        if depth <= 0 or not self.ends:
            return 0.0
        return self.ends[depth - 1] / self.ends[-1]


EMPTY = PrefixChain((), ())


def chain_of(body: Mapping[str, Any]) -> PrefixChain:
    """The chain of a chat, completions, Responses or Messages request body."""
    seed = _seed(body)
    messages = body.get("messages")
    if isinstance(messages, list):
        return _chain(messages, seed)
    for name in ("prompt", "input"):
        text = body.get(name)
        if isinstance(text, str):
            return _chain((text,), seed)
        if isinstance(text, list):
            return _chain(text, seed)
    return EMPTY


def _seed(body: Mapping[str, Any]) -> int:
    parts = (
        body.get("model"),
        body.get("tools"),
        body.get("cache_salt"),
        body.get("system"),
    )
    return xxh3_64_intdigest(_sorted_json(parts))


def _chain(messages: Sequence[Any], seed: int) -> PrefixChain:
    """Each message's content bytes hashed with the chain so far, mixed with the message's
    envelope key (`envelope_key`), so the content is hashed in place rather than copied into
    one string with its role first: encoding and hashing are then all the work."""
    hashes: list[int] = []
    ends: list[int] = []
    parent, end = seed, 0
    for message in messages:
        if type(message) is dict and len(message) == 2:  # the common {"role", "content": str}
            role, text = message.get("role"), message.get("content")
            if type(role) is str and type(text) is str:
                key = _PLAIN_KEYS.get(role) or _plain_key(role)
                piece = text.encode()
            else:
                key, piece = envelope_key(message), content_bytes(message)
        else:
            key, piece = envelope_key(message), content_bytes(message)
        parent ^= key
        size = len(piece)
        if size <= BLOCK_CHARS:
            parent = xxh3_64_intdigest(piece, parent)
            end += size
            hashes.append(parent)
            ends.append(end)
            continue
        view = memoryview(piece)
        for start in range(0, size, BLOCK_CHARS):
            block = view[start : start + BLOCK_CHARS]
            parent = xxh3_64_intdigest(block, parent)
            end += len(block)
            hashes.append(parent)
            ends.append(end)
    # an empty prompt has nothing to cache (and a chain's shares divide by its length)
    return PrefixChain(tuple(hashes), tuple(ends)) if end else EMPTY


def envelope_key(message: Any) -> int:
    """What of a message is not its content, as one 64-bit key: role, name, tool calls and
    tool_call_id (a bare string, a prompt, has role and name empty)."""
    if not isinstance(message, Mapping):
        return _plain_key("")
    envelope = [str(message.get("role", "")).encode(), str(message.get("name") or "").encode()]
    for extra in ("tool_calls", "tool_call_id"):
        if message.get(extra) is not None:
            envelope.append(_sorted_json(message[extra]))
    return xxh3_64_intdigest(_SEP.join(envelope))


def content_bytes(message: Any) -> bytes:
    """A message's content: its text, its text parts joined (images and other parts as sorted
    JSON); a bare string is its own content, anything else sorted JSON."""
    if isinstance(message, str):
        return message.encode()
    if not isinstance(message, Mapping):
        return _sorted_json(message)
    content = message.get("content")
    if isinstance(content, str):
        return content.encode()
    if content is None:
        return b""
    if not isinstance(content, Sequence):
        return _sorted_json(content)
    pieces = []
    for part in content:
        text = part.get("text") if isinstance(part, Mapping) else None
        if isinstance(text, str):
            pieces.append(text.encode())
        else:
            pieces.append(_sorted_json(part))
    return _SEP.join(pieces)


def _sorted_json(value: Any) -> bytes:
    """`value` as JSON with sorted keys, the bytes hashed for anything not plain text: orjson,
    or the standard library where orjson refuses (an integer beyond 64 bits, nesting deeper
    than 255), or nothing where both do: a prefix hint is not worth a failed request."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS, default=str)
    except TypeError:
        pass
    try:
        return json.dumps(value, sort_keys=True, default=str).encode()
    except (ValueError, RecursionError):
        return b""


def _plain_key(role: str) -> int:
    """`envelope_key` of a message with only a role (and content), remembered per role."""
    key = _PLAIN_KEYS[role] = envelope_key({"role": role})
    return key


_PLAIN_KEYS: dict[str, int] = {}
