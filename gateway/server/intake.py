"""What every API route does before `Router.handle`: find the caller, read the JSON body, check
the model is served through the API, and classify the request (its SLO class and hints).

The headers the gateway reads are picked out of the request in one pass (`Wanted`). The SLO
class comes from `x-slo-class`, or the inference gateway's `x-gateway-inference-objective`;
`x-slo-ttft-ms` / `x-slo-tpot-ms` tighten its targets for tenants allowed hints (auth.py).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from starlette.requests import ClientDisconnect
from starlette.types import Receive

from gateway.config.settings import Api
from gateway.core.engine_hints import EngineHints
from gateway.core.fair_charges import SubIds
from gateway.errors import BodyTooLarge, InvalidRequest, ModelNotFound
from gateway.server.auth import Caller, model_not_allowed
from gateway.server.runtime import Runtime
from gateway.telemetry.record import RequestRecord
from policies.base import RouteRequest

# A JSON escape of a UTF-16 surrogate (paired or not): only a body holding one is walked.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_WANTED = frozenset(
    {
        b"authorization",
        b"x-api-key",
        b"content-length",
        b"x-slo-class",
        b"x-gateway-inference-objective",
        b"x-slo-ttft-ms",
        b"x-slo-tpot-ms",
        b"anthropic-version",
        b"anthropic-beta",
        b"x-session-id",
        b"x-fairness-id",
        b"x-gateway-inference-fairness-id",
    }
)


def wanted_headers(request: Request) -> dict[bytes, str]:
    """The headers the gateway reads, by lower-case name (the first of each)."""
    found: dict[bytes, str] = {}
    for name, value in request.scope["headers"]:
        if name in _WANTED and name not in found:
            found[name] = value.decode("latin-1")
    return found


@dataclass(slots=True)
class Intake:
    runtime: Runtime
    caller: Caller
    body: dict[str, Any]
    record: RequestRecord
    headers: dict[bytes, str]

    def hints(self, route: RouteRequest) -> EngineHints | None:
        """The class's engine priority and service tier for this caller (every generating API
        takes them; embeddings pass as sent)."""
        return self.runtime.keyring.hints(self.caller, route.slo.name)


async def take(request: Request, *, api_key_header: bool = False) -> Intake:
    """Authenticate and read the body; `api_key_header`: accept Anthropic's x-api-key too."""
    runtime: Runtime = request.app.state.runtime
    headers = wanted_headers(request)
    api_key = headers.get(b"x-api-key") if api_key_header else None
    caller = runtime.keyring.caller(headers.get(b"authorization"), api_key)
    request.state.tenant = caller.tenant
    record: RequestRecord = request.state.record
    record.key_subject = caller.key.subject if caller.key is not None else None
    body = await read_body(request, runtime.config.server.max_body_bytes, headers)
    record.body = body
    return Intake(runtime, caller, body, record, headers)


def route_request(
    intake: Intake,
    request: Request,
    api: Api,
    *,
    model: str,
    prompt_tokens: int,
    max_tokens: int | None,
    stream: bool,
) -> RouteRequest:
    """The request as routing sees it, once its model is known to be served through `api`."""
    runtime, headers = intake.runtime, intake.headers
    if not runtime.registry.serving(model, api):
        raise _not_served(runtime, model, api)
    if not intake.caller.may_use(model):
        raise model_not_allowed(model)
    record, config = intake.record, runtime.config
    record.fallbacks = _usable(intake, config.fallbacks.get(model, ()), api)
    record.context_fallbacks = _usable(intake, config.context_fallbacks.get(model, ()), api)
    requested = headers.get(b"x-slo-class") or headers.get(b"x-gateway-inference-objective")
    slo = runtime.keyring.slo(
        intake.caller, requested, headers.get(b"x-slo-ttft-ms"), headers.get(b"x-slo-tpot-ms")
    )
    return RouteRequest(
        request_id=request.state.gateway_id,
        model=model,
        tenant=intake.caller.tenant,
        slo=slo,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        stream=stream,
        seq=runtime.next_seq(),
        session=session_of(headers, intake.body),
        fairness_key=fairness_key_of(intake.caller, headers, runtime.sub_ids),
    )


def _usable(intake: Intake, models: list[str] | tuple[()], api: Api) -> tuple[str, ...]:
    """The fallbacks the caller's key may use that are served through its API."""
    registry = intake.runtime.registry
    return tuple(m for m in models if intake.caller.may_use(m) and registry.serving(m, api))


def fairness_key_of(caller: Caller, headers: dict[bytes, str], sub_ids: SubIds) -> str | None:
    """A sub-tenant the client named (`x-fairness-id`, else the Kubernetes inference gateway's
    `x-gateway-inference-fairness-id`), where its tenant allows one: "<tenant>/<id>". The id
    becomes a counter in the shared store and a metric label, so it is held to a short name,
    and to `max_sub_ids` of them per tenant (`SubIds`)."""
    fairness = caller.config.fairness
    if not fairness.sub_ids:
        return None
    for header in (b"x-fairness-id", b"x-gateway-inference-fairness-id"):
        named = headers.get(header)
        if named:
            if not _FAIRNESS_ID.fullmatch(named):
                raise invalid(
                    f"The {header.decode()} header must be 1-64 letters, digits or ._:@- "
                    "characters.",
                    header.decode(),
                )
            return sub_ids.key(caller.tenant, named, fairness.max_sub_ids, time.monotonic())
    return None


_FAIRNESS_ID = re.compile(r"[A-Za-z0-9._:@-]{1,64}")


def session_of(headers: dict[bytes, str], body: dict[str, Any]) -> str | None:
    """The conversation key a client gave: `x-session-id`, OpenAI's `prompt_cache_key`, or
    `user`; it seeds where a conversation's first turn goes (policies/slo_aware.py)."""
    found = headers.get(b"x-session-id") or body.get("prompt_cache_key") or body.get("user")
    return found if isinstance(found, str) and found else None


def _not_served(runtime: Runtime, model: str, api: Api) -> ModelNotFound:
    if runtime.registry.serving(model, "chat") or model in runtime.registry.models():
        message = f"The model {model!r} is not served through this API ({api}) here."
    else:
        message = f"The model {model!r} does not exist or you do not have access to it."
    return ModelNotFound(message, code="model_not_found", param="model")


async def read_body(
    request: Request, max_bytes: int, headers: dict[bytes, str] | None = None
) -> dict[str, Any]:
    declared = (headers or wanted_headers(request)).get(b"content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise _too_large(max_bytes)
    raw = await _read(request.receive, max_bytes)
    try:
        # decoded strictly here (a leading BOM allowed, as json.loads allows it): json.loads
        # would let UTF-8-encoded surrogates through
        body = json.loads(raw.decode("utf-8-sig"))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # nesting too deep
        raise InvalidRequest(
            f"The request body is not valid JSON ({exc}). Send a JSON object with "
            "'Content-Type: application/json'.",
            code="invalid_json",
        ) from None
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.", code="invalid_json")
    if _SURROGATE_ESCAPE.search(raw) is not None:
        _refuse_unpaired_surrogates(body)
    return body


def _refuse_unpaired_surrogates(body: dict[str, Any]) -> None:
    """A 400 naming the first string (or key) holding a `\\uD800`-`\\uDFFF` escape not paired
    into one character: JSON's grammar allows it, but it is no Unicode text, so it can be
    neither hashed, counted nor tokenized (Anthropic's API refuses such a body too). Walked
    without recursion: bodies nest as deep as the parser allows."""
    pending: list[tuple[Any, str]] = [(body, "")]
    while pending:
        value, path = pending.pop()
        if isinstance(value, str):
            if not _is_text(value):
                raise _unpaired(path)
        elif isinstance(value, dict):
            for key, item in value.items():
                inner = f"{path}.{key}" if path else key
                if not _is_text(key):
                    raise _unpaired(inner)
                pending.append((item, inner))
        elif isinstance(value, list):
            pending.extend((item, f"{path}[{i}]") for i, item in enumerate(value))


def _is_text(value: str) -> bool:
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def _unpaired(path: str) -> InvalidRequest:
    where = path.encode("utf-8", "backslashreplace").decode()  # the message must encode
    return InvalidRequest(
        f"'{where}' holds an unpaired UTF-16 surrogate (a \\uD800-\\uDFFF escape without its "
        "pair), which is not a Unicode character; send valid UTF-8 text.",
        code="invalid_value",
        param=where,
    )


async def _read(receive: Receive, max_bytes: int) -> bytes:
    """The body from the ASGI messages (Request.stream's async generator costs more)."""
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        part = message.get("body", b"")
        size += len(part)
        if size > max_bytes:
            raise _too_large(max_bytes)
        parts.append(part)
        if not message.get("more_body", False):
            return parts[0] if len(parts) == 1 else b"".join(parts)


def _too_large(max_bytes: int) -> BodyTooLarge:
    return BodyTooLarge(
        f"The request body exceeds the gateway's limit of {max_bytes} bytes; shorten the prompt.",
        code="request_too_large",
    )


def invalid(message: str, param: str) -> InvalidRequest:
    return InvalidRequest(message, code="invalid_value", param=param)


def positive_int(body: dict[str, Any], name: str) -> int | None:
    """`body[name]` when it is a positive integer, None when absent; else a 400."""
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise invalid(f"'{name}' must be a positive integer.", name)
    return value


def stream_flag(body: dict[str, Any]) -> bool:
    stream = body.get("stream", False)
    if not isinstance(stream, bool) and stream is not None:
        raise invalid("'stream' must be a boolean.", "stream")
    return bool(stream)


def model_of(body: dict[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise invalid("You must provide a model parameter (a non-empty string).", "model")
    return model
