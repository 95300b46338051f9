"""What the chart's values do to the rendered objects: Redis, secrets, rollouts, guards."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.deploy.conftest import (
    CHART,
    NAMESPACE,
    RELEASE,
    Manifest,
    Render,
    gateway_container,
    only,
    run_helm,
    template_args,
)

EXTERNAL = "ci/external-redis-values.yaml"
SINGLE = "ci/single-replica-values.yaml"
AUTH = "ci/bundled-redis-auth-values.yaml"


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in container.get("env", [])}


def kinds(manifests: list[Manifest]) -> list[str]:
    return sorted(m["kind"] for m in manifests)


def pod_annotations(manifests: list[Manifest]) -> dict[str, str]:
    annotations = only(manifests, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    return dict(annotations)


def helm_error(helm: Path, values_file: str | None, *sets: str) -> str:
    result = run_helm(helm, *template_args(values_file, "1.30.0", sets))
    assert result.returncode != 0, "helm template should have refused these values"
    return result.stderr


def test_default_values_run_two_replicas_on_the_bundled_redis(render: Render) -> None:
    manifests = render()
    assert only(manifests, "Deployment")["spec"]["replicas"] == 2
    assert only(manifests, "StatefulSet")["spec"]["replicas"] == 1
    url = env_of(gateway_container(manifests))["GATEWAY_REDIS_URL"]["value"]
    redis_services = [m["metadata"]["name"] for m in manifests if m["kind"] == "Service"]
    assert url == f"redis://{RELEASE}-slo-gateway-redis.{NAMESPACE}.svc:6379/0"
    assert f"{RELEASE}-slo-gateway-redis" in redis_services
    assert "PodDisruptionBudget" in kinds(manifests)


def test_external_redis_url_comes_from_the_named_secret(render: Render) -> None:
    manifests = render(EXTERNAL)
    ref = env_of(gateway_container(manifests))["GATEWAY_REDIS_URL"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "slo-gateway-redis", "key": "url"}
    assert "StatefulSet" not in kinds(manifests)


def test_autoscaling_owns_the_replica_count(render: Render) -> None:
    manifests = render(EXTERNAL)
    hpa = only(manifests, "HorizontalPodAutoscaler")
    assert "replicas" not in only(manifests, "Deployment")["spec"]
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 12)
    assert (
        hpa["spec"]["scaleTargetRef"]["name"] == only(manifests, "Deployment")["metadata"]["name"]
    )


def test_servicemonitor_scrapes_the_gateway_service_port(render: Render) -> None:
    manifests = render(EXTERNAL)
    monitor = only(manifests, "ServiceMonitor")
    service = next(m for m in manifests if m["kind"] == "Service")
    wanted = monitor["spec"]["selector"]["matchLabels"]
    assert wanted.items() <= service["metadata"]["labels"].items()
    port_names = {p["name"] for p in service["spec"]["ports"]}
    assert monitor["spec"]["endpoints"][0]["port"] in port_names
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_servicemonitor_sends_the_metrics_token_only_when_metrics_need_one(render: Render) -> None:
    monitor = only(render(EXTERNAL), "ServiceMonitor")["spec"]["endpoints"][0]
    assert monitor["authorization"] == {
        "type": "Bearer",
        "credentials": {"name": "slo-gateway-keys", "key": "GATEWAY_METRICS_TOKEN"},
    }
    chart_secret = render(
        None,
        "serviceMonitor.enabled=true",
        "config.server.metrics_token_env=METRICS_TOKEN",
        "secrets.values.METRICS_TOKEN=t0ken",
    )
    credentials = only(chart_secret, "ServiceMonitor")["spec"]["endpoints"][0]["authorization"]
    assert credentials["credentials"] == {
        "name": f"{RELEASE}-slo-gateway-env",
        "key": "METRICS_TOKEN",
    }
    open_metrics = only(render(None, "serviceMonitor.enabled=true"), "ServiceMonitor")
    assert "authorization" not in open_metrics["spec"]["endpoints"][0]


def test_refuses_a_metrics_token_prometheus_could_not_read(helm: Path) -> None:
    sets = ("serviceMonitor.enabled=true", "config.server.metrics_token_env=METRICS_TOKEN")
    assert "config.server.metrics_token_env is METRICS_TOKEN" in helm_error(helm, None, *sets)


def test_single_replica_runs_on_the_memory_store(render: Render) -> None:
    manifests = render(SINGLE)
    assert "GATEWAY_REDIS_URL" not in env_of(gateway_container(manifests))
    # One replica: a PodDisruptionBudget would only block node drains.
    assert kinds(manifests) == ["ConfigMap", "Deployment", "Secret", "Service", "ServiceAccount"]


def test_refuses_several_replicas_without_shared_state(helm: Path) -> None:
    error = helm_error(helm, None, "redis.bundled.enabled=false")
    assert "several gateway replicas need shared state" in error
    error = helm_error(helm, SINGLE, "autoscaling.enabled=true")
    assert "several gateway replicas need shared state" in error


def test_refuses_bundled_and_external_redis_together(helm: Path) -> None:
    error = helm_error(helm, None, "redis.external.url=redis://elsewhere:6379/0")
    assert "choose one Redis" in error


def test_values_schema_rejects_a_config_typo_at_install_time(helm: Path) -> None:
    error = helm_error(helm, None, "config.server.max_attemps=2")
    assert "max_attemps" in error
    error = helm_error(helm, None, "config.policy.name=fastest")
    assert "/config/policy" in error


def test_secret_values_stay_out_of_the_configmap(render: Render) -> None:
    values = yaml.safe_load((CHART / SINGLE).read_text())["secrets"]["values"]
    manifests = render(SINGLE)
    config_text = only(manifests, "ConfigMap")["data"]["config.yaml"]
    secret = only(manifests, "Secret")
    for name, value in values.items():
        assert value not in config_text
        assert secret["stringData"][name] == value
    env_from = gateway_container(manifests)["envFrom"]
    assert {"secretRef": {"name": secret["metadata"]["name"]}} in env_from


def test_every_key_variable_the_config_names_is_provided(render: Render) -> None:
    for values_file in (SINGLE, AUTH):
        manifests = render(values_file)
        config = yaml.safe_load(only(manifests, "ConfigMap")["data"]["config.yaml"])
        provided = set(only(manifests, "Secret")["stringData"])
        assert referenced_env(config) <= provided, values_file


def referenced_env(config: dict[str, Any]) -> set[str]:
    names = {e["api_key_env"] for e in config["endpoints"] if e.get("api_key_env")}
    names |= {t["api_key_env"] for t in config["tenants"].values() if t.get("api_key_env")}
    admin = config.get("server", {}).get("admin_key_env")
    return names | ({admin} if admin else set())


def test_existing_secret_is_mapped_to_env_vars(render: Render) -> None:
    container = gateway_container(render(EXTERNAL))
    assert container["envFrom"] == [{"secretRef": {"name": "slo-gateway-keys"}}]
    assert "OPENAI_API_KEY" in env_of(container)


def test_redis_password_is_defined_before_the_url_that_expands_it(render: Render) -> None:
    manifests = render(AUTH)
    names = [item["name"] for item in gateway_container(manifests)["env"]]
    url = env_of(gateway_container(manifests))["GATEWAY_REDIS_URL"]["value"]
    assert "$(REDIS_PASSWORD)@" in url
    assert names.index("REDIS_PASSWORD") < names.index("GATEWAY_REDIS_URL")
    redis = only(manifests, "StatefulSet")["spec"]
    assert "REDIS_PASSWORD" in env_of(redis["template"]["spec"]["containers"][0])
    assert redis["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "2Gi"


def test_config_change_rolls_the_pods(render: Render) -> None:
    before = pod_annotations(render())
    assert pod_annotations(render(None, "logLevel=info")) == before
    after = pod_annotations(render(None, "config.server.max_attempts=5"))
    assert after["checksum/config"] != before["checksum/config"]
    rotated = pod_annotations(render(None, "secrets.values.GATEWAY_TENANT_DEFAULT_KEY=sk-new"))
    assert rotated["checksum/secret"] != before["checksum/secret"]


def test_probes_and_security_context(render: Render) -> None:
    manifests = render(AUTH)
    container = gateway_container(manifests)
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    workloads = [m for m in manifests if m["kind"] in ("Deployment", "StatefulSet")]
    for workload in workloads:
        pod = workload["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        for c in pod["containers"]:
            assert c["securityContext"]["readOnlyRootFilesystem"] is True
            assert c["securityContext"]["allowPrivilegeEscalation"] is False
            assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]


def test_bundled_redis_admits_only_gateway_pods(render: Render) -> None:
    manifests = render()
    policy = only(manifests, "NetworkPolicy")["spec"]
    gateway_labels = only(manifests, "Deployment")["spec"]["template"]["metadata"]["labels"]
    redis_labels = only(manifests, "StatefulSet")["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= redis_labels.items()
    allowed = policy["ingress"][0]["from"][0]["podSelector"]["matchLabels"]
    assert allowed.items() <= gateway_labels.items()
    assert not allowed.items() <= redis_labels.items()


def install_notes(helm: Path, values_file: str | None) -> str:
    args = ["install", RELEASE, str(CHART), "--dry-run=client", "--namespace", NAMESPACE]
    if values_file:
        args += ["--values", str(CHART / values_file)]
    result = run_helm(helm, *args)
    assert result.returncode == 0, result.stderr
    return result.stdout.split("NOTES:", 1)[1]


def test_notes_name_the_key_variables_nothing_provides(helm: Path) -> None:
    notes = install_notes(helm, EXTERNAL)
    assert f"port-forward svc/{RELEASE}-slo-gateway 8080:80" in notes
    assert "GATEWAY_ADMIN_KEY, GATEWAY_METRICS_TOKEN, GATEWAY_TENANT_ACME_KEY" in notes
    assert "OPENAI_API_KEY" not in notes  # set through extraEnv
    assert "neither secrets.values" not in install_notes(helm, SINGLE)
