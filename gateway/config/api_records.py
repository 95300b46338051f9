"""API keys and tenants made through the admin API: what a request may send, what is stored.

A key belongs to a tenant and may narrow it: the models and classes it may use, its own limits
and budget (counted apart from its tenant's; both must pass), an expiry. Its secret is shown
once, at creation; the record keeps only its SHA-256 (like the config's `api_key_sha256`: a
random 256-bit secret needs no slow hash) and a masked form for listings.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from gateway.config.settings import TenantBudget, TenantLimits, TenantSpec, hash_key
from gateway.config.strict_model import StrictModel

NAME_PATTERN = r"^[A-Za-z0-9_.-]{1,64}$"
SECRET_PREFIX = "sk-sg-"
MAX_GRACE_S = 7 * 86400.0  # a rotated key's old secret works at most a week longer


class KeyRules(StrictModel):
    """What a key narrows (None: as its tenant); the body of an update, all fields optional."""

    name: str | None = Field(None, max_length=200)
    allowed_models: list[str] | None = Field(None, description="public model names; None: all")
    allowed_classes: list[str] | None = Field(None, min_length=1, description="None: tenant's")
    limits: TenantLimits = TenantLimits()
    budget: TenantBudget | None = None
    expires_at: float | None = Field(None, gt=0, description="unix seconds; None: never")
    metadata: dict[str, str] = Field(default_factory=dict)


class KeyCreate(KeyRules):
    tenant: str = Field(min_length=1)


class KeyRotate(StrictModel):
    """The body of a rotation (optional)."""

    grace_s: float = Field(
        0.0, ge=0, le=MAX_GRACE_S, description="how long the old secret keeps working (s)"
    )


class KeyRecord(KeyRules):
    """A stored key: never its secret."""

    id: str
    tenant: str
    sha256: str
    masked: str
    created_at: float
    revoked_at: float | None = None
    # a rotation's old secret, working until `previous_until` (unix s) so clients can move over
    previous_sha256: str | None = None
    previous_until: float | None = None

    @property
    def subject(self) -> str:
        """The name its usage, and its own limits and budget if any, are counted under."""
        return f"key:{self.id}"

    @property
    def limited(self) -> bool:
        return self.limits != TenantLimits() or self.budget is not None

    def view(self) -> dict[str, Any]:
        """As the admin API shows it: the hash stays inside."""
        hidden = {"sha256", "previous_sha256"}
        return self.model_dump(exclude=hidden) | {"object": "api_key", "source": "api"}


class TenantCreate(TenantSpec):
    name: str = Field(pattern=NAME_PATTERN)


class TenantRecord(TenantSpec):
    created_at: float


def new_secret() -> tuple[str, str, str]:
    """(secret, its SHA-256, its masked form): the secret is 256 random bits."""
    secret = SECRET_PREFIX + secrets.token_urlsafe(32)
    return secret, hash_key(secret), f"{SECRET_PREFIX}...{secret[-4:]}"


def new_key_id() -> str:
    return "key_" + secrets.token_hex(8)


@dataclass(frozen=True, slots=True)
class ApiRecords:
    """The admin API's tenants and keys, parsed, as of one version of the shared records."""

    version: int = 0
    tenants: Mapping[str, TenantRecord] = field(default_factory=dict)
    keys: Mapping[str, KeyRecord] = field(default_factory=dict)


def parse_records(version: int, keys: Mapping[str, str], tenants: Mapping[str, str]) -> ApiRecords:
    """The stored JSON, trusted: only the admin API, which validated it, writes it."""
    return ApiRecords(
        version,
        {name: TenantRecord.model_validate(json.loads(text)) for name, text in tenants.items()},
        {key_id: KeyRecord.model_validate(json.loads(text)) for key_id, text in keys.items()},
    )
