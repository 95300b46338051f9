"""StatsStore on Redis, shared by every gateway replica.

Each operation is one round trip: a single command where one is atomic (ZREM on release), a Lua
script from `lua/` where several commands must act together, and for `read()` one
non-transactional pipeline of plain reads whatever the number of endpoints (per endpoint: ZCOUNT
of the leases, HGETALL of the health hash, of each time bucket and of each fast-window bucket).
Keys come from `keys.KeySpace` and all carry a TTL.

Layout choices, measured on one server (Redis CPU per operation): the buckets are summed here,
not in a Lua script, since a merging script cost Redis about 6x the CPU of plain HGETALLs, and
Redis is the one resource every replica shares; and each bucket is its own small hash, since
one hash per endpoint ("<bucket>:<field>") made each observe about 2.5x dearer in Redis (a
listpack of a few hundred fields is scanned on every HINCRBYFLOAT) to save 20% of read time.

The client is redis-py asyncio (hiredis parses replies when installed); replies may be bytes or
str, the store accepts both. Redis errors propagate (redis.exceptions.RedisError): the caller
decides how to degrade.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any, Literal, NamedTuple

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError, RedisError

from gateway.state import keys, usage, window
from gateway.state.breaker import BreakerPolicy, BreakerState
from gateway.state.keys import KeySpace
from gateway.state.rate import slot_range, slot_ttl_s
from gateway.state.redis_calls import (
    NO_LIMIT,
    announce,
    fair_counters,
    hold_member,
    lease_args,
    limit_arg,
    settle_call,
    slot_of,
    stats_of,
    stored_number,
    text,
)
from gateway.state.store import (
    Alerted,
    EndpointStats,
    LatencySample,
    TenantAdmission,
    TenantCharge,
    TenantVerdict,
)
from gateway.state.usage import Settlement, UsageRow
from policies.fair_share import ACTIVE_S, FORGET_S, Counters
from policies.step_change import FAST_BUCKET_S, FAST_BUCKETS

SCRIPTS = (
    "lease_acquire",
    "owner_put",
    "observe",
    "rate_window",
    "breaker_record",
    "breaker_trial",
    "cool_down",
    "tenant_admit",
    "tenant_settle",
    "fair_charge",
)
_VERDICTS: tuple[TenantVerdict, ...] = ("admitted", "requests", "tokens", "concurrency", "budget")
# What a failed call to Redis raises: its own errors, a dropped connection, a timeout.
FAILURES = (RedisError, OSError, TimeoutError)


class Write(NamedTuple):
    """A write off the request path, batched by the write-behind (gateway/state/writebehind.py)."""

    kind: Literal["acquire", "release", "observe", "settle"]
    endpoint_id: str
    request_id: str = ""
    ttl_s: float = 0.0  # acquire
    now: float = 0.0  # acquire
    sample: LatencySample | None = None  # observe
    settlement: Settlement | None = None  # settle
    alerted: Alerted | None = None  # settle: told of the soft alerts its reply says it raised


def _script_source(name: str) -> str:
    return (resources.files("gateway.state") / "lua" / f"{name}.lua").read_text()


class RedisStatsStore:
    def __init__(
        self,
        client: Redis | RedisCluster,
        *,
        window_s: float = 60.0,
        bucket_s: float = 5.0,
        half_life_s: float | None = None,
        prefix: str = keys.PREFIX,
        owns_client: bool = False,
        usage_retention_s: float = keys.USAGE_RETENTION_S,
    ) -> None:
        """`half_life_s` defaults to window_s / 4; `owns_client`: close() closes the client."""
        self.client = client
        self.window_s = window_s
        self.bucket_s = bucket_s
        self.half_life_s = half_life_s or window_s / 4
        self.keys = KeySpace(prefix)
        self.usage_retention_s = usage_retention_s
        self._owns_client = owns_client
        self._bucket_count = math.ceil(window_s / bucket_s)
        # latency buckets no write reaches any more (see `read`): endpoint, bucket -> fields
        self._sealed: dict[tuple[str, int], dict[Any, Any]] = {}
        self._loading = asyncio.Lock()
        self._loaded = 0  # how many times the scripts were loaded
        self._scripts: dict[str, AsyncScript] = {
            name: client.register_script(_script_source(name)) for name in SCRIPTS
        }

    async def acquire(self, endpoint_id: str, request_id: str, *, ttl_s: float, now: float) -> int:
        _, count = await self._lease(self.keys.leases(endpoint_id), request_id, ttl_s, now)
        return count

    async def write_batch(self, writes: Sequence[Write]) -> list[Any]:
        """Lease takes and drops and observations, in order, in one pipeline: the write-behind's
        flush. The replies, in order; a write Redis refused gets its exception as its reply.
        Scripts go by EVALSHA alone (a cluster pipeline takes no script object, and a one-node
        one would check SCRIPT EXISTS before every batch): a server without them (just started,
        or a replica a failover promoted) refuses those writes, which never ran, so the scripts
        are loaded (on every master of a cluster) and those writes sent once more."""
        replies = await self._pipelined(writes)
        missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        if missing:
            await self._load_scripts(self._loaded)
            again = await self._pipelined([writes[i] for i in missing])
            for i, reply in zip(missing, again, strict=True):
                replies[i] = reply
        return replies

    async def _pipelined(self, writes: Sequence[Write]) -> list[Any]:
        async with self.client.pipeline(transaction=False) as pipe:
            for write in writes:
                key = self.keys.leases(write.endpoint_id)
                if write.kind == "release":
                    pipe.zrem(key, write.request_id)
                    continue
                if write.kind == "acquire":
                    name, keys_ = "lease_acquire", [key]
                    args = lease_args(write.request_id, write.ttl_s, write.now, NO_LIMIT)
                elif write.settlement is not None:
                    name = "tenant_settle"
                    keys_, args = settle_call(self.keys, self.usage_retention_s, write.settlement)
                elif write.sample is not None:
                    name = "observe"
                    keys_, args = self._observe_call(write.endpoint_id, write.sample)
                else:
                    continue
                sha = self._scripts[name].sha
                pipe.execute_command("EVALSHA", sha, len(keys_), *keys_, *args)
            return list(await pipe.execute(raise_on_error=False))

    async def release(self, endpoint_id: str, request_id: str, *, now: float) -> None:
        await self.client.zrem(self.keys.leases(endpoint_id), request_id)

    async def read(self, endpoint_ids: Sequence[str], *, now: float) -> Mapping[str, EndpointStats]:
        """Every endpoint's shared stats, in one pipeline. A latency bucket two or more behind
        the newest is sealed: a sample goes to the bucket of its own time, and its write lands
        well within a bucket (5 s) of it, so such a bucket is read once and kept (this
        replica's own later writes to one unseal it). The shared view reads every 0.1 s: this
        cuts its reads from 12 latency buckets per endpoint to 2 (of 16 commands to 6)."""
        newest = window.bucket_index(now, self.bucket_s)
        buckets = range(newest, newest - self._bucket_count, -1)
        fast_newest = window.bucket_index(now, FAST_BUCKET_S)
        fast = range(fast_newest, fast_newest - FAST_BUCKETS, -1)
        sealed = self._sealed
        # what was sealed when the pipeline was built: a read running meanwhile may seal more
        kept = {
            (eid, b): sealed[eid, b] for eid in endpoint_ids for b in buckets if (eid, b) in sealed
        }
        async with self.client.pipeline(transaction=False) as pipe:
            for eid in endpoint_ids:
                pipe.zcount(self.keys.leases(eid), f"({now!r}", "+inf")
                pipe.hgetall(self.keys.health(eid))
                for bucket in buckets:
                    if (eid, bucket) not in kept:
                        pipe.hgetall(self.keys.latency(eid, bucket))
                for bucket in fast:
                    pipe.hgetall(self.keys.fast(eid, bucket))
            replies = iter(await pipe.execute())
        weights = [window.weight((newest - b) * self.bucket_s, self.half_life_s) for b in buckets]
        found = {}
        for eid in endpoint_ids:
            parts = [next(replies), next(replies)]
            for bucket in buckets:
                fields = kept.get((eid, bucket))
                if fields is None:
                    fields = next(replies)
                    if bucket <= newest - 2:
                        sealed[eid, bucket] = fields
                parts.append(fields)
            parts += [next(replies) for _ in fast]
            found[eid] = stats_of(parts, weights)
        oldest = newest - self._bucket_count
        for key in [k for k in sealed if k[1] <= oldest]:
            del sealed[key]
        return found

    async def read_in_flight(self, endpoint_ids: Sequence[str], *, now: float) -> dict[str, int]:
        async with self.client.pipeline(transaction=False) as pipe:
            for eid in endpoint_ids:
                pipe.zcount(self.keys.leases(eid), f"({now!r}", "+inf")
            counts = await pipe.execute()
        return {eid: int(count) for eid, count in zip(endpoint_ids, counts, strict=True)}

    async def observe(self, endpoint_id: str, sample: LatencySample) -> None:
        keys_, args = self._observe_call(endpoint_id, sample)
        await self.evaluate("observe", keys=keys_, args=args)

    def _observe_call(
        self, endpoint_id: str, sample: LatencySample
    ) -> tuple[list[str], list[str | int | float]]:
        bucket = window.bucket_index(sample.at_s, self.bucket_s)
        self._sealed.pop((endpoint_id, bucket), None)  # a late write of ours: read it again
        fast_bucket = window.bucket_index(sample.at_s, FAST_BUCKET_S)
        increments = window.sample_fields(sample)
        args: list[str | int | float] = [
            keys.ttl_ms(self.window_s + self.bucket_s),
            keys.ttl_ms((FAST_BUCKETS + 1) * FAST_BUCKET_S),
            len(increments),
        ]
        for fields in (increments, window.fast_fields(increments)):
            for name, amount in fields.items():
                args += [name, amount]
        keys_ = [self.keys.latency(endpoint_id, bucket), self.keys.fast(endpoint_id, fast_bucket)]
        return keys_, args

    async def hit(self, key: str, *, cost: int, window_s: float, now: float) -> int:
        _, total = await self._rate(key, cost, NO_LIMIT, window_s, now)
        return total

    async def try_hit(
        self, key: str, *, cost: int, limit: int, window_s: float, now: float
    ) -> tuple[bool, int]:
        return await self._rate(key, cost, limit, window_s, now)

    async def admit_tenant(self, charge: TenantCharge) -> TenantAdmission:
        tenant, request_id, tokens, quota, ttl_s, now, budget, hold = charge
        current, oldest = slot_range(now, quota.window_s)
        parts = ("requests", "tokens", "concurrency")
        budget_keys = [
            self.keys.spend(tenant, "d", usage.day_index(now)),
            self.keys.spend(tenant, "m", usage.month_index(now)),
            self.keys.budget_holds(tenant),
            self.keys.budget_held(tenant),
        ]
        reply = await self.evaluate(
            "tenant_admit",
            keys=[*(self.keys.tenant(tenant, part) for part in parts), *budget_keys],
            args=[
                current,
                oldest,
                limit_arg(quota.requests),
                tokens,
                limit_arg(quota.tokens),
                keys.ttl_ms(slot_ttl_s(quota.window_s)),
                now,
                now + ttl_s,
                request_id,
                keys.ttl_ms(ttl_s + keys.TTL_MARGIN_S),
                limit_arg(quota.concurrent),
                limit_arg(budget.day_pusd if budget else None),
                limit_arg(budget.month_pusd if budget else None),
                hold,
                hold_member(request_id, hold),
            ],
        )
        verdict, requests, tokens, requests_first, tokens_first, day, month = reply
        return TenantAdmission(
            _VERDICTS[int(verdict)],
            current,
            int(requests),
            int(tokens),
            slot_of(requests_first),
            slot_of(tokens_first),
            int(day),
            int(month),
        )

    async def settle(self, settlement: Settlement, alerted: Alerted | None = None) -> None:
        keys_, args = settle_call(self.keys, self.usage_retention_s, settlement)
        reply = await self.evaluate("tenant_settle", keys=keys_, args=args)
        announce(reply, alerted)

    async def usage(
        self, tenants: Sequence[str], *, since_hour: int, until_hour: int
    ) -> list[UsageRow]:
        hours = range(since_hour, until_hour)
        async with self.client.pipeline(transaction=False) as pipe:
            for tenant in tenants:
                for hour in hours:
                    pipe.hgetall(self.keys.usage(tenant, hour))
            replies = iter(await pipe.execute())
        found: list[UsageRow] = []
        for tenant in tenants:
            for hour in hours:
                bucket = {text(k): int(v) for k, v in next(replies).items()}
                found += usage.rows(tenant, hour, bucket)
        return found

    async def release_tenant(self, tenant: str, request_id: str, *, now: float) -> None:
        await self.client.zrem(self.keys.tenant(tenant, "concurrency"), request_id)

    async def charge_fair_share(
        self, slo_class: str, charges: Mapping[str, float], *, now: float
    ) -> Counters:
        args: list[str | float | int] = [now, ACTIVE_S, FORGET_S, keys.ttl_ms(keys.FAIR_TTL_S)]
        for key, amount in charges.items():
            args += [key, amount]
        reply = await self.evaluate(
            "fair_charge",
            keys=[self.keys.fair(slo_class, "tokens"), self.keys.fair(slo_class, "seen")],
            args=args,
        )
        return fair_counters(reply)

    async def record_result(
        self, endpoint_id: str, *, ok: bool, now: float, policy: BreakerPolicy
    ) -> BreakerState:
        reply = await self.evaluate(
            "breaker_record",
            keys=[self.keys.health(endpoint_id)],
            args=[now, int(ok), policy.failure_threshold, policy.cooldown_s, self._health_ttl()],
        )
        fails, open_until, trial_until = (stored_number(v) for v in reply)
        return BreakerState(int(fails), open_until, trial_until)

    async def claim_trial(self, endpoint_id: str, *, now: float, policy: BreakerPolicy) -> bool:
        reply = await self.evaluate(
            "breaker_trial",
            keys=[self.keys.health(endpoint_id)],
            args=[now, policy.trial_timeout_s, self._health_ttl()],
        )
        return bool(reply)

    async def cool_down(self, endpoint_id: str, *, until_s: float, now: float) -> float:
        ttl_s = max(keys.HEALTH_TTL_S, until_s - now + keys.TTL_MARGIN_S)
        reply = await self.evaluate(
            "cool_down", keys=[self.keys.health(endpoint_id)], args=[until_s, keys.ttl_ms(ttl_s)]
        )
        return stored_number(reply)

    async def close(self) -> None:
        if self._owns_client:
            await self.client.aclose()

    async def evaluate(self, name: str, keys: list[str], args: list[Any]) -> Any:
        """One script of `SCRIPTS` (the owner store's too) by EVALSHA, the scripts loaded before
        the first (redis-py's own fallback, a Script object's, is not used: on a cluster, many
        callers loading at once broke connections, seen with redis-py 8.1), and again where a
        server lacks them (a replica a failover promoted)."""
        sha = self._scripts[name].sha
        if not self._loaded:
            await self._load_scripts(0)
        loads = self._loaded
        try:
            return await self.client.evalsha(sha, len(keys), *keys, *args)
        except NoScriptError:
            await self._load_scripts(loads)
            return await self.client.evalsha(sha, len(keys), *keys, *args)

    async def _load_scripts(self, seen: int) -> None:
        """Every script on every master, once for all callers that found them missing after
        load number `seen`."""
        async with self._loading:
            if self._loaded == seen:
                for script in self._scripts.values():
                    await self.client.script_load(script.script)
                self._loaded += 1

    async def _lease(
        self, key: str, request_id: str, ttl_s: float, now: float, limit: int = NO_LIMIT
    ) -> tuple[bool, int]:
        held, count = await self.evaluate(
            "lease_acquire", keys=[key], args=lease_args(request_id, ttl_s, now, limit)
        )
        return bool(held), int(count)

    async def _rate(
        self, key: str, cost: int, limit: int, window_s: float, now: float
    ) -> tuple[bool, int]:
        current, oldest = slot_range(now, window_s)
        added, total = await self.evaluate(
            "rate_window",
            keys=[self.keys.rate(key)],
            args=[current, oldest, cost, limit, keys.ttl_ms(slot_ttl_s(window_s))],
        )
        return bool(added), int(total)

    def _health_ttl(self) -> int:
        return keys.ttl_ms(keys.HEALTH_TTL_S)
