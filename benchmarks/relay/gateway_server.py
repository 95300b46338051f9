"""The slo-gateway as the benchmark runs it: one endpoint (the mock; BENCH_ENDPOINTS=N for N),
one tenant, uvloop+httptools.

The store follows the gateway's own settings, as in production: with GATEWAY_REDIS_URL (or
REDIS_URL) set, the Redis store on that server, else the memory store. The benchmark sets
GATEWAY_REDIS_PREFIX so the keys it leaves can be counted (proof the Redis store was in use).

Run: GATEWAY_REDIS_URL=redis://... python -m benchmarks.relay.gateway_server --port 9002 \
        --upstream http://127.0.0.1:9000/v1
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

import uvicorn
import yaml
from fastapi import FastAPI

from benchmarks.relay.backend import KEY_PREFIX, PUBLIC_MODEL, TENANT_KEY, UPSTREAM_MODEL
from gateway.config.settings import Settings, parse_config
from gateway.server.app import create_app
from gateway.server.workers import Supervisor

TENANT_KEY_ENV = "BENCH_TENANT_KEY"
ENDPOINTS_ENV = "BENCH_ENDPOINTS"


def bench_config(upstream_url: str, policy: str) -> dict[str, Any]:
    """One endpoint, the mock; with BENCH_ENDPOINTS=N, N endpoints that are all the mock, so a
    request's decision ranks N candidates (the decision's share of a request's CPU at N)."""
    count = int(os.environ.get(ENDPOINTS_ENV, "1"))
    ids = ["mock"] if count == 1 else [f"mock-{number}" for number in range(count)]
    return {
        "endpoints": [
            {
                "id": endpoint_id,
                "kind": "vllm",
                "base_url": upstream_url,
                "models": {PUBLIC_MODEL: UPSTREAM_MODEL},
            }
            for endpoint_id in ids
        ],
        "tenants": {
            "bench": {
                "api_key_env": TENANT_KEY_ENV,
                "allowed_classes": ["interactive"],
                "default_class": "interactive",
            }
        },
        "classes": {"interactive": {"ttft_ms": 1000, "tpot_ms": 100, "priority": 10}},
        "policy": {"name": policy},
    }


def build_app(upstream_url: str, policy: str) -> FastAPI:
    os.environ.setdefault(TENANT_KEY_ENV, TENANT_KEY)
    os.environ.setdefault("GATEWAY_REDIS_PREFIX", KEY_PREFIX)
    return create_app(parse_config(bench_config(upstream_url, policy), "bench"), Settings())


def supervise(upstream_url: str, policy: str, port: int, workers: int) -> int:
    """`slo-gateway serve --workers N` on the bench config, written where its workers read it."""
    os.environ.setdefault(TENANT_KEY_ENV, TENANT_KEY)
    os.environ.setdefault("GATEWAY_REDIS_PREFIX", KEY_PREFIX)
    data = bench_config(upstream_url, policy)
    with tempfile.TemporaryDirectory(prefix="sg-bench-") as workdir:
        path = Path(workdir) / "gateway.yaml"
        path.write_text(yaml.safe_dump(data))
        config = parse_config(data, "bench")
        return Supervisor(
            config, path, Settings(log_level="warning"), workers, "127.0.0.1", port
        ).run()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="the endpoint's base URL, with /v1")
    parser.add_argument("--policy", default="slo_aware")
    parser.add_argument("--workers", type=int, default=0, help="serve --workers N (0: in-process)")
    args = parser.parse_args()
    if args.workers:
        raise SystemExit(supervise(args.upstream, args.policy, args.port, args.workers))
    uvicorn.run(
        build_app(args.upstream, args.policy),
        host="127.0.0.1",
        port=args.port,
        loop="uvloop",
        http="httptools",
        access_log=False,
        log_level="warning",
        lifespan="on",
    )


if __name__ == "__main__":
    main()
