"""Environment settings (GATEWAY_*) and the YAML config model, validated at startup.

The YAML file declares endpoints, tenants, SLO classes, the policy and server limits. Every
model forbids unknown keys, so a typo is an error that names the key instead of a silent default.
Secrets never live in the file: provider keys and tenant keys are env-var references (tenant keys
may also be stored as SHA-256 hashes).
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import AliasChoices, Field, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from gateway.config.strict_model import StrictModel
from policies.admission import AdmissionParams
from policies.base import SloTarget
from policies.registry import PolicyParams

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
# The client APIs: OpenAI chat/completions/embeddings, OpenAI Responses, Anthropic Messages.
Api = Literal["chat", "responses", "messages"]
# What an endpoint serves when its config does not say: vLLM serves all three (Responses since
# 0.10, Messages since 0.11.1); an OpenAI-compatible hosted API, chat and Responses.
DEFAULT_APIS: dict[str, list[Api]] = {
    "vllm": ["chat", "responses", "messages"],
    "openai": ["chat", "responses"],
}
RESPONSE_RETENTION_S = 30 * 86400.0  # OpenAI's and xAI's retention of stored responses
STORED_RESPONSES_PER_TENANT = 10_000  # owners of stored responses kept per tenant (owners.py)
ANTHROPIC_VERSION = "2023-06-01"  # sent upstream when the client sends none


class ConfigError(ValueError):
    """The config file is missing, unparsable or invalid; the message names the key."""


class Price(StrictModel):
    input_per_1m: float = Field(0.0, ge=0)
    output_per_1m: float = Field(0.0, ge=0)
    cached_input_per_1m: float | None = Field(
        None,
        ge=0,
        description="price of prompt tokens read from a prompt cache; input_per_1m if unset",
    )

    @property
    def cached_input_rate(self) -> float:
        """USD per 1M cached prompt tokens: hosted providers bill cache hits at a discount, and an
        endpoint that says nothing bills them as ordinary input."""
        return self.input_per_1m if self.cached_input_per_1m is None else self.cached_input_per_1m


class EndpointConfig(StrictModel):
    id: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    kind: Literal["vllm", "openai"]
    base_url: str = Field(description="OpenAI base URL, including /v1")
    models: dict[str, str] = Field(min_length=1, description="public model name -> upstream name")
    provider: str | None = Field(
        None,
        description="gen_ai.provider.name on spans (openai, anthropic, ...); default: from the "
        "base URL's host, else the kind",
    )
    # Filled by kind when absent (`_default_apis`); the default only keeps it optional in the
    # JSON schema (the Helm chart's values.schema.json).
    apis: list[Api] = Field(
        default_factory=lambda: list[Api](["chat"]),
        min_length=1,
        description="client APIs served; default by kind",
    )
    api_key_env: str | None = None
    # How the endpoint takes its key: `Authorization: Bearer` (OpenAI, vLLM) or Anthropic's
    # `x-api-key` (which also sends the default `anthropic-version` to probes).
    api_key_header: Literal["authorization", "x-api-key"] = "authorization"
    # Responses created with `store` stay on this endpoint this long (vLLM: until it restarts).
    stores_responses: bool = True
    response_ttl_s: float = Field(RESPONSE_RETENTION_S, gt=0)
    price: Price = Price()
    max_concurrency: int | None = Field(None, ge=1)
    max_model_len: int | None = Field(
        None,
        ge=1,
        description="context window (prompt + max_tokens) of its models; default: learnt from "
        "vLLM's /v1/models",
    )
    metrics_url: str | None = None
    health_path: str | None = None
    # A class's engine_priority is sent as `priority` only where the engine schedules by it:
    # vLLM refuses a non-zero priority unless started with --scheduling-policy priority.
    priority_scheduling: bool = False
    # A class's service_tier is sent where the endpoint takes it: true for any tier, or the list.
    service_tiers: bool | list[str] = False

    @model_validator(mode="before")
    @classmethod
    def _default_apis(cls, data: Any) -> Any:
        if isinstance(data, dict) and "apis" not in data:
            return data | {"apis": DEFAULT_APIS.get(data.get("kind", ""), ["chat"])}
        return data

    @model_validator(mode="after")
    def _url(self) -> EndpointConfig:
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError("base_url must start with http:// or https://")
        for url in (self.base_url, self.metrics_url or ""):
            if "@" in urlsplit(url).netloc:  # URLs reach error messages; secrets must not
                raise ValueError("URLs must not carry credentials: set api_key_env instead")
        return self

    @property
    def root_url(self) -> str:
        """The server root (base_url without a trailing /v1), where /metrics and /health live."""
        url = self.base_url.rstrip("/")
        return url[: -len("/v1")] if url.endswith("/v1") else url

    def api_key(self) -> str | None:
        return os.environ.get(self.api_key_env) if self.api_key_env else None

    def auth_headers(self) -> dict[str, str]:
        """The endpoint's own credential, in the header it takes (none without a key)."""
        key = self.api_key()
        if not key:
            return {}
        if self.api_key_header == "x-api-key":
            return {"x-api-key": key, "anthropic-version": ANTHROPIC_VERSION}
        return {"authorization": f"Bearer {key}"}


class EndpointGroupConfig(StrictModel):
    """Endpoints discovered by DNS (gateway/watch/discovery.py): every address the name resolves
    to is a member, `member` its shared fields (an endpoint's, less id and URLs)."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    dns: str = Field(min_length=1, description="e.g. a headless Service: vllm.ns.svc.cluster.local")
    record: Literal["A", "AAAA", "A+AAAA", "SRV"] = "A"
    port: int | None = Field(None, ge=1, le=65535, description="for A/AAAA (SRV names its own)")
    scheme: Literal["http", "https"] = "http"
    path: str = "/v1"
    nameservers: list[str] = Field(default_factory=list, description="ip or ip:port; else system")
    poll_interval_s: float = Field(5.0, gt=0, description="at most this often, and once a TTL ends")
    max_poll_interval_s: float = Field(30.0, gt=0, description="however long the TTL")
    member: dict[str, Any] = Field(description="kind, models, price, apis... shared by members")

    @model_validator(mode="after")
    def _member(self) -> EndpointGroupConfig:
        fixed = {"id", "base_url", "metrics_url"} & set(self.member)
        if fixed:
            raise ValueError(f"member: {sorted(fixed)} come from each discovered address")
        if self.record != "SRV" and self.port is None:
            raise ValueError(f"set port: {self.record} records carry no port")
        self.endpoint("127.0.0.1", self.port or 80)  # the shared fields' errors, at load time
        return self

    def endpoint(self, address: str, port: int) -> EndpointConfig:
        """The member at address:port; its id stable per address (`<group>-<ip>-<port>`)."""
        host = f"[{address}]" if ":" in address else address
        member_id = re.sub(r"[^A-Za-z0-9_.-]", "-", f"{self.name}-{address}-{port}")
        url = f"{self.scheme}://{host}:{port}{self.path}"
        return EndpointConfig.model_validate(self.member | {"id": member_id, "base_url": url})


class TenantLimits(StrictModel):
    requests_per_min: int | None = Field(None, ge=1)
    tokens_per_min: int | None = Field(None, ge=1)
    max_concurrent: int | None = Field(None, ge=1)


class TenantBudget(StrictModel):
    """Spend limits per UTC day and month, in USD at the endpoints' prices (docs/operations.md)."""

    usd_per_day: float | None = Field(None, gt=0)
    usd_per_month: float | None = Field(None, gt=0)
    soft_alert_fraction: float | None = Field(
        None, gt=0, le=1, description="log and count once per window when spend crosses this"
    )


class TenantFairness(StrictModel):
    """The tenant's share inside a class when it must queue (policies/fair_share.py)."""

    weight: float = Field(1.0, gt=0, description="served tokens count divided by this")
    # Whether a client may name a sub-tenant (`x-fairness-id`, or the Kubernetes inference
    # gateway's `x-gateway-inference-fairness-id`) that gets a share of its own.
    sub_ids: bool = False
    # How many sub-tenant ids one replica keeps apart for the tenant (each is a counter in the
    # shared store and a metric series until forgotten); a new id past it counts as the tenant.
    max_sub_ids: int = Field(100, ge=1)


class TenantSpec(StrictModel):
    """What a tenant may do, wherever it is declared: the config file (`TenantConfig`, with its
    keys) or the admin API (gateway/config/api_records.py, its keys issued apart)."""

    allowed_classes: list[str] = Field(min_length=1)
    default_class: str
    limits: TenantLimits = TenantLimits()
    budget: TenantBudget | None = None
    # Whether `x-slo-ttft-ms` / `x-slo-tpot-ms` may tighten (never loosen) the class's targets.
    slo_hints: bool = False
    # The class's engine_priority / service_tier replace the client's own `priority` /
    # `service_tier` (and a client's is dropped where the class sets none); by default a value
    # the client set is kept.
    enforce_class_priority: bool = False
    fairness: TenantFairness = TenantFairness()

    @model_validator(mode="after")
    def _default_class(self) -> TenantSpec:
        if self.default_class not in self.allowed_classes:
            raise ValueError(f"default_class {self.default_class!r} is not in allowed_classes")
        return self


class TenantConfig(TenantSpec):
    api_key_env: str | None = None
    api_key_sha256: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _keys(self) -> TenantConfig:
        if not self.api_key_env and not self.api_key_sha256:
            raise ValueError("set api_key_env or api_key_sha256")
        for digest in self.api_key_sha256:
            if not _SHA256.match(digest):
                raise ValueError("api_key_sha256 entries must be 64 lowercase hex characters")
        return self

    def key_hashes(self) -> list[str]:
        hashes = list(self.api_key_sha256)
        value = os.environ.get(self.api_key_env) if self.api_key_env else None
        if value:
            hashes.append(hash_key(value))
        return hashes


class SloClassConfig(StrictModel):
    ttft_ms: float | None = Field(None, gt=0)
    tpot_ms: float | None = Field(None, gt=0)
    deadline_ms: float | None = Field(None, gt=0)
    priority: int = 0
    sheddable: bool = False
    engine_priority: int | None = Field(None, description="vLLM's `priority`: lower runs first")
    service_tier: str | None = Field(None, min_length=1, description="OpenAI's `service_tier`")
    default_output_tokens: int | None = Field(
        None,
        ge=1,
        description="output expected without max_tokens: reserved against tokens_per_min and "
        "priced against budgets (default: admission.default_output_tokens)",
    )
    when_unmeetable: Literal["best_effort", "reject"] = Field(
        "best_effort",
        description="a request that no endpoint can serve within the targets even idle (by "
        "its own size): served best effort and flagged, or refused at once",
    )

    def target(self, name: str) -> SloTarget:
        def seconds(ms: float | None) -> float | None:
            return ms / 1000 if ms is not None else None

        return SloTarget(
            name=name,
            ttft_s=seconds(self.ttft_ms),
            tpot_s=seconds(self.tpot_ms),
            deadline_s=seconds(self.deadline_ms),
            priority=self.priority,
            sheddable=self.sheddable,
            default_output_tokens=self.default_output_tokens,
            when_unmeetable=self.when_unmeetable,
        )


class ServerConfig(StrictModel):
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    connect_timeout_s: float = Field(2.0, gt=0)
    first_byte_timeout_s: float = Field(30.0, gt=0)
    idle_stream_timeout_s: float = Field(60.0, gt=0)
    max_attempts: int = Field(3, ge=1, le=10)
    max_retry_after_s: float = Field(5.0, ge=0)
    lease_ttl_s: float = Field(300.0, gt=0)
    admin_key_env: str | None = None
    # On SIGTERM: stop accepting, let in-flight requests finish this long, then cut them;
    # keep it under the orchestrator's grace period (Kubernetes: minus the preStop sleep).
    drain_timeout_s: int = Field(90, ge=1)
    max_header_bytes: int = Field(32 * 1024, ge=1024, description="request line + headers")
    # The `model` clients see in answers: the public name they asked for, or the upstream's.
    response_model: Literal["public", "upstream"] = "public"
    # Slow clients (gateway/server/http_protocol.py): a request line and headers must arrive
    # within header_timeout_s (of the connection opening, or of their first byte on a reused
    # one), and a body within body_timeout_s of its headers; else 408 and the connection closes.
    header_timeout_s: float = Field(10.0, gt=0)
    body_timeout_s: float = Field(60.0, gt=0)
    # GET /metrics then needs `Authorization: Bearer <the value of this env var>`.
    metrics_token_env: str | None = None


class StateConfig(StrictModel):
    """Shared state, engine scraping and health: how fresh each signal is kept."""

    window_s: float = Field(60.0, gt=0, description="rolling estimate window")
    bucket_s: float = Field(5.0, gt=0)
    refresh_s: float = Field(0.1, gt=0, description="local copy of shared stats refreshed every")
    redis_timeout_s: float = Field(0.25, gt=0, description="a slower Redis counts as down")
    scrape_interval_s: float = Field(0.25, gt=0)
    scrape_stale_after_s: float = Field(2.0, gt=0)
    rate_window_s: float = Field(2.0, gt=0, description="engine counters' rates over the last")
    health_interval_s: float = Field(5.0, gt=0)
    breaker_failures: int = Field(5, ge=1, description="consecutive failures that open it")
    breaker_cooldown_s: float = Field(10.0, gt=0)
    usage_retention_days: float = Field(35.0, gt=0, description="hourly usage buckets kept")
    stored_responses_per_tenant: int = Field(
        STORED_RESPONSES_PER_TENANT,
        ge=1,
        description="owners of stored responses kept per tenant; the oldest go first",
    )


class GatewayConfig(StrictModel):
    endpoints: list[EndpointConfig] = Field(default_factory=list)
    endpoint_groups: list[EndpointGroupConfig] = Field(default_factory=list)
    tenants: dict[str, TenantConfig] = Field(min_length=1)
    classes: dict[str, SloClassConfig] = Field(min_length=1)
    policy: PolicyParams = Field(default_factory=lambda: _default_policy())
    server: ServerConfig = ServerConfig()
    state: StateConfig = StateConfig()
    admission: AdmissionParams = AdmissionParams()
    # public model -> the models to serve it with, in order, when none of its endpoints is in
    # rotation or admits the request (LiteLLM's `fallbacks`), and when the request does not fit
    # its context window (LiteLLM's `context_window_fallbacks`)
    fallbacks: dict[str, list[str]] = Field(default_factory=dict)
    context_fallbacks: dict[str, list[str]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _references(self) -> GatewayConfig:
        if not self.endpoints and not self.endpoint_groups:
            raise ValueError("declare endpoints, endpoint_groups (discovered by DNS), or both")
        ids = [e.id for e in self.endpoints] + [g.name for g in self.endpoint_groups]
        dupes = {i for i in ids if ids.count(i) > 1}
        if dupes:
            raise ValueError(f"duplicate endpoint ids or group names: {sorted(dupes)}")
        for name, tenant in self.tenants.items():
            unknown = [c for c in tenant.allowed_classes if c not in self.classes]
            if unknown:
                raise ValueError(f"tenants.{name}.allowed_classes: unknown classes {unknown}")
        served = {m for e in self.endpoints for m in e.models} | {
            m for g in self.endpoint_groups for m in g.member.get("models", {})
        }
        for section, chains in (
            ("fallbacks", self.fallbacks),
            ("context_fallbacks", self.context_fallbacks),
        ):
            for model, chain in chains.items():
                unknown = [m for m in [model, *chain] if m not in served]
                if unknown or model in chain:
                    raise ValueError(f"{section}.{model}: not served models or a loop: {unknown}")
        return self


def _default_policy() -> Any:
    from policies.least_loaded import Params

    return Params()


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def format_validation_error(error: ValidationError, source: str) -> str:
    lines = [f"{source}: invalid config"]
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or "(top level)"
        lines.append(f"  {where}: {item['msg']}")
    return "\n".join(lines)


def parse_config(data: Any, source: str = "config") -> GatewayConfig:
    try:
        return GatewayConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source)) from None


def load_config(path: str | Path) -> GatewayConfig:
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    return parse_config(data, str(path))


class Settings(BaseSettings):
    """Process settings from the environment (prefix GATEWAY_)."""

    model_config = SettingsConfigDict(env_prefix="GATEWAY_", extra="ignore")

    config: Path | None = None
    host: str = "127.0.0.1"
    port: int = 8080
    redis_url: str | None = Field(
        None, validation_alias=AliasChoices("GATEWAY_REDIS_URL", "REDIS_URL")
    )
    redis_prefix: str | None = None  # namespaces keys when deployments share one Redis
    log_level: str = "info"
    # one JSON line per API request on stdout (gateway/telemetry/request_log.py)
    request_log: bool = True
    log_prompts: bool = False  # debug only: adds prompt text to those lines
    dashboard_sample_s: float = Field(2.0, gt=0)  # the dashboard's history ring samples every
    workers: int = Field(1, ge=1)  # `serve` processes sharing the port (gateway/server/workers.py)
