"""API keys -> tenants. Keys are compared as SHA-256 digests, never stored or logged in clear."""

from __future__ import annotations

import dataclasses
import hmac
import math
import os
from dataclasses import dataclass

from gateway.config.settings import GatewayConfig, SloClassConfig, TenantConfig, hash_key
from gateway.core.engine_hints import EngineHints, hints_for
from gateway.errors import AuthenticationFailed, InvalidRequest, PermissionDenied
from gateway.telemetry.metrics import log
from policies.base import SloTarget

_MISSING = (
    "Missing API key. Pass it in the Authorization header as 'Bearer <key>' "
    "(or, on the Anthropic routes, in x-api-key)."
)
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
        self._admin = _digest_of(config.server.admin_key_env)
        self._metrics = _digest_of(config.server.metrics_token_env)
        self._metrics_protected = config.server.metrics_token_env is not None
        self._classes = config.classes
        self._hints = {
            (tenant, name): hints_for(tenant_config, config.classes[name])
            for tenant, tenant_config in config.tenants.items()
            for name in tenant_config.allowed_classes
        }

    def caller(self, authorization: str | None, api_key: str | None = None) -> Caller:
        """The tenant of a key sent as `Authorization: Bearer` or (Anthropic's) `x-api-key`."""
        key = api_key.strip() if api_key and api_key.strip() else _bearer(authorization)
        digest = hash_key(key)
        # The dict is keyed by digests of secrets, so a lookup leaks nothing about any key.
        caller = self._tenants.get(digest)
        if caller is None:
            raise AuthenticationFailed(_INVALID, code="invalid_api_key")
        return caller

    def require_admin(self, authorization: str | None) -> None:
        _require(self._admin, authorization)

    def require_metrics(self, authorization: str | None) -> None:
        """Open unless `server.metrics_token_env` is set; then only its token (none while the
        variable is unset or empty: a protected /metrics never falls open)."""
        if self._metrics_protected:
            _require(self._metrics, authorization)

    def slo(
        self,
        caller: Caller,
        requested: str | None,
        ttft_ms: str | None = None,
        tpot_ms: str | None = None,
    ) -> SloTarget:
        """The class's targets; per-request hints (`x-slo-ttft-ms`, `x-slo-tpot-ms`) tighten
        them, never loosen them, for tenants allowed hints (ignored for the others)."""
        target = self._class(caller, requested)
        if not caller.config.slo_hints or (ttft_ms is None and tpot_ms is None):
            return target
        return dataclasses.replace(
            target,
            ttft_s=_tightest(target.ttft_s, ttft_ms, "x-slo-ttft-ms"),
            tpot_s=_tightest(target.tpot_s, tpot_ms, "x-slo-tpot-ms"),
        )

    def _class(self, caller: Caller, requested: str | None) -> SloTarget:
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


def warn_unset_keys(config: GatewayConfig) -> None:
    """One warning per tenant whose `api_key_env` is unset or empty: its key then matches
    nothing, and every request with it is a 401 that says nothing about why."""
    for name, tenant in config.tenants.items():
        if tenant.api_key_env and not os.environ.get(tenant.api_key_env):
            log.warning(
                "tenant %r: api_key_env %s is unset or empty; that key is refused until it is set",
                name,
                tenant.api_key_env,
            )


def _tightest(target_s: float | None, hint_ms: str | None, header: str) -> float | None:
    if hint_ms is None:
        return target_s
    try:
        hint_s = float(hint_ms) / 1000
    except ValueError:
        hint_s = math.nan
    if not math.isfinite(hint_s) or hint_s <= 0:
        raise InvalidRequest(
            f"{header} must be a positive number of milliseconds.",
            code="invalid_value",
            param=header,
        )
    return hint_s if target_s is None else min(target_s, hint_s)


def _digest_of(env_name: str | None) -> str | None:
    value = os.environ.get(env_name) if env_name else None
    return hash_key(value) if value else None


def _require(digest: str | None, authorization: str | None) -> None:
    """Constant-time: the presented key's digest against the one expected (None: no key)."""
    presented = hash_key(_bearer(authorization))
    if digest is None or not hmac.compare_digest(presented, digest):
        raise AuthenticationFailed(_INVALID, code="invalid_api_key")


def _bearer(authorization: str | None) -> str:
    scheme, _, key = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise AuthenticationFailed(_MISSING, code="missing_api_key")
    return key.strip()
