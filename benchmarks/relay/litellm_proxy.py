"""LiteLLM proxy as the outside baseline, in its own virtualenv so it never touches ours.

The benchmark installs `litellm[proxy]` from PyPI into `.bench/litellm-venv` on first use (about
a minute; `.bench/` ignores itself in git) and runs the proxy with one worker, no database, the
tenant key as master key (so it checks a key per request, as the gateway does), and offline
settings: the bundled model cost map, telemetry off. One model entry
points at the mock endpoint through LiteLLM's OpenAI-compatible provider.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from benchmarks.relay.backend import PUBLIC_MODEL, TENANT_KEY, UPSTREAM_MODEL

BENCH_DIR = Path(".bench")
VENV = BENCH_DIR / "litellm-venv"
REQUIREMENT = "litellm[proxy]"
INSTALL_TIMEOUT_S = 900.0
OFFLINE_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_TELEMETRY": "False",
    "LITELLM_LOG": "ERROR",
    "LITELLM_MODE": "PRODUCTION",
    "DISABLE_ADMIN_UI": "True",
    "NO_DOCS": "True",
}


def executable() -> Path:
    return VENV / "bin" / "litellm"


def ensure_installed(log: Path) -> Path:
    """The `litellm` command in the benchmark's own venv, installing it when missing."""
    if executable().exists():
        return executable()
    BENCH_DIR.mkdir(exist_ok=True)
    (BENCH_DIR / ".gitignore").write_text("*\n")
    print(f"installing {REQUIREMENT} into {VENV} (log: {log}) ...", file=sys.stderr)
    with log.open("w") as out:
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        pip = [str(VENV / "bin" / "pip"), "install", "--disable-pip-version-check"]
        subprocess.run(
            [*pip, REQUIREMENT], check=True, stdout=out, stderr=out, timeout=INSTALL_TIMEOUT_S
        )
    return executable()


def version() -> str:
    python = VENV / "bin" / "python"
    probe = "import importlib.metadata as m; print(m.version('litellm'))"
    done = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, check=False)
    return done.stdout.strip() or "unknown"


def write_config(directory: Path, upstream_url: str) -> Path:
    path = directory / "litellm-config.yaml"
    path.write_text(
        "model_list:\n"
        f"  - model_name: {PUBLIC_MODEL}\n"
        "    litellm_params:\n"
        f"      model: openai/{UPSTREAM_MODEL}\n"
        f"      api_base: {upstream_url}\n"
        "      api_key: sk-bench-upstream\n"
        "litellm_settings:\n"
        "  telemetry: false\n"
        "  drop_params: true\n"
        "general_settings: {}\n"
    )
    return path


def command(config: Path, port: int) -> list[str]:
    return [
        str(executable()),
        "--config",
        str(config),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--num_workers",
        "1",
        "--telemetry",
        "False",
    ]


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "DATABASE_"))}
    return env | OFFLINE_ENV | {"LITELLM_MASTER_KEY": TENANT_KEY}
