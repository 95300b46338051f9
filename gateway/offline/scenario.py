"""A load-test scenario: fleet, SLO classes, tenants, traffic, faults and pass criteria.

One `Scenario` drives both the live load test (Locust against the simulated fleet behind the
real gateway, `loadtests/`) and the offline simulator (`gateway.offline.simulator`): both
replay the same planned requests (`plan()`), so their reports compare like for like.

A `Check` is one pass criterion: `metric op value`, optionally for one SLO class and/or one
tenant (metric names: `gateway.offline.report.Summary.metric`). A scenario passes when every
check holds.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, model_validator

from gateway.config.settings import SloClassConfig, TenantFairness, TenantLimits
from gateway.config.strict_model import StrictModel
from gateway.offline.trace import PlannedRequest
from gateway.offline.trace_replay import TraceSpec
from gateway.offline.workload import LengthSpec, RateShape
from gateway.sim.engine import EngineServerParams
from gateway.sim.fleet import EngineMember, FleetConfig, MemberPrice, ProviderMember
from gateway.sim.provider import ProviderParams
from policies.admission import AdmissionParams

KEY_ENV_PREFIX = "SLO_LOADTEST_KEY_"


class EngineSpec(StrictModel):
    id: str
    params: EngineServerParams = EngineServerParams()
    price: MemberPrice = MemberPrice()


class ProviderSpec(StrictModel):
    id: str
    params: ProviderParams = ProviderParams()
    price: MemberPrice = MemberPrice()


class ScenarioTenant(StrictModel):
    allowed_classes: list[str] = Field(min_length=1)
    limits: TenantLimits = TenantLimits()
    fairness: TenantFairness = TenantFairness()  # its weight in fair share, as in the config


class Traffic(StrictModel):
    """One stream of requests from one tenant in one SLO class."""

    tenant: str
    slo_class: str
    shape: RateShape
    cv: float = Field(default=1.0, gt=0, description="inter-arrival coefficient of variation")
    prompt: LengthSpec = LengthSpec()
    output: LengthSpec = LengthSpec()
    stream: bool = Field(default=True, description="offline: False sends whole answers")


class FaultEvent(StrictModel):
    """At `at_s`, merge `patch` into a fleet member's faults (`POST /sim/faults`)."""

    at_s: float = Field(ge=0)
    member: str
    patch: dict[str, Any]


class Check(StrictModel):
    metric: str
    op: Literal["<=", ">="]
    value: float
    slo_class: str | None = None
    tenant: str | None = None

    def describe(self) -> str:
        scope = "/".join(part for part in (self.slo_class, self.tenant) if part) or "all"
        return f"{self.metric}[{scope}] {self.op} {self.value:g}"

    def holds(self, observed: float | None) -> bool:
        if observed is None:
            return False
        return observed <= self.value if self.op == "<=" else observed >= self.value


class Scenario(StrictModel):
    name: str
    description: str
    duration_s: float = Field(gt=0, description="the last arrival comes before this")
    drain_s: float = Field(default=30.0, ge=0, description="time allowed to finish after it")
    seed: int = 1
    model: str = "llama-3-8b"
    engines: list[EngineSpec] = Field(default_factory=list)
    providers: list[ProviderSpec] = Field(default_factory=list)
    classes: dict[str, SloClassConfig]
    tenants: dict[str, ScenarioTenant]
    traffic: list[Traffic] = Field(default_factory=list)
    trace: TraceSpec | None = Field(default=None, description="replay a trace instead")
    faults: list[FaultEvent] = Field(default_factory=list)
    checks: list[Check] = Field(default_factory=list)
    admission: AdmissionParams = AdmissionParams()
    max_users: int = Field(default=128, ge=1, description="live: concurrent streams at most")
    window_s: float = Field(default=1.0, gt=0, description="report timeline resolution")
    recovery_from_s: float | None = Field(default=None, description="when recovery_s counts from")
    recovery_target: float = Field(default=0.9, ge=0, le=1, description="attainment, 0..1")

    @model_validator(mode="after")
    def _references(self) -> Scenario:
        members = {m.id for m in self.engines} | {m.id for m in self.providers}
        if not members:
            raise ValueError("a scenario needs at least one engine or provider")
        for traffic in self.traffic:
            allowed = self.tenants[traffic.tenant].allowed_classes
            if traffic.slo_class not in allowed or traffic.slo_class not in self.classes:
                raise ValueError(f"{traffic.tenant} may not send class {traffic.slo_class!r}")
        unknown = [f.member for f in self.faults if f.member not in members]
        if unknown:
            raise ValueError(f"faults name unknown members: {unknown}")
        return self

    def plan(self, seed: int | None = None) -> list[PlannedRequest]:
        """Every request of the run, by arrival time; the same seed gives the same plan.
        With a trace, its window's requests (TraceError when the trace cannot be read)."""
        if self.trace is not None:
            return self.trace.plan(self.model)
        base = self.seed if seed is None else seed
        planned: list[PlannedRequest] = []
        for index, traffic in enumerate(self.traffic):
            rng = random.Random(f"{base}:{index}")
            prompt, output = traffic.prompt.sampler("prompt"), traffic.output.sampler("output")
            for at_s in traffic.shape.arrivals(rng, traffic.cv):
                if at_s < self.duration_s:
                    planned.append(
                        PlannedRequest(
                            at_s,
                            prompt.draw(rng),
                            output.draw(rng),
                            traffic.tenant,
                            traffic.slo_class,
                            stream=traffic.stream,
                        )
                    )
        return sorted(planned, key=lambda r: r.arrival_s)

    def prices(self) -> dict[str, MemberPrice]:
        """Endpoint id -> its prices per 1M tokens."""
        members: list[EngineSpec | ProviderSpec] = [*self.engines, *self.providers]
        return {m.id: m.price for m in members}

    def fleet(self, ports: list[int]) -> FleetConfig:
        """The fleet to serve live, one port per member (engines first)."""
        engines = [
            EngineMember(id=e.id, port=port, params=e.params, price=e.price)
            for e, port in zip(self.engines, ports, strict=False)
        ]
        providers = [
            ProviderMember(
                id=p.id, port=port, params=p.params, price=p.price, api_key_env=_key_env(p.id)
            )
            for p, port in zip(self.providers, ports[len(self.engines) :], strict=False)
        ]
        return FleetConfig(public_model=self.model, engines=engines, providers=providers)

    def tenant_keys(self) -> dict[str, str]:
        """Tenant -> the API key the load test uses for it (never a real secret)."""
        return {tenant: f"sk-loadtest-{tenant}" for tenant in self.tenants}

    def gateway_config(
        self, endpoints: list[dict[str, Any]], policy: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The gateway's YAML config (as a dict) for this scenario: both drivers use it."""
        return {
            "endpoints": endpoints,
            "tenants": self._gateway_tenants(),
            "classes": {name: c.model_dump(exclude_none=True) for name, c in self.classes.items()},
            "policy": dict(policy),
            "admission": self.admission.model_dump(),
        }

    def _gateway_tenants(self) -> dict[str, Any]:
        return {
            name: {
                "api_key_env": tenant_key_env(name),
                "allowed_classes": spec.allowed_classes,
                "default_class": spec.allowed_classes[0],
                "limits": spec.limits.model_dump(exclude_none=True),
                "fairness": spec.fairness.model_dump(),
            }
            for name, spec in self.tenants.items()
        }


def tenant_key_env(tenant: str) -> str:
    return KEY_ENV_PREFIX + tenant.upper().replace("-", "_")


def _key_env(member_id: str) -> str:
    return "SLO_LOADTEST_PROVIDER_" + member_id.upper().replace("-", "_").replace(".", "_")
