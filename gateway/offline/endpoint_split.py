"""Where a run's requests and spend went, and how honest its predictions were, per endpoint.

split       per endpoint that answered: requests served and their cost (tokens at its
            prices, cached prompt tokens at its cached rate, as live billing)
coverage    per class, and per endpoint and class: of the served requests the policy made
            a prediction for, the share whose TTFT (TPOT, when it has more than one token)
            came within the p95 predicted for the endpoint that answered. A calibrated
            p95 covers about 95%; far less means the router trusted endpoints it should
            not have, far more that it bought capacity it did not need.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gateway.config.settings import Price
from gateway.core.accounting import cost_usd
from gateway.core.outcomes import covered
from gateway.offline.records import LoadRecord


@dataclass(frozen=True, slots=True)
class EndpointShare:
    requests: int = 0
    cost: float = 0.0


@dataclass(frozen=True, slots=True)
class Coverage:
    ttft_n: int = 0
    ttft_within: int = 0
    tpot_n: int = 0
    tpot_within: int = 0

    @property
    def ttft(self) -> float | None:
        return self.ttft_within / self.ttft_n if self.ttft_n else None

    @property
    def tpot(self) -> float | None:
        return self.tpot_within / self.tpot_n if self.tpot_n else None

    def plus(self, record: LoadRecord) -> Coverage:
        ttft = covered(record.ttft_s, record.predicted_ttft_p95_s)
        tpot = covered(record.tpot_s, record.predicted_tpot_p95_s)
        return Coverage(
            self.ttft_n + (ttft is not None),
            self.ttft_within + bool(ttft),
            self.tpot_n + (tpot is not None),
            self.tpot_within + bool(tpot),
        )


def record_cost(record: LoadRecord, prices: Mapping[str, Price]) -> float:
    price = prices.get(record.endpoint)
    if price is None:
        return 0.0
    return cost_usd(price, record.prompt_tokens, record.cached_tokens, record.output_tokens)


def split(records: Iterable[LoadRecord], prices: Mapping[str, Price]) -> dict[str, EndpointShare]:
    """Requests served and their cost, per endpoint that answered, in endpoint order."""
    shares: dict[str, EndpointShare] = {}
    for r in records:
        if r.outcome == "ok" and r.endpoint:
            held, cost = shares.get(r.endpoint, EndpointShare()), record_cost(r, prices)
            shares[r.endpoint] = EndpointShare(held.requests + 1, held.cost + cost)
    return dict(sorted(shares.items()))


def coverage(records: Iterable[LoadRecord]) -> dict[str, Coverage]:
    """Coverage per "class:<c>" and per "endpoint:<e>/class:<c>", over predicted outcomes."""
    found: dict[str, Coverage] = {}
    for r in records:
        if r.outcome != "ok" or r.predicted_ttft_p95_s is None:
            continue
        for key in (f"class:{r.slo_class}", f"endpoint:{r.endpoint}/class:{r.slo_class}"):
            found[key] = found.get(key, Coverage()).plus(r)
    return dict(sorted(found.items()))


def sum_coverage(parts: Iterable[Coverage]) -> Coverage:
    total = Coverage()
    for c in parts:
        total = Coverage(
            total.ttft_n + c.ttft_n,
            total.ttft_within + c.ttft_within,
            total.tpot_n + c.tpot_n,
            total.tpot_within + c.tpot_within,
        )
    return total
