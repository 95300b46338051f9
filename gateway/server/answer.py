"""What the client's answer carries besides the upstream's body: the headers that explain the
routing decision, and a whole (non-streamed) answer sent in two ASGI messages."""

from __future__ import annotations

from starlette.types import Send

from policies.base import Ranking, RouteRequest

STREAM_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


def explain(
    endpoint_id: str, attempts: int, ranking: Ranking, request: RouteRequest
) -> dict[str, str]:
    """The response headers that say which endpoint answered and why: its decision (the
    policy's reason), and for SLO-aware routing the predictions it judged."""
    headers = {
        "x-slo-gateway-endpoint": endpoint_id,
        "x-slo-gateway-class": request.slo.name,
        "x-slo-gateway-model": request.model,  # the one served (a fallback's, if one was)
        "x-slo-gateway-attempts": str(attempts),
    }
    if ranking.reason:
        headers["x-slo-gateway-decision"] = ranking.reason
    # the prefix index's prediction for the endpoint that answered (gateway/core/prefix_index.py)
    cached = request.cached_tokens.get(endpoint_id, 0.0)
    headers["x-slo-gateway-predicted-cached-tokens"] = f"{cached:.0f}"
    if ranking.predicted_ttft_s is not None:
        headers["x-slo-gateway-predicted-ttft-ms"] = f"{ranking.predicted_ttft_s * 1e3:.0f}"
        headers["x-slo-gateway-at-risk"] = "true" if ranking.at_risk else "false"
    if ranking.predicted_ttft_p95_s is not None:
        headers["x-slo-gateway-predicted-ttft-p95-ms"] = _ms(ranking.predicted_ttft_p95_s)
    if ranking.binding and ranking.binding_p95_s is not None and ranking.binding_target_s:
        # which of the class's targets binds, the p95 judged against it, and the target
        headers["x-slo-gateway-binding-target"] = ranking.binding
        headers["x-slo-gateway-judged-p95-ms"] = _ms(ranking.binding_p95_s)
        headers["x-slo-gateway-target-ms"] = _ms(ranking.binding_target_s)
    return headers


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.0f}"


async def send_whole(send: Send, status: int, headers: dict[str, str], body: bytes) -> None:
    raw = [*raw_headers(headers), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


def raw_headers(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
