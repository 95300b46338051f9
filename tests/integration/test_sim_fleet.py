"""The simulated fleet: config, one-loop serving, and the CLI as a subprocess."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml

from gateway.config.settings import EndpointConfig
from gateway.sim.fleet import (
    FleetConfig,
    api_key_environment,
    base_urls,
    demo_fleet,
    gateway_endpoints,
    load_fleet,
    serve_fleet,
)
from tests.fixtures.servers import free_port

pytestmark = pytest.mark.integration

ENV = os.environ | {"PYTHONPATH": str(Path(__file__).parents[2])}


def on_free_ports(config: FleetConfig) -> FleetConfig:
    engines = [m.model_copy(update={"port": free_port()}) for m in config.engines]
    providers = [m.model_copy(update={"port": free_port()}) for m in config.providers]
    return config.model_copy(update={"engines": engines, "providers": providers})


def test_demo_fleet_has_the_four_briefed_members() -> None:
    config = demo_fleet(9100)
    assert [m.id for m in config.members()] == [
        "vllm-fast",
        "vllm-slow",
        "provider-a",
        "provider-b",
    ]
    assert [m.port for m in config.members()] == [9100, 9101, 9102, 9103]
    fast, slow = config.engines
    assert slow.params.step_base_s == pytest.approx(2 * fast.params.step_base_s)
    assert slow.params.prefill_per_token_s == pytest.approx(2 * fast.params.prefill_per_token_s)
    a, b = config.providers
    assert a.params.ttft_median_s < b.params.ttft_median_s
    assert a.price.output_per_1m > b.price.output_per_1m


def test_gateway_endpoints_validate_against_the_gateway_schema() -> None:
    entries = gateway_endpoints(demo_fleet(9100))
    endpoints = [EndpointConfig.model_validate(entry) for entry in entries]
    assert {e.kind for e in endpoints} == {"vllm", "openai"}
    assert all(e.models == {"llama-3-8b": e.models["llama-3-8b"]} for e in endpoints)
    assert endpoints[0].models["llama-3-8b"] == "meta-llama/Meta-Llama-3-8B-Instruct"
    assert endpoints[2].api_key_env == "SIM_PROVIDER_A_KEY"


def test_fleet_yaml_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(demo_fleet(9100).model_dump(mode="json")))
    assert load_fleet(path) == demo_fleet(9100)


def test_duplicate_ports_are_rejected() -> None:
    config = demo_fleet(9100).model_dump()
    config["providers"][0]["port"] = 9100
    with pytest.raises(ValueError, match="duplicate member ports"):
        FleetConfig.model_validate(config)


async def test_serve_fleet_runs_every_member_until_stopped() -> None:
    config = on_free_ports(demo_fleet(9100))
    stop, ready = asyncio.Event(), asyncio.Event()
    serving = asyncio.create_task(serve_fleet(config, stop=stop, ready=ready))
    await asyncio.wait_for(ready.wait(), 10)
    async with httpx.AsyncClient(timeout=5) as client:
        for member in config.members():
            url = base_urls(config)[member.id] + "/models"
            headers = {"authorization": f"Bearer {member.params.api_key}"}
            response = await client.get(url, headers=headers)
            assert response.json()["data"][0]["id"] == member.params.model
    stop.set()
    await asyncio.wait_for(serving, 10)


def test_cli_serves_an_engine_and_exits_on_sigterm() -> None:
    port = free_port()
    command = [sys.executable, "-m", "gateway.sim", "engine", "--port", str(port)]
    command += ["--params-json", '{"model": "m"}']
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=ENV) as process:
        try:
            assert process.stdout is not None
            assert process.stdout.readline().split() == ["engine", f"http://127.0.0.1:{port}/v1"]
            body = {"model": "m", "prompt": "hi", "max_tokens": 2}
            url = f"http://127.0.0.1:{port}/v1/completions"
            assert httpx.post(url, json=body, timeout=5).status_code == 200
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=10) == 0
        finally:
            if process.poll() is None:
                process.kill()


def test_cli_takes_a_member_from_a_fleet_file(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    config = on_free_ports(demo_fleet(9100))
    path.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    command = [sys.executable, "-m", "gateway.sim", "provider", "--fleet", str(path)]
    command += ["--id", "provider-b"]
    port = config.member("provider-b").port
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=ENV) as process:
        try:
            assert process.stdout is not None
            assert process.stdout.readline().split()[1] == f"http://127.0.0.1:{port}/v1"
            assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
            process.send_signal(signal.SIGINT)
            assert process.wait(timeout=10) == 0
        finally:
            if process.poll() is None:
                process.kill()


def test_api_key_environment_names_each_provider_key() -> None:
    assert api_key_environment(demo_fleet(9100)) == {
        "SIM_PROVIDER_A_KEY": "sk-provider-a",
        "SIM_PROVIDER_B_KEY": "sk-provider-b",
    }


def test_a_simulated_servers_log_lines_name_the_simulator() -> None:
    port = free_port()
    command = [sys.executable, "-m", "gateway.sim", "engine", "--port", str(port)]
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV
    ) as process:
        try:
            assert process.stdout is not None
            process.stdout.readline()  # serving
            with socket.create_connection(("127.0.0.1", port), timeout=5) as garbage:
                garbage.sendall(b"NOT HTTP\r\n\r\n")
                garbage.recv(1024)  # uvicorn answers 400 and logs a warning
            process.send_signal(signal.SIGTERM)
            _, errors = process.communicate(timeout=10)
        finally:
            if process.poll() is None:
                process.kill()
    assert "[sim engine] Invalid HTTP request received." in errors
