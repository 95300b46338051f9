"""API keys -> tenants. Keys are compared as SHA-256 digests, never stored or logged in clear."""

from __future__ import annotations

import hmac
import os
from dataclasses import dataclass

from gateway.config.settings import GatewayConfig, SloClassConfig, TenantConfig, hash_key
from gateway.core.engine_hints import EngineHints, hints_for
from gateway.errors import AuthenticationFailed, PermissionDenied
from policies.base import SloTarget

_MISSING = "Missing API key. Pass it in the Authorization header as 'Bearer <key>'."
_INVALID = "Incorrect API key provided."


@dataclass(frozen=True, slots=True)
class Caller:
    tenant: str
    config: TenantConfig


class KeyRing:
    def __init__(self, config: GatewayConfig) -> None:
        self._tenants: dict[str, Caller] = {}
        for name, tenant in config.tenants.items():
            for digest in tenant.key_hashes():
                self._tenants[digest] = Caller(name, tenant)
        admin_env = config.server.admin_key_env
        admin = os.environ.get(admin_env) if admin_env else None
        self._admin = hash_key(admin) if admin else None
        self._classes = config.classes
        self._hints = {
            (tenant, name): hints_for(tenant_config, config.classes[name])
            for tenant, tenant_config in config.tenants.items()
            for name in tenant_config.allowed_classes
        }

    def caller(self, authorization: str | None) -> Caller:
        digest = hash_key(_bearer(authorization))
        # The dict is keyed by digests of secrets, so a lookup leaks nothing about any key.
        caller = self._tenants.get(digest)
        if caller is None:
            raise AuthenticationFailed(_INVALID, code="invalid_api_key")
        return caller

    def require_admin(self, authorization: str | None) -> None:
        digest = hash_key(_bearer(authorization))
        if self._admin is None or not hmac.compare_digest(digest, self._admin):
            raise AuthenticationFailed(_INVALID, code="invalid_api_key")

    def slo(self, caller: Caller, requested: str | None) -> SloTarget:
        name = requested or caller.config.default_class
        if name not in caller.config.allowed_classes:
            raise PermissionDenied(
                f"SLO class {name!r} is not allowed for this API key; "
                f"allowed: {', '.join(caller.config.allowed_classes)}.",
                code="slo_class_not_allowed",
                param="x-slo-class",
            )
        klass: SloClassConfig = self._classes[name]
        return klass.target(name)

    def hints(self, caller: Caller, slo_class: str) -> EngineHints | None:
        """The engine priority and service tier for `caller`'s requests of an allowed class."""
        return self._hints[caller.tenant, slo_class]


def _bearer(authorization: str | None) -> str:
    scheme, _, key = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise AuthenticationFailed(_MISSING, code="missing_api_key")
    return key.strip()
