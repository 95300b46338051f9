"""`slo-gateway keys ...` and `slo-gateway tenants ...`: the admin API (control_routes.py) from
a shell, against a running gateway.

The gateway's URL comes from SLO_GATEWAY_URL (default http://127.0.0.1:8080) and the admin key
from SLO_GATEWAY_ADMIN_KEY (never an option: it would show in the process list and the shell's
history). Output is a short table, or the API's JSON with --json. Exit codes: 0 done, 1 the
gateway refused (its error printed), 2 bad usage or no admin key, 3 the gateway unreachable.
"""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime
from typing import Annotated, Any

import httpx
import typer

URL_ENV = "SLO_GATEWAY_URL"
ADMIN_KEY_ENV = "SLO_GATEWAY_ADMIN_KEY"
DEFAULT_URL = "http://127.0.0.1:8080"
REFUSED, USAGE, UNREACHABLE = 1, 2, 3

keys = typer.Typer(help="API keys: create, list, rotate, revoke.", no_args_is_help=True)
tenants = typer.Typer(help="Tenants: list, create, update, delete.", no_args_is_help=True)
AsJson = Annotated[bool, typer.Option("--json", help="Print the API's JSON answer.")]
Rpm = Annotated[int | None, typer.Option("--rpm", help="Requests per minute.")]
Tpm = Annotated[int | None, typer.Option("--tpm", help="Tokens per minute.")]
Concurrent = Annotated[int | None, typer.Option("--max-concurrent")]
PerDay = Annotated[float | None, typer.Option("--usd-per-day", help="Daily budget (USD).")]
PerMonth = Annotated[float | None, typer.Option("--usd-per-month")]
Classes = Annotated[list[str] | None, typer.Option("--class", help="Allowed class (repeat).")]


def call(method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    """The admin API's answer, or an exit with the code the module's docstring names."""
    admin_key = os.environ.get(ADMIN_KEY_ENV)
    if not admin_key:
        typer.echo(f"set {ADMIN_KEY_ENV} to the gateway's admin key", err=True)
        raise typer.Exit(USAGE)
    url = os.environ.get(URL_ENV, DEFAULT_URL).rstrip("/") + path
    headers = {"authorization": f"Bearer {admin_key}"}
    try:
        response = httpx.request(method, url, json=body, headers=headers, timeout=30)
    except httpx.HTTPError as exc:
        typer.echo(f"cannot reach the gateway at {url}: {exc}", err=True)
        raise typer.Exit(UNREACHABLE) from None
    if response.status_code >= 400:
        typer.echo(f"error {response.status_code}: {_message(response)}", err=True)
        raise typer.Exit(REFUSED)
    return response.json()


def _message(response: httpx.Response) -> str:
    try:
        error = response.json()["error"]
    except (ValueError, KeyError, TypeError):
        return response.text[:300]
    param = f" (param: {error['param']})" if error.get("param") else ""
    return f"{error.get('message')}{param}"


def _limits(rpm: int | None, tpm: int | None, concurrent: int | None) -> dict[str, Any]:
    given = {"requests_per_min": rpm, "tokens_per_min": tpm, "max_concurrent": concurrent}
    found = {name: value for name, value in given.items() if value is not None}
    return {"limits": found} if found else {}


def _budget(per_day: float | None, per_month: float | None) -> dict[str, Any]:
    given = {"usd_per_day": per_day, "usd_per_month": per_month}
    found = {name: value for name, value in given.items() if value is not None}
    return {"budget": found} if found else {}


def _show(answer: Any, as_json: bool, columns: tuple[str, ...]) -> None:
    if as_json:
        typer.echo(json.dumps(answer, indent=2))
        return
    rows = answer["data"] if answer.get("object") == "list" else [answer]
    typer.echo("  ".join(f"{c:<20}" for c in columns).rstrip())
    for row in rows:
        typer.echo("  ".join(f"{_cell(row.get(c)):<20}" for c in columns).rstrip())


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


KEY_COLUMNS = ("id", "tenant", "name", "masked", "allowed_models", "revoked_at")
TENANT_COLUMNS = ("name", "source", "allowed_classes", "default_class")


@keys.command("create")
def create_key(
    tenant: Annotated[str, typer.Option(help="The tenant the key belongs to.")],
    name: Annotated[str | None, typer.Option(help="A label for listings.")] = None,
    model: Annotated[list[str] | None, typer.Option(help="Allowed model (repeat).")] = None,
    klass: Classes = None,
    rpm: Rpm = None,
    tpm: Tpm = None,
    max_concurrent: Concurrent = None,
    usd_per_day: PerDay = None,
    usd_per_month: PerMonth = None,
    expires_in_s: Annotated[float | None, typer.Option(help="Expires this long from now.")] = None,
    meta: Annotated[list[str] | None, typer.Option(help="key=value metadata (repeat).")] = None,
    as_json: AsJson = False,
) -> None:
    """Create a key; its secret is printed once and cannot be shown again."""
    body: dict[str, Any] = {"tenant": tenant, "name": name, "allowed_models": model}
    body |= {"allowed_classes": klass, "metadata": _metadata(meta or [])}
    body |= _limits(rpm, tpm, max_concurrent) | _budget(usd_per_day, usd_per_month)
    if expires_in_s is not None:
        body["expires_at"] = time.time() + expires_in_s
    created = call("POST", "/admin/keys", body)
    if as_json:
        typer.echo(json.dumps(created, indent=2))
        return
    typer.echo(f"created {created['id']} for tenant {created['tenant']}")
    typer.echo(f"secret (shown once, store it now): {created['key']}")


def _metadata(pairs: list[str]) -> dict[str, str]:
    found = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            typer.echo(f"--meta takes key=value, got {pair!r}", err=True)
            raise typer.Exit(USAGE)
        found[name] = value
    return found


@keys.command("list")
def list_keys(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's keys.")] = None,
    as_json: AsJson = False,
) -> None:
    """List keys (masked: never a secret)."""
    query = f"?tenant={tenant}" if tenant else ""
    _show(call("GET", f"/admin/keys{query}"), as_json, KEY_COLUMNS)


@keys.command("rotate")
def rotate_key(
    key_id: str,
    grace_s: Annotated[
        float, typer.Option(min=0, help="Seconds the old secret keeps working (default: none).")
    ] = 0.0,
    as_json: AsJson = False,
) -> None:
    """Give a key a new secret (printed once); the old one stops working, at once or after
    --grace-s."""
    rotated = call("POST", f"/admin/keys/{key_id}/rotate", {"grace_s": grace_s})
    if as_json:
        typer.echo(json.dumps(rotated, indent=2))
        return
    typer.echo(f"rotated {rotated['id']}")
    typer.echo(f"new secret (shown once, store it now): {rotated['key']}")
    if rotated.get("previous_until"):
        typer.echo(f"the old secret works until {_when(rotated['previous_until'])}")


@keys.command("revoke")
def revoke_key(key_id: str, as_json: AsJson = False) -> None:
    """Revoke a key: refused with key_revoked on every replica within a second."""
    _show(call("POST", f"/admin/keys/{key_id}/revoke"), as_json, KEY_COLUMNS)


@tenants.command("list")
def list_tenants(as_json: AsJson = False) -> None:
    """The config file's tenants and the API's, each with its source."""
    _show(call("GET", "/admin/tenants"), as_json, TENANT_COLUMNS)


@tenants.command("create")
def create_tenant(
    name: str,
    klass: Annotated[list[str], typer.Option("--class", help="Allowed class (repeat).")],
    default_class: Annotated[str | None, typer.Option(help="Default: the first --class.")] = None,
    rpm: Rpm = None,
    tpm: Tpm = None,
    max_concurrent: Concurrent = None,
    usd_per_day: PerDay = None,
    usd_per_month: PerMonth = None,
    as_json: AsJson = False,
) -> None:
    """Create a tenant (its keys: `keys create --tenant NAME`)."""
    body = {"name": name, "allowed_classes": klass, "default_class": default_class or klass[0]}
    body |= _limits(rpm, tpm, max_concurrent) | _budget(usd_per_day, usd_per_month)
    _show(call("POST", "/admin/tenants", body), as_json, TENANT_COLUMNS)


@tenants.command("update")
def update_tenant(
    name: str,
    klass: Classes = None,
    default_class: Annotated[str | None, typer.Option()] = None,
    rpm: Rpm = None,
    tpm: Tpm = None,
    max_concurrent: Concurrent = None,
    usd_per_day: PerDay = None,
    usd_per_month: PerMonth = None,
    as_json: AsJson = False,
) -> None:
    """Change an API tenant: only the options given (limits and budget are replaced whole)."""
    body: dict[str, Any] = {"allowed_classes": klass, "default_class": default_class}
    body = {field: value for field, value in body.items() if value is not None}
    body |= _limits(rpm, tpm, max_concurrent) | _budget(usd_per_day, usd_per_month)
    _show(call("PATCH", f"/admin/tenants/{name}", body), as_json, TENANT_COLUMNS)


@tenants.command("delete")
def delete_tenant(name: str) -> None:
    """Delete an API tenant (its keys revoked first)."""
    call("DELETE", f"/admin/tenants/{name}")
    typer.echo(f"deleted tenant {name}")


def register(cli: typer.Typer) -> None:
    cli.add_typer(keys, name="keys")
    cli.add_typer(tenants, name="tenants")


def _when(unix_s: float) -> str:
    """A moment as UTC ISO 8601, to the second."""
    return datetime.fromtimestamp(unix_s, UTC).isoformat(timespec="seconds")
