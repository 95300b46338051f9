"""Every Redis key the gateway uses, built in one place.

    <prefix>{ep:<endpoint>}:leases        zset  request id -> lease expiry (unix s)
    <prefix>{ep:<endpoint>}:lat:<bucket>  hash  latency sums of one time bucket (see window.py)
    <prefix>{ep:<endpoint>}:fast:<bucket> hash  the fast window's sums of one 1 s bucket
    <prefix>{ep:<endpoint>}:health        hash  breaker state and provider cooldown
    <prefix>{rate:<key>}                  hash  rate-window slot -> cost
    <prefix>{tenant:<tenant>}:<part>      hash/zset  a tenant's requests and tokens windows and
                                          concurrency leases, one slot so one script admits
    <prefix>{tenant:<tenant>}:spend:<d|m>:<n>  string  spend (pico-USD) of UTC day / month n
    <prefix>{tenant:<tenant>}:holds       zset  "<pico-USD>:<request id>" -> expiry: the
                                          predicted cost of requests in flight, held against
                                          the budget until they settle
    <prefix>{tenant:<tenant>}:held        string  the live holds' sum (pico-USD)
    <prefix>{tenant:<tenant>}:alert:<d|m>:<n>  string  that window's soft budget alert was raised
    <prefix>{tenant:<tenant>}:usage:<hour>     hash  usage of one UTC hour (gateway/state/usage.py)
    <prefix>{fair:<class>}:tokens         hash  fairness key -> weighted served tokens
    <prefix>{fair:<class>}:seen           hash  fairness key -> when last charged (unix s)
    <prefix>{tenant:<tenant>}:owners      hash  response id -> "<expiry ms>:<owner JSON>": the
                                          endpoint that stored each of the tenant's Responses
                                          API responses, until the endpoint's retention
    <prefix>{tenant:<tenant>}:owner_order zset  response id -> creation (unix ms): the oldest
                                          go first beyond the tenant's cap (owners.py)
    <prefix>{control}:keys                hash  API key id -> its record (JSON, the secret's
                                          SHA-256 only), made by the admin API
    <prefix>{control}:tenants             hash  tenant name -> its record (JSON)
    <prefix>{control}:version             string  bumped by every change of either hash

The prefix is versioned (`sg:v1:`): a change of layout bumps it, so old and new replicas never
read each other's keys. The `{...}` hash tag puts all of an endpoint's keys in one Redis Cluster
slot, so a Lua script may touch them together. Every key carries a TTL (constants below): state
that no replica refreshes disappears on its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

PREFIX = "sg:v1:"

# Breaker and cooldown state outlives any sensible cooldown; it is refreshed on every write.
HEALTH_TTL_S = 600.0
# Extra life beyond the last moment a key is needed (a lease set's newest lease, a cooldown),
# so a clock skew of a few seconds between replicas never deletes live state.
TTL_MARGIN_S = 5.0
# A spend key outlives its day or month by a day: a request settled just after midnight still
# finds the window it is counted in, whatever the skew.
SPEND_TTL_MARGIN_S = 86400.0
# Fairness counters outlive the idle spell after which a key is forgotten anyway
# (policies/fair_share.py FORGET_S).
FAIR_TTL_S = 600.0
# Control records are configuration, not state: their TTL is refreshed by every change and by
# every running replica (gateway/state/control.py), so only a deployment stopped this long
# loses them; the config file stays the durable source (docs/operations.md).
CONTROL_TTL_S = 400 * 86400.0
USAGE_RETENTION_S = 35 * 86400.0  # hourly usage buckets kept (config: state.usage_retention_days)


def ttl_ms(seconds: float) -> int:
    """A PEXPIRE argument: whole milliseconds, at least 1."""
    return max(1, math.ceil(seconds * 1000))


@dataclass(frozen=True, slots=True)
class KeySpace:
    prefix: str = PREFIX

    def leases(self, endpoint_id: str) -> str:
        return f"{self.prefix}{{ep:{endpoint_id}}}:leases"

    def latency(self, endpoint_id: str, bucket: int) -> str:
        return f"{self.prefix}{{ep:{endpoint_id}}}:lat:{bucket}"

    def fast(self, endpoint_id: str, bucket: int) -> str:
        return f"{self.prefix}{{ep:{endpoint_id}}}:fast:{bucket}"

    def health(self, endpoint_id: str) -> str:
        return f"{self.prefix}{{ep:{endpoint_id}}}:health"

    def rate(self, key: str) -> str:
        return f"{self.prefix}{{rate:{key}}}"

    def tenant(self, tenant: str, part: str) -> str:
        return f"{self.prefix}{{tenant:{tenant}}}:{part}"

    def spend(self, tenant: str, window: str, index: int) -> str:
        """`window`: "d" (UTC day) or "m" (UTC month)."""
        return self.tenant(tenant, f"spend:{window}:{index}")

    def budget_alert(self, tenant: str, window: str, index: int) -> str:
        return self.tenant(tenant, f"alert:{window}:{index}")

    def budget_holds(self, tenant: str) -> str:
        return self.tenant(tenant, "holds")

    def budget_held(self, tenant: str) -> str:
        return self.tenant(tenant, "held")

    def usage(self, tenant: str, hour: int) -> str:
        return self.tenant(tenant, f"usage:{hour}")

    def fair(self, slo_class: str, part: str) -> str:
        """`part`: "tokens" or "seen"; both in one slot, so one script updates them."""
        return f"{self.prefix}{{fair:{slo_class}}}:{part}"

    def response_owners(self, tenant: str) -> tuple[str, str]:
        """The tenant's owner map and the order its owners were created in."""
        return self.tenant(tenant, "owners"), self.tenant(tenant, "owner_order")

    def control(self, part: str) -> str:
        """`part`: "keys", "tenants" or "version"; one slot, so one script changes them."""
        return f"{self.prefix}{{control}}:{part}"
