"""API keys -> tenants. Keys are compared as SHA-256 digests, never stored or logged in clear.

Tenants and keys come from the config file and from the admin API (gateway/config/api_records.py).
A tenant named in both is the config's: the file is the source of truth for what it declares,
and the API's record of that name is ignored. Keys from the API may belong to either kind of
tenant; a key whose tenant is gone authenticates as no key.
"""

from __future__ import annotations

import dataclasses
import hmac
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gateway.config.api_records import KeyRecord
from gateway.config.settings import GatewayConfig, SloClassConfig, TenantSpec, hash_key
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
    config: TenantSpec
    key: KeyRecord | None = None  # an API key's record; None for a config file key
    until: float | None = None  # a rotated key's old secret: works until then (unix s)

    def may_use(self, model: str) -> bool:
        allowed = self.key.allowed_models if self.key is not None else None
        return allowed is None or model in allowed

    @property
    def allowed_classes(self) -> list[str]:
        narrowed = self.key.allowed_classes if self.key is not None else None
        if narrowed is None:
            return self.config.allowed_classes
        return [name for name in narrowed if name in self.config.allowed_classes]


class KeyRing:
    def __init__(
        self,
        config: GatewayConfig,
        api_tenants: Mapping[str, TenantSpec] | None = None,
        api_keys: Sequence[KeyRecord] = (),
    ) -> None:
        """`api_tenants`, `api_keys`: the admin API's records (a config tenant's name wins)."""
        self.tenants: dict[str, TenantSpec] = {**(api_tenants or {}), **config.tenants}
        self._tenants: dict[str, Caller] = {}
        for name, tenant in config.tenants.items():
            for digest in tenant.key_hashes():
                self._tenants[digest] = Caller(name, tenant)
        for key in api_keys:
            if key.tenant in self.tenants:
                spec = self.tenants[key.tenant]
                self._tenants[key.sha256] = Caller(key.tenant, spec, key)
                if key.previous_sha256 is not None:
                    old = Caller(key.tenant, spec, key, key.previous_until)
                    self._tenants[key.previous_sha256] = old
        self._admin = _digest_of(config.server.admin_key_env)
        self._metrics = _digest_of(config.server.metrics_token_env)
        self._metrics_protected = config.server.metrics_token_env is not None
        self._classes = config.classes
        self._hints = {
            (tenant, name): hints_for(tenant_config, config.classes[name])
            for tenant, tenant_config in self.tenants.items()
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
        if caller.key is not None:
            _check_live(caller.key, time.time())
            if caller.until is not None and caller.until <= time.time():
                raise AuthenticationFailed(
                    "This API key was rotated; use its new secret.", code="key_rotated"
                )
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
        allowed = caller.allowed_classes
        default = caller.config.default_class
        name = requested or (default if default in allowed or not allowed else allowed[0])
        if name not in allowed:
            raise PermissionDenied(
                f"SLO class {name!r} is not allowed for this API key; "
                f"allowed: {', '.join(allowed)}.",
                code="slo_class_not_allowed",
                param="x-slo-class",
            )
        klass: SloClassConfig = self._classes[name]
        return klass.target(name)

    def hints(self, caller: Caller, slo_class: str) -> EngineHints | None:
        """The engine priority and service tier for `caller`'s requests of an allowed class."""
        return self._hints[caller.tenant, slo_class]


def _check_live(key: KeyRecord, now: float) -> None:
    """A revoked or expired key is refused, each with its own code (the key existed: saying
    so leaks nothing its holder does not know)."""
    if key.revoked_at is not None:
        raise AuthenticationFailed("This API key was revoked.", code="key_revoked")
    if key.expires_at is not None and key.expires_at <= now:
        raise AuthenticationFailed("This API key has expired.", code="key_expired")


def model_not_allowed(model: str) -> PermissionDenied:
    return PermissionDenied(
        f"This API key may not use the model {model!r}.", code="model_not_allowed", param="model"
    )


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
