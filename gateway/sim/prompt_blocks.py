"""Block hashes of a request's text, as the simulated engine's prefix cache keys its blocks.

Method: the sim counts 4 characters as a token (`wire.engine_prompt_tokens`), so a block of
`block_size` tokens is `4 * block_size` characters of the rendered prompt (`wire.prompt_text`).
Only full blocks get a hash, and hashes are chained like vLLM's: block i's hash is
blake2b-64(hash of block i-1 + its characters), block 0's parent is a root derived from the
request's `cache_salt` (8 zero bytes without one). Equal hashes therefore mean equal text from
the very start. blake2b rather than `hash()`, whose str hashing differs per process, so that
another process (a gateway replica, the offline simulator) computes the same hashes.

An engine's sequence holds its prompt and then its output, so `sequence_hashes` chains over
the prompt text followed by the output text the engine will generate (`wire.output_text`):
the blocks that the output fills get the hashes that a later turn replaying the answer
computes from its own prompt. The sim's output words average 4.4 characters, so a replayed
answer spans a little more text than the engine generated tokens; the blocks a sequence never
held are simply never stored.
"""

from __future__ import annotations

from hashlib import blake2b

from gateway.sim.wire import output_text

CHARS_PER_TOKEN = 4
_DIGEST_BYTES = 8
_NO_SALT = bytes(_DIGEST_BYTES)


def block_hashes(text: str, block_size: int, *, salt: str | None = None) -> tuple[int, ...]:
    """The chained hashes of text's full blocks of `block_size` tokens."""
    chars = block_size * CHARS_PER_TOKEN
    parent = _root(salt)
    hashes = []
    for start in range(0, len(text) - chars + 1, chars):
        parent = blake2b(
            parent + text[start : start + chars].encode(), digest_size=_DIGEST_BYTES
        ).digest()
        hashes.append(int.from_bytes(parent, "big"))
    return tuple(hashes)


def sequence_hashes(
    prompt_text: str, output_tokens: int, block_size: int, *, salt: str | None = None
) -> tuple[int, ...]:
    """The hashes of a whole engine sequence: its prompt, then its `output_tokens` of output."""
    return block_hashes(prompt_text + output_text(output_tokens), block_size, salt=salt)


def _root(salt: str | None) -> bytes:
    if salt is None:
        return _NO_SALT
    return blake2b(salt.encode(), digest_size=_DIGEST_BYTES).digest()
