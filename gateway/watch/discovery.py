"""Endpoint groups discovered by DNS: a headless Kubernetes Service, or any A/AAAA/SRV name.

Each group's name is resolved (dnspython, the group's nameservers or the system's) at most
every `poll_interval_s` and at the latest when the answer's TTL runs out (capped by
`max_poll_interval_s`); the members are the addresses found, one endpoint each, with an id
stable per address. A name that does not exist, or has no records of the type, means no
members (a Deployment scaled to zero); a resolver that fails or times out changes nothing, so
a DNS hiccup never empties a pool. What to do with the changes is the caller's (`on_change`,
gateway/server/membership.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

import dns.asyncresolver
import dns.exception
import dns.nameserver
import dns.resolver

from gateway.config.settings import EndpointConfig, EndpointGroupConfig
from gateway.telemetry.metrics import log

Address = tuple[str, int]
Changed = Callable[[EndpointGroupConfig, list[EndpointConfig], list[str]], Awaitable[None]]
DNS_TIMEOUT_S = 2.0
_MISSING = (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer)


@dataclass(frozen=True)
class Answer:
    addresses: frozenset[Address]
    ttl_s: float


def nameserver(text: str) -> dns.nameserver.Do53Nameserver:
    """`ip`, `ip:port` or `[ipv6]:port`."""
    if text.startswith("["):
        host, _, port = text[1:].partition("]:")
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    else:
        host, port = text, ""
    return dns.nameserver.Do53Nameserver(host, int(port or 53))


def resolver_for(group: EndpointGroupConfig) -> dns.asyncresolver.Resolver:
    resolver = dns.asyncresolver.Resolver(configure=not group.nameservers)
    if group.nameservers:
        resolver.nameservers = [nameserver(text) for text in group.nameservers]
    resolver.lifetime = DNS_TIMEOUT_S
    resolver.cache = None  # the TTL is honoured here, per group
    return resolver


async def _records(
    resolver: dns.asyncresolver.Resolver, name: str, kind: str
) -> tuple[list[str], float]:
    """Record texts of one type, and their TTL; none (and no wait) when the name has none."""
    try:
        answer = await resolver.resolve(name, kind, search=False)
    except _MISSING:
        return [], float("inf")
    ttl = float(answer.rrset.ttl) if answer.rrset is not None else float("inf")
    return [record.to_text() for record in answer], ttl


async def resolve(group: EndpointGroupConfig, resolver: dns.asyncresolver.Resolver) -> Answer:
    """The group's member addresses now. Raises dns.exception.DNSException when the resolver
    could not answer (as opposed to answering that there is nothing)."""
    if group.record == "SRV":
        return await _resolve_srv(group, resolver)
    kinds = ["A", "AAAA"] if group.record == "A+AAAA" else [group.record]
    assert group.port is not None  # validated: A/AAAA groups name the port
    found, ttls = set(), [float("inf")]
    for kind in kinds:
        texts, ttl = await _records(resolver, group.dns, kind)
        found |= {(text, group.port) for text in texts}
        ttls.append(ttl)
    return Answer(frozenset(found), min(ttls))


async def _resolve_srv(group: EndpointGroupConfig, resolver: dns.asyncresolver.Resolver) -> Answer:
    texts, ttl = await _records(resolver, group.dns, "SRV")
    found, ttls = set(), [ttl]
    for text in texts:  # priority weight port target
        _, _, port, target = text.split()
        for kind in ("A", "AAAA"):
            addresses, address_ttl = await _records(resolver, target, kind)
            found |= {(address, int(port)) for address in addresses}
            ttls.append(address_ttl)
    return Answer(frozenset(found), min(ttls))


def next_poll_s(group: EndpointGroupConfig, ttl_s: float) -> float:
    """Not before the poll interval, not after the TTL ends, never more than the cap."""
    return min(max(group.poll_interval_s, ttl_s), group.max_poll_interval_s)


class GroupWatch:
    """One group's members, kept in step with DNS; `on_change` gets every difference."""

    def __init__(
        self,
        group: EndpointGroupConfig,
        on_change: Changed,
        resolver: dns.asyncresolver.Resolver | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.group = group
        self.on_change = on_change
        self.resolver = resolver or resolver_for(group)
        self.members: dict[Address, EndpointConfig] = {}
        self._sleep = sleep
        self._failing = False

    async def poll_once(self) -> float:
        """Resolve and apply; the seconds until the next poll."""
        try:
            answer = await resolve(self.group, self.resolver)
        except dns.exception.DNSException as exc:
            if not self._failing:
                group = self.group
                log.warning(
                    "discovery of %s (%s) failed, members kept: %r", group.name, group.dns, exc
                )
            self._failing = True
            return self.group.poll_interval_s
        self._failing = False
        await self._apply(answer.addresses)
        return next_poll_s(self.group, answer.ttl_s)

    async def _apply(self, addresses: Iterable[Address]) -> None:
        current = set(addresses)
        added = []
        for address in sorted(current - self.members.keys()):
            self.members[address] = self.group.endpoint(*address)
            added.append(self.members[address])
        removed = [self.members.pop(a).id for a in sorted(self.members.keys() - current)]
        if added or removed:
            await self.on_change(self.group, added, removed)

    async def run(self) -> None:
        """Owned by the app lifespan."""
        while True:
            await self._sleep(await self.poll_once())
