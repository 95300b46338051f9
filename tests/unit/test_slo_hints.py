"""Per-request SLO hints (`x-slo-ttft-ms`, `x-slo-tpot-ms`): they tighten a class's targets,
never loosen them, and only for tenants allowed hints."""

from __future__ import annotations

import pytest

from gateway.config.settings import parse_config
from gateway.errors import InvalidRequest
from gateway.server.auth import KeyRing
from tests.fixtures.gateway import OTHER_TENANT_KEY, TENANT_KEY, config, endpoint


def keyring(hints: bool) -> KeyRing:
    data = config([endpoint("e", "http://127.0.0.1:9")])
    data["tenants"]["acme"]["slo_hints"] = hints
    return KeyRing(parse_config(data, "test"))


def test_hints_tighten_and_never_loosen_the_class() -> None:
    ring = keyring(hints=True)
    caller = ring.caller(f"Bearer {TENANT_KEY}")
    tighter = ring.slo(caller, None, "250", "20")
    assert (tighter.ttft_s, tighter.tpot_s) == (0.25, 0.02)
    looser = ring.slo(caller, None, "5000", "900")
    assert (looser.ttft_s, looser.tpot_s) == (1.0, 0.1)  # the class's own targets
    batch = ring.slo(caller, "batch", "800", None)
    assert batch.ttft_s == 0.8 and batch.deadline_s == 60.0  # a new target is a tighter one


def test_hints_are_ignored_for_tenants_not_allowed_them() -> None:
    ring = keyring(hints=False)
    target = ring.slo(ring.caller(f"Bearer {TENANT_KEY}"), None, "1", "1")
    assert (target.ttft_s, target.tpot_s) == (1.0, 0.1)


@pytest.mark.parametrize("value", ["fast", "0", "-5", "nan", "inf"])
def test_a_malformed_hint_is_a_400_that_names_the_header(value: str) -> None:
    ring = keyring(hints=True)
    with pytest.raises(InvalidRequest) as bad:
        ring.slo(ring.caller(f"Bearer {TENANT_KEY}"), None, value, None)
    assert bad.value.param == "x-slo-ttft-ms"


def test_the_anthropic_key_header_finds_the_tenant() -> None:
    ring = keyring(hints=False)
    assert ring.caller(None, OTHER_TENANT_KEY).tenant == "zeta"
    assert ring.caller(f"Bearer {TENANT_KEY}", "").tenant == "acme"
