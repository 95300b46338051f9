"""The admin API for tenants and API keys (docs/operations.md, "Keys and tenants by API").

    POST   /admin/keys               create; the secret is in this answer only (`key`)
    GET    /admin/keys[?tenant=]     list (never a secret nor its hash)
    GET    /admin/keys/{id}
    PATCH  /admin/keys/{id}          change what the key narrows (the fields given; null clears)
    POST   /admin/keys/{id}/rotate   a new secret, in this answer only; the old one stops working
    POST   /admin/keys/{id}/revoke   refused from then on with `key_revoked`
    POST   /admin/tenants            create
    GET    /admin/tenants            the config's and the API's, each with its `source`
    PATCH  /admin/tenants/{name}     an API tenant (a config tenant changes in the file)
    DELETE /admin/tenants/{name}     an API tenant without live keys

Admin key only, and rate limited across replicas (ADMIN_REQUESTS_PER_MIN). A change is a
compare and set of one record (gateway/state/control.py), tried again when another admin
changed it meanwhile; this replica applies it at once, the others at their next poll.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError

from gateway.config.api_records import (
    KeyCreate,
    KeyRecord,
    KeyRotate,
    KeyRules,
    TenantCreate,
    TenantRecord,
    new_key_id,
    new_secret,
)
from gateway.config.settings import TenantSpec, hash_key
from gateway.core.accounting import usd
from gateway.errors import Conflict, InvalidRequest, RecordNotFound, Rejected, StoreUnavailable
from gateway.server import openapi
from gateway.server.intake import read_body
from gateway.server.runtime import Runtime
from gateway.state.control import FAILURES, ControlRecords, Kind
from gateway.state.usage import HOUR_S
from gateway.telemetry import audit

routes = APIRouter()
ADMIN_REQUESTS_PER_MIN = 600
SWAP_TRIES = 5
M = TypeVar("M", bound=BaseModel)


@routes.post("/admin/keys", status_code=201, openapi_extra=openapi.admin_body(KeyCreate))
async def create_key(request: Request) -> JSONResponse:
    runtime = await _admin(request)
    spec = _parse(KeyCreate, await read_body(request, runtime.config.server.max_body_bytes))
    await _fresh(runtime)
    _check_key(runtime, spec.tenant, spec)
    secret, digest, masked = new_secret()
    record = KeyRecord(
        **spec.model_dump(), id=new_key_id(), sha256=digest, masked=masked, created_at=time.time()
    )
    await _swap(runtime, "keys", record.id, None, record.model_dump_json())
    _audit(request, "key.create", record.id, None, record.view())
    return JSONResponse(record.view() | {"key": secret}, status_code=201)


@routes.get("/admin/keys")
async def list_keys(request: Request) -> JSONResponse:
    runtime = await _admin(request)
    await _fresh(runtime)
    views = await key_views(runtime, request.query_params.get("tenant"))
    return JSONResponse({"object": "list", "data": views})


async def key_views(runtime: Runtime, tenant: str | None = None) -> list[dict[str, Any]]:
    """The API keys (of `tenant`, or all) as this replica holds them, each with its `usage`
    over the usage retention: requests, spend and the UTC hour of its last use, from the
    usage buckets its requests settle under its subject (shared across replicas)."""
    keys = [k for k in runtime.api.keys.values() if tenant is None or k.tenant == tenant]
    runtime.admission.flush_usage()
    until_hour = math.floor(time.time() / HOUR_S) + 1
    since_hour = until_hour - math.ceil(runtime.config.state.usage_retention_days * 24) - 1
    rows = await runtime.store.usage(
        [k.subject for k in keys], since_hour=since_hour, until_hour=until_hour
    )
    used: dict[str, dict[str, Any]] = {}
    for row in rows:
        into = used.setdefault(row.tenant, {"requests": 0, "cost_pusd": 0, "last_hour": None})
        into["requests"] += row.metrics.get("requests", 0)
        into["cost_pusd"] += row.metrics.get("cost_pusd", 0)
        into["last_hour"] = max(into["last_hour"] or row.hour, row.hour)
    return [k.view() | {"usage": _usage(used.get(k.subject))} for k in sorted(keys, key=_order)]


def _order(key: KeyRecord) -> tuple[str, float]:
    return key.tenant, key.created_at


def _usage(found: dict[str, Any] | None) -> dict[str, Any]:
    if found is None:
        return {"requests": 0, "spend_usd": 0.0, "last_used_hour": None}
    hour = found["last_hour"]
    last = datetime.fromtimestamp(hour * HOUR_S, UTC).strftime("%Y-%m-%dT%H:00Z")
    spend = usd(found["cost_pusd"])
    return {"requests": found["requests"], "spend_usd": spend, "last_used_hour": last}


@routes.get("/admin/keys/{key_id}")
async def get_key(key_id: str, request: Request) -> JSONResponse:
    runtime = await _admin(request)
    return JSONResponse(_key(await _fresh(runtime), key_id).view())


@routes.patch("/admin/keys/{key_id}", openapi_extra=openapi.admin_body(KeyRules))
async def update_key(key_id: str, request: Request) -> JSONResponse:
    runtime = await _admin(request)
    body = await read_body(request, runtime.config.server.max_body_bytes)

    def change(record: KeyRecord) -> KeyRecord:
        rules = _parse(KeyRules, record.model_dump(include=set(KeyRules.model_fields)) | body)
        _check_key(runtime, record.tenant, rules)
        return record.model_copy(update=dict(rules))

    return JSONResponse((await _change_key(request, runtime, "key.update", key_id, change)).view())


@routes.post("/admin/keys/{key_id}/rotate", openapi_extra=openapi.admin_body(KeyRotate, False))
async def rotate_key(key_id: str, request: Request) -> JSONResponse:
    runtime = await _admin(request)
    headers = request.headers  # the body is optional: none is a rotation without grace
    sent = headers.get("content-length", "0") != "0" or "transfer-encoding" in headers
    body = await read_body(request, runtime.config.server.max_body_bytes) if sent else {}
    grace_s = _parse(KeyRotate, body).grace_s
    secret, digest, masked = new_secret()

    def change(record: KeyRecord) -> KeyRecord:
        if record.revoked_at is not None:
            raise Conflict("A revoked key cannot be rotated; create a new one.", code="revoked")
        previous, until = (record.sha256, time.time() + grace_s) if grace_s else (None, None)
        update = {"sha256": digest, "masked": masked, "previous_sha256": previous}
        return record.model_copy(update=update | {"previous_until": until})

    record = await _change_key(request, runtime, "key.rotate", key_id, change)
    return JSONResponse(record.view() | {"key": secret})


@routes.post("/admin/keys/{key_id}/revoke")
async def revoke_key(key_id: str, request: Request) -> JSONResponse:
    runtime = await _admin(request)

    def change(record: KeyRecord) -> KeyRecord:
        return record.model_copy(update={"revoked_at": record.revoked_at or time.time()})

    return JSONResponse((await _change_key(request, runtime, "key.revoke", key_id, change)).view())


@routes.post("/admin/tenants", status_code=201, openapi_extra=openapi.admin_body(TenantCreate))
async def create_tenant(request: Request) -> JSONResponse:
    runtime = await _admin(request)
    spec = _parse(TenantCreate, await read_body(request, runtime.config.server.max_body_bytes))
    _check_classes(runtime, spec)
    if spec.name in runtime.config.tenants:
        raise Conflict(f"Tenant {spec.name!r} is defined in the config file.", param="name")
    record = TenantRecord(**spec.model_dump(exclude={"name"}), created_at=time.time())
    if not await _try_swap(runtime, "tenants", spec.name, None, record.model_dump_json()):
        raise Conflict(f"Tenant {spec.name!r} exists.", code="exists", param="name")
    await _fresh(runtime)
    _audit(request, "tenant.create", spec.name, None, _tenant_view(spec.name, record, "api"))
    return JSONResponse(_tenant_view(spec.name, record, "api"), status_code=201)


@routes.get("/admin/tenants")
async def list_tenants(request: Request) -> JSONResponse:
    runtime = await _admin(request)
    await _fresh(runtime)
    views = [
        _tenant_view(name, tenant, "config" if name in runtime.config.tenants else "api")
        for name, tenant in sorted(runtime.keyring.tenants.items())
    ]
    return JSONResponse({"object": "list", "data": views})


@routes.patch("/admin/tenants/{name}", openapi_extra=openapi.admin_body(TenantSpec))
async def update_tenant(name: str, request: Request) -> JSONResponse:
    runtime = await _admin(request)
    body = await read_body(request, runtime.config.server.max_body_bytes)
    for _ in range(SWAP_TRIES):
        text, before = await _api_tenant(runtime, name)
        spec = _parse(TenantSpec, before.model_dump(include=set(TenantSpec.model_fields)) | body)
        _check_classes(runtime, spec)
        after = TenantRecord(**dict(spec), created_at=before.created_at)
        if await _try_swap(runtime, "tenants", name, text, after.model_dump_json()):
            await _fresh(runtime)
            view = _tenant_view(name, after, "api")
            _audit(request, "tenant.update", name, _tenant_view(name, before, "api"), view)
            return JSONResponse(view)
    raise _busy()


@routes.delete("/admin/tenants/{name}")
async def delete_tenant(name: str, request: Request) -> JSONResponse:
    runtime = await _admin(request)
    text, before = await _api_tenant(runtime, name)
    live = [k.id for k in runtime.api.keys.values() if k.tenant == name and not k.revoked_at]
    if live:
        raise Conflict(f"Tenant {name!r} has live keys; revoke them first: {', '.join(live)}.")
    if not await _try_swap(runtime, "tenants", name, text, None):
        raise _busy()
    await _fresh(runtime)
    _audit(request, "tenant.delete", name, _tenant_view(name, before, "api"), None)
    return JSONResponse({"object": "tenant.deleted", "name": name, "deleted": True})


async def _admin(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    runtime.keyring.require_admin(request.headers.get("authorization"))
    allowed, _ = await runtime.store.try_hit(
        "admin", cost=1, limit=ADMIN_REQUESTS_PER_MIN, window_s=60.0, now=time.time()
    )
    if not allowed:
        message = f"Over {ADMIN_REQUESTS_PER_MIN} admin requests a minute; retry later."
        raise Rejected(message, status=429, reason="admin_rate_limited", retry_after_s=10.0)
    return runtime


def _parse(model: type[M], data: dict[str, Any]) -> M:
    """The body as `model`, or a 400 naming the first field at fault."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or "body"
        message = f"{where}: {error['msg']}"
        raise InvalidRequest(message, code="invalid_value", param=where) from None


def _check_key(runtime: Runtime, tenant_name: str, rules: KeyRules) -> None:
    tenant = runtime.keyring.tenants.get(tenant_name)
    if tenant is None:
        raise InvalidRequest(f"No tenant {tenant_name!r}.", code="invalid_value", param="tenant")
    served = set(runtime.registry.models())
    unknown = [m for m in rules.allowed_models or [] if m not in served]
    if unknown:
        raise InvalidRequest(
            f"allowed_models: not served here: {', '.join(unknown)}.",
            code="invalid_value",
            param="allowed_models",
        )
    outside = [c for c in rules.allowed_classes or [] if c not in tenant.allowed_classes]
    if outside:
        raise InvalidRequest(
            f"allowed_classes: not allowed for tenant {tenant_name!r}: {', '.join(outside)}.",
            code="invalid_value",
            param="allowed_classes",
        )


def _check_classes(runtime: Runtime, spec: TenantSpec) -> None:
    unknown = [c for c in spec.allowed_classes if c not in runtime.config.classes]
    if unknown:
        raise InvalidRequest(
            f"allowed_classes: unknown classes: {', '.join(unknown)}.",
            code="invalid_value",
            param="allowed_classes",
        )


async def _change_key(
    request: Request,
    runtime: Runtime,
    action: str,
    key_id: str,
    change: Callable[[KeyRecord], KeyRecord],
) -> KeyRecord:
    for _ in range(SWAP_TRIES):
        records = await _fresh(runtime)
        text = records.keys.get(key_id)
        if text is None:
            raise _no_key(key_id)
        before = KeyRecord.model_validate_json(text)
        after = change(before)
        if await _try_swap(runtime, "keys", key_id, text, after.model_dump_json()):
            await _fresh(runtime)
            _audit(request, action, key_id, before.view(), after.view())
            return after
    raise _busy()


async def _fresh(runtime: Runtime) -> ControlRecords:
    """The records as stored now, applied here too (an admin call never acts on a stale view)."""
    try:
        records = await runtime.control.read()
    except FAILURES as exc:
        raise _unavailable(exc) from None
    runtime.apply_records(records)
    return records


async def _swap(runtime: Runtime, kind: Kind, name: str, old: str | None, new: str) -> None:
    if not await _try_swap(runtime, kind, name, old, new):
        raise _busy()
    await _fresh(runtime)


async def _try_swap(
    runtime: Runtime, kind: Kind, name: str, old: str | None, new: str | None
) -> bool:
    try:
        return await runtime.control.swap(kind, name, old, new)
    except FAILURES as exc:
        raise _unavailable(exc) from None


async def _api_tenant(runtime: Runtime, name: str) -> tuple[str, TenantRecord]:
    if name in runtime.config.tenants:
        raise Conflict(f"Tenant {name!r} is defined in the config file; change it there.")
    text = (await _fresh(runtime)).tenants.get(name)
    if text is None:
        raise RecordNotFound(f"No tenant {name!r}.", code="not_found", param="name")
    return text, TenantRecord.model_validate_json(text)


def _key(records: ControlRecords, key_id: str) -> KeyRecord:
    text = records.keys.get(key_id)
    if text is None:
        raise _no_key(key_id)
    return KeyRecord.model_validate_json(text)


def _tenant_view(name: str, tenant: TenantSpec, source: str) -> dict[str, Any]:
    fields = tenant.model_dump(exclude={"api_key_env", "api_key_sha256"})
    return {"object": "tenant", "name": name, "source": source} | fields


def _audit(
    request: Request,
    action: str,
    target: str,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
) -> None:
    presented = request.headers.get("authorization", "").partition(" ")[2].strip()
    client = request.client.host if request.client else ""
    actor = {"admin_key_sha256_prefix": hash_key(presented)[:12], "client": client}
    audit.record(action, actor, target, before, after)


def _no_key(key_id: str) -> RecordNotFound:
    return RecordNotFound(f"No API key {key_id!r}.", code="not_found", param="key_id")


def _busy() -> Conflict:
    return Conflict("The record changed while this change was made; retry.", code="conflict")


def _unavailable(exc: BaseException) -> StoreUnavailable:
    return StoreUnavailable(
        f"The shared store cannot take admin changes now ({type(exc).__name__}); retry.",
        code="store_unavailable",
    )
