"""The chart's workers and discovery values: GATEWAY_WORKERS, endpoint groups pointed at a vLLM
Deployment's headless Service (created by the chart from a pod selector, or named), and the
rendered config accepted by the gateway itself."""

from __future__ import annotations

import yaml

from gateway.config.settings import parse_config
from tests.deploy.conftest import NAMESPACE, RELEASE, Render, gateway_container, only
from tests.deploy.test_helm_values import SINGLE, env_of, helm_error

DISCOVERY = "ci/discovery-values.yaml"


def test_a_group_points_at_a_headless_service_of_the_vllm_pods(render: Render) -> None:
    manifests = render(DISCOVERY)
    config = yaml.safe_load(only(manifests, "ConfigMap")["data"]["config.yaml"])
    parsed = parse_config(config, "rendered ConfigMap")
    groups = {g.name: g for g in parsed.endpoint_groups}
    own = f"{RELEASE}-slo-gateway-vllm"
    assert groups["vllm"].dns == f"{own}.{NAMESPACE}.svc.cluster.local"
    assert groups["vllm"].port == 8000 and groups["vllm"].poll_interval_s == 2
    assert groups["big"].dns == "vllm-70b-headless.models.svc.cluster.local"
    assert parsed.endpoints == []
    services = {m["metadata"]["name"]: m for m in manifests if m["kind"] == "Service"}
    headless = services[own]["spec"]
    assert headless["clusterIP"] == "None"
    assert headless["selector"] == {"app": "vllm"}
    assert "vllm-70b-headless" not in services  # named, not created
    assert env_of(gateway_container(manifests))["GATEWAY_WORKERS"]["value"] == "2"


def test_static_endpoints_render_unchanged_without_discovery(render: Render) -> None:
    config = yaml.safe_load(only(render(), "ConfigMap")["data"]["config.yaml"])
    assert "endpoint_groups" not in config
    assert [e["id"] for e in config["endpoints"]] == ["vllm-0"]
    assert env_of(gateway_container(render()))["GATEWAY_WORKERS"]["value"] == "1"


def test_workers_without_redis_are_refused(helm: object) -> None:
    error = helm_error(helm, SINGLE, "workers=2")  # type: ignore[arg-type]
    assert "workers above 1 share state through Redis" in error
