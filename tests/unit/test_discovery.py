"""DNS discovery against a scripted DNS server on loopback: A, AAAA and SRV answers, members
added and removed with stable ids, TTLs respected, a failing resolver changing nothing."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.config.settings import ConfigError, EndpointConfig, EndpointGroupConfig, parse_config
from gateway.watch.discovery import GroupWatch, next_poll_s
from tests.fixtures.dns_server import ScriptedDns
from tests.fixtures.gateway import ENGINE_MODEL, PUBLIC_MODEL, config

MEMBER = {"kind": "vllm", "models": {PUBLIC_MODEL: ENGINE_MODEL}}


def group(server: ScriptedDns | str, **fields: Any) -> EndpointGroupConfig:
    address = server.address if isinstance(server, ScriptedDns) else server
    data = {"name": "pool", "dns": "pool.test.", "port": 8000, "nameservers": [address]}
    return EndpointGroupConfig.model_validate(data | {"member": MEMBER} | fields)


class Changes:
    def __init__(self) -> None:
        self.seen: list[tuple[list[str], list[str]]] = []

    async def __call__(
        self, group: EndpointGroupConfig, added: list[EndpointConfig], removed: list[str]
    ) -> None:
        self.seen.append(([e.id for e in added], removed))


async def test_members_follow_the_a_records_with_ids_stable_per_address() -> None:
    with ScriptedDns() as dns:
        dns.set("pool.test.", "A", ["10.0.0.1", "10.0.0.2"], ttl=7)
        changes = Changes()
        watch = GroupWatch(group(dns), changes)
        assert await watch.poll_once() == 7
        assert changes.seen == [(["pool-10.0.0.1-8000", "pool-10.0.0.2-8000"], [])]
        member = watch.members[("10.0.0.1", 8000)]
        assert member.base_url == "http://10.0.0.1:8000/v1"
        assert member.apis == ["chat", "responses", "messages"]  # the kind's defaults
        dns.set("pool.test.", "A", ["10.0.0.2", "10.0.0.3"], ttl=7)
        await watch.poll_once()
        assert changes.seen[-1] == (["pool-10.0.0.3-8000"], ["pool-10.0.0.1-8000"])
        await watch.poll_once()
        assert len(changes.seen) == 2  # nothing changed, nothing reported
        dns.set("pool.test.", "A", [])
        await watch.poll_once()
        assert changes.seen[-1] == ([], ["pool-10.0.0.2-8000", "pool-10.0.0.3-8000"])


async def test_srv_records_give_each_member_its_own_port_and_aaaa_is_read() -> None:
    with ScriptedDns() as dns:
        dns.set("_http._tcp.pool.test.", "SRV", ["0 0 8001 a.test.", "0 0 8002 b.test."], ttl=3)
        dns.set("a.test.", "A", ["10.0.0.1"], ttl=9)
        dns.set("b.test.", "AAAA", ["fd00::2"], ttl=9)
        changes = Changes()
        srv = group(dns, dns="_http._tcp.pool.test.", record="SRV", port=None)
        watch = GroupWatch(srv, changes)
        assert await watch.poll_once() == 5.0  # the shortest TTL, 3 s, under the 5 s floor
        assert changes.seen == [(["pool-10.0.0.1-8001", "pool-fd00--2-8002"], [])]
        assert watch.members[("fd00::2", 8002)].base_url == "http://[fd00::2]:8002/v1"


async def test_a_name_that_does_not_exist_has_no_members() -> None:
    with ScriptedDns() as dns:
        dns.set("pool.test.", "A", ["10.0.0.1"])
        changes = Changes()
        watch = GroupWatch(group(dns), changes)
        await watch.poll_once()
        dns._records.clear()  # scaled to zero: the name is gone
        await watch.poll_once()
        assert changes.seen[-1] == ([], ["pool-10.0.0.1-8000"])


async def test_a_resolver_that_does_not_answer_keeps_the_members() -> None:
    with ScriptedDns() as dns:
        dns.set("pool.test.", "A", ["10.0.0.1"])
        changes = Changes()
        watch = GroupWatch(group(dns), changes)
        await watch.poll_once()
    watch.resolver.lifetime = 0.3  # the server is gone: every query times out
    assert await watch.poll_once() == watch.group.poll_interval_s
    assert list(watch.members) == [("10.0.0.1", 8000)]
    assert len(changes.seen) == 1


def test_polls_respect_the_ttl_within_the_interval_and_the_cap() -> None:
    pool = group("127.0.0.1:53", poll_interval_s=2, max_poll_interval_s=30)
    assert next_poll_s(pool, 0) == 2
    assert next_poll_s(pool, 10) == 10
    assert next_poll_s(pool, 3600) == 30


def test_group_config_errors_name_what_to_fix() -> None:
    with pytest.raises(ConfigError, match="set port"):
        parse_config(config([], endpoint_groups=[{"name": "g", "dns": "x", "member": MEMBER}]))
    bad = {"name": "g", "dns": "x", "port": 1, "member": MEMBER | {"base_url": "http://x"}}
    with pytest.raises(ConfigError, match="come from each discovered address"):
        parse_config(config([], endpoint_groups=[bad]))
    with pytest.raises(ConfigError, match="declare endpoints, endpoint_groups"):
        parse_config(config([]))
