"""Real vLLM servers for the engine tier: the engine venv, the tiny model, a server process.

    venv = engine_venv()                        # None when `bash .ci/install-vllm.sh` never ran
    model = tiny_model(venv)                    # built once, cached by a hash of tiny_model.py
    with VllmServer(venv, model, scratch, ServeParams(kv_cache_tokens=8192)) as server:
        httpx.get(server.base_url + "/v1/models")

The server runs from the engine venv (vLLM pins its own torch, transformers and openai, so it
never shares the gateway's), offline, with its caches and temporary files in a scratch folder,
on a free loopback port. It is ready when /v1/models lists the served name: /health answers
before the model is loaded. It stops by PID, SIGTERM first (the API server then stops its
engine core and worker), SIGKILL after STOP_TIMEOUT_S, then SIGKILL to whatever is left of
its process group.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

import httpx

from tests.fixtures.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
INSTALL_COMMAND = "bash .ci/install-vllm.sh"
STAMP = ".slo-gateway-engine-venv"  # written by the install script once vLLM starts
MODEL_SCRIPT = Path(__file__).with_name("tiny_model.py")
SERVED_NAME = "tiny-llama"
KV_BYTES_PER_TOKEN = 16 * 1024  # the tiny Llama: 4 layers x (K + V) x 512 x float32
READY_TIMEOUT_S = 240.0  # 28 s on a quiet machine, 85-105 s on a loaded one
STOP_TIMEOUT_S = 30.0
TEST_TIMEOUT_S = READY_TIMEOUT_S + 180  # the first test of the session waits for the server too
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
}


def engine_venv() -> Path | None:
    """The engine virtualenv ($SLO_VLLM_VENV, else .vllm-venv), if the install script built it."""
    venv = Path(os.environ.get("SLO_VLLM_VENV") or ROOT / ".vllm-venv")
    return venv if (venv / STAMP).is_file() and (venv / "bin" / "vllm").is_file() else None


def cache_dir() -> Path:
    """Where built models live between runs ($SLO_VLLM_CACHE, else .vllm-cache; git-ignored)."""
    return Path(os.environ.get("SLO_VLLM_CACHE") or ROOT / ".vllm-cache")


def tiny_model(venv: Path) -> Path:
    """The tiny random Llama's folder, built with the engine venv's python unless cached."""
    digest = hashlib.sha256(MODEL_SCRIPT.read_bytes()).hexdigest()[:16]
    target = cache_dir() / f"tiny-llama-{digest}"
    if (target / "model.safetensors").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # Built beside the target and renamed into place, so an interrupted build is never used.
    building = Path(tempfile.mkdtemp(prefix="building-", dir=target.parent))
    try:
        _build(venv, building)
        if not target.exists():  # else another session built it meanwhile
            building.rename(target)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return target


def _build(venv: Path, output: Path) -> None:
    command = [str(venv / "bin" / "python"), str(MODEL_SCRIPT), str(output)]
    env = os.environ | OFFLINE_ENV
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"{MODEL_SCRIPT.name} failed ({done.returncode}): {done.stderr[-3000:]}")


@dataclass(frozen=True, slots=True)
class ServeParams:
    kv_cache_tokens: int = 8192  # always capped: uncapped, the CPU worker asks for 0.92 x RAM
    max_model_len: int = 4096
    max_num_seqs: int = 16
    scheduling_policy: Literal["fcfs", "priority"] = "fcfs"
    cpu_bind: str | None = None  # VLLM_CPU_OMP_THREADS_BIND, e.g. "0" and "1" for two servers

    def flags(self) -> list[str]:
        options = {
            "--served-model-name": SERVED_NAME,
            "--dtype": "float32",
            "--max-model-len": str(self.max_model_len),
            "--max-num-seqs": str(self.max_num_seqs),
            "--kv-cache-memory-bytes": str(self.kv_cache_tokens * KV_BYTES_PER_TOKEN),
            "--scheduling-policy": self.scheduling_policy,
        }
        return [
            *itertools.chain.from_iterable(options.items()),
            "--enforce-eager",  # starts in 30 s instead of 2 min; the tier times no decode speed
            "--enable-prompt-tokens-details",  # usage.prompt_tokens_details.cached_tokens
            "--enable-prefix-caching",  # vLLM 0.32's default; test_vllm_prefix.py needs it on
        ]


class VllmServer:
    """`vllm serve` of one model in its own process group, from the engine venv."""

    def __init__(self, venv: Path, model: Path, scratch: Path, params: ServeParams) -> None:
        self.venv = venv
        self.model = model
        self.scratch = scratch
        self.params = params
        self.port = free_port()
        self.log_path = scratch / f"vllm-{self.port}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def base_url(self) -> str:
        """The server root (no /v1)."""
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> VllmServer:
        self.start()
        try:
            self.wait_ready(READY_TIMEOUT_S)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self.scratch.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("wb")
        command = [str(self.venv / "bin" / "vllm"), "serve", str(self.model)]
        where = ["--host", "127.0.0.1", "--port", str(self.port)]
        self.process = subprocess.Popen(
            [*command, *where, *self.params.flags()],
            env=self._env(),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=self.scratch,
            start_new_session=True,  # its own group: a SIGKILL fallback reaches its children
        )

    def _env(self) -> dict[str, str]:
        scratch = str(self.scratch)
        env = os.environ | OFFLINE_ENV | {"VLLM_CACHE_ROOT": scratch, "TMPDIR": scratch}
        if self.params.cpu_bind is not None:
            env["VLLM_CPU_OMP_THREADS_BIND"] = self.params.cpu_bind
        return env

    def wait_ready(self, timeout_s: float) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout_s
        while not self._lists_model():
            if self.process.poll() is not None:
                code = self.process.returncode
                raise RuntimeError(f"vllm serve exited {code}: {self.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"vllm serve not ready in {timeout_s:.0f} s: {self.log_tail()}")
            time.sleep(1.0)

    def _lists_model(self) -> bool:
        try:
            response = httpx.get(self.base_url + "/v1/models", timeout=2.0)
        except httpx.HTTPError:
            return False
        return response.status_code == 200 and any(
            m.get("id") == SERVED_NAME for m in response.json().get("data", [])
        )

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process is not None:
            # The engine core and worker are in the server's process group; none may outlive it.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    def metrics(self) -> str:
        response = httpx.get(self.base_url + "/metrics", timeout=5.0)
        response.raise_for_status()
        return response.text
