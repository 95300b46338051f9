"""Dashboard routes and their sign-in.

    GET  /dashboard               the page (admin key as Bearer, or the session cookie);
                                  without either, a sign-in form (401). A key in the query
                                  (`?key=`) is never used: URLs end up in access logs, proxies
                                  and browser history (the gateway's own access log drops query
                                  strings: gateway/telemetry/access_log.py)
    POST /dashboard               the form's key (urlencoded `key`): sets the cookie, 303 back
    GET  /admin/dashboard.json    the page's data (gateway/dashboard/board.py), for the page
                                  and for scripts (Bearer or cookie)
    GET  /dashboard/static/<name> the page's script and style sheet (no secrets, no auth)

The cookie never holds the key: it holds an expiry and an HMAC-SHA256 of it keyed by the admin
key, so every replica sharing the key accepts it, and rotating the key ends every session.
It is HttpOnly, SameSite=Strict, and Secure when the request came over https.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from importlib import resources
from urllib.parse import parse_qs

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from starlette.exceptions import HTTPException

from gateway.errors import AuthenticationFailed
from gateway.server.control_routes import key_views
from gateway.server.dashboard import board, page
from gateway.server.dashboard.history import History
from gateway.server.runtime import Runtime

routes = APIRouter()
COOKIE = "slo_gateway_dashboard"
SESSION_S = 12 * 3600
FORM_MAX_BYTES = 4096
ASSETS = {"dashboard.js": "text/javascript", "dashboard.css": "text/css"}
PAGE_HEADERS = {
    "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "connect-src 'self'; img-src 'self'; form-action 'self'; base-uri 'none'; "
    "frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}


def session_token(admin_key: str, expires_s: int) -> str:
    message = f"slo-gateway dashboard session until {expires_s}".encode()
    mac = hmac.new(admin_key.encode(), message, hashlib.sha256).hexdigest()
    return f"{expires_s}.{mac}"


def valid_session(admin_key: str, token: str, now_s: float) -> bool:
    expires, _, _ = token.partition(".")
    if not expires.isdigit() or int(expires) <= now_s:
        return False
    return hmac.compare_digest(token, session_token(admin_key, int(expires)))


def _admin_key(runtime: Runtime) -> str | None:
    name = runtime.config.server.admin_key_env
    return (os.environ.get(name) or None) if name else None


def signed_in(request: Request, runtime: Runtime) -> bool:
    """A valid admin Bearer key, else a valid session cookie."""
    authorization = request.headers.get("authorization")
    if authorization:
        try:
            runtime.keyring.require_admin(authorization)
        except AuthenticationFailed:
            return False
        return True
    token, admin_key = request.cookies.get(COOKIE), _admin_key(runtime)
    return bool(token and admin_key and valid_session(admin_key, token, time.time()))


@routes.get("/dashboard")
async def dashboard(request: Request) -> Response:
    runtime: Runtime = request.app.state.runtime
    if not signed_in(request, runtime):
        if "key" in request.query_params:
            return _login("A key in the address is not accepted (addresses get logged).")
        return _login("Sign in with the gateway's admin key.")
    history: History = request.app.state.history
    document = board.document(runtime, history) | {"keys": await key_views(runtime)}
    return HTMLResponse(page.render_page(document), headers=PAGE_HEADERS)


@routes.post("/dashboard")
async def sign_in_form(request: Request) -> Response:
    raw = await request.body()
    if len(raw) > FORM_MAX_BYTES:
        return _login("That form was too large.")
    form = parse_qs(raw.decode("utf-8", errors="replace"))
    return _sign_in(request, request.app.state.runtime, form.get("key", [""])[0])


@routes.get("/admin/dashboard.json")
async def dashboard_json(request: Request) -> JSONResponse:
    runtime: Runtime = request.app.state.runtime
    if not signed_in(request, runtime):
        raise AuthenticationFailed("Incorrect API key provided.", code="invalid_api_key")
    document = board.document(runtime, request.app.state.history)
    document["keys"] = await key_views(runtime)
    return JSONResponse(document, headers={"cache-control": "no-store"})


@routes.get("/dashboard/static/{name}")
async def asset(name: str) -> Response:
    if name not in ASSETS:
        raise HTTPException(404, "No such dashboard asset.")
    content = resources.files("gateway.server.dashboard").joinpath("static", name).read_bytes()
    headers = {"cache-control": "no-cache", "x-content-type-options": "nosniff"}
    return Response(content, media_type=ASSETS[name], headers=headers)


def _sign_in(request: Request, runtime: Runtime, key: str) -> Response:
    admin_key = _admin_key(runtime)
    if admin_key is None:
        return _login("No admin key is configured (server.admin_key_env), so the dashboard is off.")
    try:
        runtime.keyring.require_admin(f"Bearer {key}")
    except AuthenticationFailed:
        return _login("That key is not the admin key.")
    expires_s = int(time.time()) + SESSION_S
    response = RedirectResponse("dashboard", status_code=303, headers=PAGE_HEADERS)
    response.set_cookie(
        COOKIE,
        session_token(admin_key, expires_s),
        max_age=SESSION_S,
        path="/",
        secure=request.url.scheme == "https",
        httponly=True,
        samesite="strict",
    )
    return response


def _login(message: str) -> HTMLResponse:
    return HTMLResponse(page.login(message), status_code=401, headers=PAGE_HEADERS)
