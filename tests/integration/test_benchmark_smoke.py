"""The relay benchmark still runs (`python -m benchmarks.relay --quick`), and its arithmetic holds.

Not a timed test: the quick run asserts the output's structure and that every relay delivered
every answer and every streamed token, never a speed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.relay import figures
from benchmarks.relay.phases import PHASES

ROOT = Path(__file__).resolve().parents[2]
QUICK_SYSTEMS = {"direct", "fastapi-aiohttp", "gateway-memory"}
TOKENS = 8


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    out = tmp_path_factory.mktemp("relay")
    command = [
        sys.executable,
        "-m",
        "benchmarks.relay",
        "--quick",
        "--no-litellm",
        "--tokens",
        str(TOKENS),
        "--out",
        str(out),
    ]
    done = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=100, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    [data] = out.glob("relay-overhead-*.json")
    [text] = out.glob("relay-overhead-*.md")
    return json.loads(data.read_text()), text.read_text()


@pytest.mark.integration
def test_quick_run_measures_every_phase_on_every_system(
    quick_run: tuple[dict[str, Any], str],
) -> None:
    result, _ = quick_run
    seen = {(r["system"], r["phase"]) for r in result["records"]}
    assert seen == {(s, p.name) for s in QUICK_SYSTEMS for p in PHASES}
    assert set(result["summary"]) == QUICK_SYSTEMS
    gateway = result["summary"]["gateway-memory"]
    for figure in ("req_per_s", "req_per_core_s", "tokens_per_core_s", "cpu_s_per_1k_req"):
        assert gateway[figure] is not None and gateway[figure] > 0, figure
    assert result["ratios"]["fastapi-aiohttp"]["fastapi-aiohttp"]["req_per_core_s"] == 1.0


@pytest.mark.integration
def test_every_relay_delivers_every_answer_and_token(quick_run: tuple[dict[str, Any], str]) -> None:
    result, _ = quick_run
    for record in result["records"]:
        where = f"{record['system']} {record['phase']}"
        assert record["ok"] > 0 and record["errors"] == 0, where
        if record["phase"] in ("ttft50", "stream64"):
            assert record["tokens"] == TOKENS * record["ok"], where
            assert record["ttft_p50_ms"] is not None, where


@pytest.mark.integration
def test_markdown_has_the_tables(quick_run: tuple[dict[str, Any], str]) -> None:
    _, text = quick_run
    for heading in (
        "## Figures",
        "## Ratios against the floor",
        "## Targets (issue 9)",
        "## Load generator and load core",
    ):
        assert heading in text
    assert "slo-gateway, memory store" in text


def _record(system: str, repeat: int, p50_ms: float, ok: int, cpu_s: float) -> dict[str, Any]:
    return {
        "system": system,
        "phase": "open50",
        "repeat": repeat,
        "p50_ms": p50_ms,
        "p99_ms": p50_ms,
        "ok": ok,
        "scheduled": ok,
        "wall_s": 1.0,
        "planned_s": 1.0,
        "proxy_cpu_s": cpu_s,
        "loadgen_cpu_s": 0.1,
        "backend_cpu_s": 0.1,
        "redis_cpu_s": 0.0,
    }


def test_added_latency_is_taken_against_direct_in_the_same_repeat() -> None:
    records = [
        _record("direct", 0, 1.0, 50, 0.0),
        _record("direct", 1, 3.0, 50, 0.0),
        _record("relay", 0, 2.0, 50, 0.5),
        _record("relay", 1, 5.0, 50, 0.5),
        _record("relay", 2, 9.0, 50, 0.5),
    ]  # no direct in repeat 2: left out
    summary = figures.summarise(records, ["direct", "relay"])
    assert summary["relay"]["added_p50_ms_at_50"] == pytest.approx(1.5)  # median of 1 and 2


def test_a_phase_that_lagged_or_lost_requests_is_saturated() -> None:
    kept_up = _record("relay", 0, 2.0, 50, 0.5)
    lagged = _record("slow", 0, 900.0, 50, 0.5) | {"wall_s": 3.0}
    lost = _record("lossy", 0, 2.0, 40, 0.5) | {"scheduled": 50}
    records = [kept_up, lagged, lost]
    assert figures.saturated(records, "relay") == []
    assert figures.saturated(records, "slow") == ["open50"]
    assert figures.saturated(records, "lossy") == ["open50"]


@pytest.mark.parametrize("stream", [True, False])
def test_the_instruction_counts_inner_run_serves_its_requests(stream: bool) -> None:
    """`benchmarks.relay.instructions` counts under valgrind what this run does; without
    valgrind, the run itself (the app over the in-process upstream) must still answer 200s."""
    command = [sys.executable, "benchmarks/relay/instructions.py", "--inside", "--requests", "3"]
    command += ["--stream"] if stream else []
    done = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
