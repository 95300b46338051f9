"""The chart lints strictly, and every manifest it renders is valid Kubernetes, offline.

Each value set is linted with `helm lint --strict` and rendered with `helm template` for the
oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the one the pinned helm targets.
Built-in kinds are validated by kubernetes-validate with strict=True (unknown fields fail).
ServiceMonitor is a Prometheus Operator CRD for which kubernetes-validate ships no schema: it is
validated against SERVICEMONITOR_SCHEMA below, written for the fields this chart renders (an
unknown field or a malformed duration fails). Any other kind without a schema fails the test.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from gateway.config.settings import parse_config
from tests.deploy.conftest import CHART, Manifest, Render, only, run_helm

VALUE_SETS = [
    None,
    "ci/external-redis-values.yaml",
    "ci/single-replica-values.yaml",
    "ci/bundled-redis-auth-values.yaml",
]
# The oldest version Chart.yaml allows, and the one helm v4.1.4 is built against.
KUBE_VERSIONS = ["1.29.0", "1.35.0"]

_DURATION = {"type": "string", "pattern": "^(0|([0-9]+(ms|s|m|h|d|w|y))+)$"}
_LABELS = {"type": "object", "additionalProperties": {"type": "string"}}
_SECRET_KEY = {
    "type": "object",
    "required": ["name", "key"],
    "additionalProperties": False,
    "properties": {"name": {"type": "string", "minLength": 1}, "key": {"type": "string"}},
}
_AUTHORIZATION = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"type": {"const": "Bearer"}, "credentials": _SECRET_KEY},
}
SERVICEMONITOR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": {
            "type": "object",
            "required": ["name"],
            "properties": {"name": {"type": "string"}, "labels": _LABELS},
        },
        "spec": {
            "type": "object",
            "required": ["selector", "endpoints"],
            "additionalProperties": False,
            "properties": {
                "selector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"matchLabels": _LABELS},
                },
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["port"],
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string"},
                            "interval": _DURATION,
                            "scrapeTimeout": _DURATION,
                            "authorization": _AUTHORIZATION,
                        },
                    },
                },
            },
        },
    },
}
CRD_SCHEMAS = {("monitoring.coreos.com/v1", "ServiceMonitor"): SERVICEMONITOR_SCHEMA}


def set_id(values_file: str | None) -> str:
    return Path(values_file).stem if values_file else "default"


def validate(manifest: Manifest, kube_version: str) -> None:
    crd_schema = CRD_SCHEMAS.get((manifest["apiVersion"], manifest["kind"]))
    if crd_schema is not None:
        jsonschema.Draft202012Validator(crd_schema).validate(manifest)
        return
    # Raises SchemaNotFoundError for a kind without a schema: that fails the test too.
    kubernetes_validate.validate(manifest, kube_version, strict=True)


@pytest.mark.parametrize("values_file", VALUE_SETS, ids=set_id)
def test_chart_lints_strictly(helm: Path, values_file: str | None) -> None:
    args = ["lint", "--strict", str(CHART)]
    if values_file:
        args += ["--values", str(CHART / values_file)]
    result = run_helm(helm, *args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("values_file", VALUE_SETS, ids=set_id)
def test_every_rendered_manifest_is_valid_kubernetes(
    render: Render, values_file: str | None, kube_version: str
) -> None:
    manifests = render(values_file, kube_version=kube_version)
    assert len(manifests) >= 4
    for manifest in manifests:
        try:
            validate(manifest, kube_version)
        except jsonschema.ValidationError as exc:
            pytest.fail(f"{manifest['kind']}/{manifest['metadata']['name']}: {exc.message}")


def test_crd_schema_rejects_unknown_servicemonitor_fields(render: Render) -> None:
    monitor = copy.deepcopy(only(render("ci/external-redis-values.yaml"), "ServiceMonitor"))
    validate(monitor, "1.30.0")
    monitor["spec"]["endpoints"][0]["scrapeInterval"] = "10s"
    with pytest.raises(jsonschema.ValidationError, match="scrapeInterval"):
        validate(monitor, "1.30.0")


def test_kubernetes_validate_is_strict_about_unknown_fields(render: Render) -> None:
    deployment = copy.deepcopy(only(render(), "Deployment"))
    deployment["spec"]["replica"] = 2
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(deployment, "1.30.0")


@pytest.mark.parametrize("values_file", VALUE_SETS, ids=set_id)
def test_rendered_config_loads_with_the_gateway_config_model(
    render: Render, values_file: str | None
) -> None:
    configmap = only(render(values_file), "ConfigMap")
    config = parse_config(yaml.safe_load(configmap["data"]["config.yaml"]), "rendered ConfigMap")
    assert config.endpoints and config.tenants and config.classes


def test_values_schema_carries_the_current_gateway_config_schema() -> None:
    script = CHART.parents[1] / "deploy" / "values_schema.py"
    result = subprocess.run(
        [sys.executable, str(script), "--check"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
