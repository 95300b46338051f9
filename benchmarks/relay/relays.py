"""Bare relays: the floor the gateway is measured against, and the upstream-client comparison.

Each does the least a gateway must: read the JSON body, rewrite `model`, forward it to the
endpoint, and relay the answer (the whole body, or the SSE bytes as they come). No auth, no
routing, no statistics. The ASGI variants are built like the gateway (FastAPI under uvicorn) and
differ only in the upstream client; `aiohttp-aiohttp` is aiohttp end to end (the lowest floor).

    fastapi-aiohttp        FastAPI + aiohttp.ClientSession         (the floor for the gateway)
    fastapi-httpx          FastAPI + httpx.AsyncClient, default transport
    fastapi-httpx-aiohttp  FastAPI + httpx.AsyncClient over httpx_aiohttp.AiohttpTransport
    aiohttp-aiohttp        aiohttp.web + aiohttp.ClientSession

Run: python -m benchmarks.relay.relays KIND --port 9001 --upstream http://127.0.0.1:9000/v1
(`--server h11` runs an ASGI variant on uvicorn's asyncio loop + h11 instead of uvloop + httptools)
"""

from __future__ import annotations

import argparse
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import httpx
import uvicorn
from aiohttp import web
from fastapi import FastAPI, Request, Response
from fastapi.responses import StreamingResponse
from httpx_aiohttp import AiohttpTransport

from benchmarks.relay.backend import UPSTREAM_MODEL

POOL_SIZE = 1000  # connections per upstream client: generous, so the pool never queues


def rewrite(raw: bytes) -> tuple[bytes, bool]:
    """The body rewrite every relay does: parse, set the upstream model, serialise."""
    body = json.loads(raw)
    body["model"] = UPSTREAM_MODEL
    return json.dumps(body).encode(), bool(body.get("stream"))


class AiohttpRelayClient:
    def __init__(self) -> None:
        connector = aiohttp.TCPConnector(limit=POOL_SIZE, limit_per_host=POOL_SIZE)
        self.session = aiohttp.ClientSession(connector=connector, auto_decompress=False)

    async def forward(self, url: str, raw: bytes) -> Response:
        data, stream = rewrite(raw)
        headers = {"content-type": "application/json"}
        upstream = await self.session.post(url, data=data, headers=headers)
        kind = upstream.headers.get("content-type", "application/json")
        if not stream:
            body = await upstream.read()
            upstream.release()
            return Response(body, status_code=upstream.status, media_type=kind)

        async def chunks() -> AsyncIterator[bytes]:
            try:
                async for chunk in upstream.content.iter_any():
                    yield chunk
            finally:
                upstream.release()

        return StreamingResponse(chunks(), status_code=upstream.status, media_type=kind)

    async def aclose(self) -> None:
        await self.session.close()


class HttpxRelayClient:
    def __init__(self, over_aiohttp: bool) -> None:
        limits = httpx.Limits(max_connections=POOL_SIZE, max_keepalive_connections=POOL_SIZE)
        transport = AiohttpTransport(limits=limits) if over_aiohttp else None
        self.client = httpx.AsyncClient(limits=limits, transport=transport, timeout=30.0)

    async def forward(self, url: str, raw: bytes) -> Response:
        data, stream = rewrite(raw)
        headers = {"content-type": "application/json"}
        request = self.client.build_request("POST", url, content=data, headers=headers)
        upstream = await self.client.send(request, stream=True)
        kind = upstream.headers.get("content-type", "application/json")
        if not stream:
            body = await upstream.aread()
            await upstream.aclose()
            return Response(body, status_code=upstream.status_code, media_type=kind)

        async def chunks() -> AsyncIterator[bytes]:
            try:
                async for chunk in upstream.aiter_raw():
                    yield chunk
            finally:
                await upstream.aclose()

        return StreamingResponse(chunks(), status_code=upstream.status_code, media_type=kind)

    async def aclose(self) -> None:
        await self.client.aclose()


UPSTREAMS: dict[str, Callable[[], AiohttpRelayClient | HttpxRelayClient]] = {
    "fastapi-aiohttp": AiohttpRelayClient,
    "fastapi-httpx": lambda: HttpxRelayClient(over_aiohttp=False),
    "fastapi-httpx-aiohttp": lambda: HttpxRelayClient(over_aiohttp=True),
}
KINDS = (*UPSTREAMS, "aiohttp-aiohttp")


def asgi_relay(kind: str, upstream_url: str) -> FastAPI:
    holder: dict[str, Any] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        holder["upstream"] = UPSTREAMS[kind]()
        yield
        await holder["upstream"].aclose()

    app = FastAPI(lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        response: Response = await holder["upstream"].forward(
            upstream_url + "/chat/completions", await request.body()
        )
        return response

    @app.get("/health")
    async def health() -> Response:
        return Response(b"{}", media_type="application/json")

    return app


def aiohttp_relay(upstream_url: str) -> web.Application:
    async def start(app: web.Application) -> None:
        connector = aiohttp.TCPConnector(limit=POOL_SIZE, limit_per_host=POOL_SIZE)
        app["session"] = aiohttp.ClientSession(connector=connector, auto_decompress=False)

    async def stop(app: web.Application) -> None:
        await app["session"].close()

    async def chat(request: web.Request) -> web.StreamResponse:
        data, stream = rewrite(await request.read())
        session: aiohttp.ClientSession = request.app["session"]
        url = upstream_url + "/chat/completions"
        async with session.post(url, data=data, headers={"content-type": "application/json"}) as up:
            kind = up.headers.get("content-type", "application/json")
            if not stream:
                return web.Response(
                    body=await up.read(),
                    status=up.status,
                    content_type=None,
                    headers={"content-type": kind},
                )
            response = web.StreamResponse(status=up.status, headers={"content-type": kind})
            await response.prepare(request)
            async for chunk in up.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response

    async def health(request: web.Request) -> web.Response:
        return web.json_response({})

    app = web.Application()
    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/health", health)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=KINDS)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="the endpoint's base URL, with /v1")
    parser.add_argument("--server", choices=("httptools", "h11"), default="httptools")
    args = parser.parse_args()
    if args.kind == "aiohttp-aiohttp":
        import uvloop

        uvloop.install()
        web.run_app(
            aiohttp_relay(args.upstream),
            host="127.0.0.1",
            port=args.port,
            access_log=None,
            print=None,
        )
        return
    fast = args.server == "httptools"
    uvicorn.run(
        asgi_relay(args.kind, args.upstream),
        host="127.0.0.1",
        port=args.port,
        loop="uvloop" if fast else "asyncio",
        http="httptools" if fast else "h11",
        access_log=False,
        log_level="warning",
        lifespan="on",
    )


if __name__ == "__main__":
    main()
