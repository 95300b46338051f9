"""Fixtures for the deployment artifacts: the helm binary and rendered chart manifests.

helm is not a Python package: .ci/install-helm.sh installs a pinned build into .venv/bin.
Without it the chart tests are skipped with a message saying so; they never pass silently.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "slo-gateway"
RELEASE = "gw"
NAMESPACE = "llm"
HELM_TIMEOUT_S = 60

Manifest = dict[str, Any]
Render = Callable[..., list[Manifest]]


def find_helm() -> Path | None:
    candidates = [os.environ.get("HELM_BIN"), REPO / ".venv/bin/helm"]
    candidates += [Path(sys.executable).parent / "helm", shutil.which("helm")]
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return Path(candidate)
    return None


@pytest.fixture(scope="session")
def helm() -> Path:
    binary = find_helm()
    if binary is None:
        pytest.skip("helm binary not installed: run .ci/install-helm.sh (or set HELM_BIN)")
    return binary


def run_helm(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(helm), *args], capture_output=True, text=True, timeout=HELM_TIMEOUT_S, check=False
    )


def template_args(values_file: str | None, kube_version: str, sets: tuple[str, ...]) -> list[str]:
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    args += ["--kube-version", kube_version]
    if values_file:
        args += ["--values", str(CHART / values_file)]
    for item in sets:
        args += ["--set", item]
    return args


@pytest.fixture(scope="session")
def render(helm: Path) -> Render:
    """render(values_file, *--set items, kube_version=...) -> manifests; fails on a helm error."""
    cache: dict[tuple[Any, ...], list[Manifest]] = {}

    def _render(
        values_file: str | None = None, *sets: str, kube_version: str = "1.30.0"
    ) -> list[Manifest]:
        key = (values_file, sets, kube_version)
        if key not in cache:
            result = run_helm(helm, *template_args(values_file, kube_version, sets))
            assert result.returncode == 0, f"helm template failed:\n{result.stderr}"
            cache[key] = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
        return cache[key]

    return _render


def only(manifests: list[Manifest], kind: str) -> Manifest:
    found = [m for m in manifests if m["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def gateway_container(manifests: list[Manifest]) -> dict[str, Any]:
    deployment = only(manifests, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(container)
