"""Configured secrets out of everything an upstream sends back: `Redactor`.

The secrets are every value the gateway holds in clear: each endpoint's API key, each tenant key
given as an env-var reference, the admin key and the /metrics token (a tenant key stored only as
its SHA-256 digest is not known in clear, and the gateway never sends it anywhere). A secret
shorter than MIN_SECRET_CHARS is not redacted: replacing a few common characters would
mangle error messages, and a key that short is guessable anyway.

Where a secret can appear: only in what an upstream says about a failure, since the model never
sees a key. So only error bodies (any status >= 300, or a body that mentions "error") and whole
stream events that mention "error" are scanned, a substring test for everything else: the relay
of a healthy stream costs one `in` per chunk. Stream events are scanned whole (each stream grammar
hands the relay whole events only, holding a partial one back), so a key split across reads is
still found.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from gateway.config.settings import GatewayConfig

REDACTED = b"[redacted]"
MIN_SECRET_CHARS = 8
# What every error event or body carries: the key {"error": ...} or the value "object": "error".
ERROR_MARK = b'"error"'


class Redactor:
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        # Longest first, so a secret that contains another is replaced whole.
        unique = {s.encode() for s in secrets if len(s) >= MIN_SECRET_CHARS}
        self._secrets = sorted(unique, key=len, reverse=True)

    def __call__(self, data: bytes) -> bytes:
        """`data` with every secret replaced by [redacted]."""
        for secret in self._secrets:
            if secret in data:
                data = data.replace(secret, REDACTED)
        return data

    def events(self, data: bytes) -> bytes:
        """Whole stream events: scanned only when one mentions an error."""
        return self(data) if ERROR_MARK in data and self._secrets else data

    def body(self, status: int, body: bytes) -> bytes:
        """A whole response body: scanned when it is an error (status >= 300, or says so)."""
        if self._secrets and (status >= 300 or ERROR_MARK in body):
            return self(body)
        return body


def configured_secrets(config: GatewayConfig) -> list[str]:
    """Every secret the config refers to by env var and the environment holds."""
    names = [e.api_key_env for e in config.endpoints]
    names += [t.api_key_env for t in config.tenants.values()]
    names += [config.server.admin_key_env, config.server.metrics_token_env]
    values = (os.environ.get(name) if name else None for name in names)
    return [value for value in values if value]


def redactor_for(config: GatewayConfig) -> Redactor:
    return Redactor(configured_secrets(config))
