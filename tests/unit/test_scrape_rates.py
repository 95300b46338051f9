"""LatestScrapes: each scrape's signals with their age, and counters turned into rates."""

from __future__ import annotations

import pytest

from gateway.watch.scraper import LatestScrapes, ScrapedState
from policies.base import EngineSignals


def counted(preemptions: float, queries: float = 0.0, hits: float = 0.0) -> ScrapedState:
    return ScrapedState(
        "vllm",
        waiting=1.0,
        preemptions_total=preemptions,
        prefix_cache_queries_total=queries,
        prefix_cache_hits_total=hits,
    )


def test_every_field_reaches_the_signals_in_its_place() -> None:
    scrapes = LatestScrapes(stale_after_s=2.0, rate_window_s=2.0)
    state = ScrapedState(
        "vllm", 3.0, 12.0, 0.5, 2.0, 8192, 7.0,
        waiting_deferred=1.0,
        prefix_cache_queries_total=1000.0,
        prefix_cache_hits_total=400.0,
        kv_block_size_tokens=128,
        prefix_caching=True,
    )  # fmt: skip
    scrapes.put("e", state, at_s=10.0)
    assert scrapes.signals("e", now=10.5) == EngineSignals(
        waiting=3.0,
        running=12.0,
        kv_usage=0.5,
        waiting_for_capacity=2.0,
        kv_capacity_tokens=8192,
        preemptions_total=7.0,
        age_s=0.5,
        waiting_deferred=1.0,
        prefix_cache_queries_total=1000.0,
        prefix_cache_hits_total=400.0,
        kv_block_size_tokens=128,
        prefix_caching=True,
    ), "no rate from a single scrape"


def test_counters_become_rates_between_scrapes() -> None:
    scrapes = LatestScrapes(stale_after_s=2.0, rate_window_s=2.0)
    scrapes.put("e", counted(10, queries=1000, hits=100), at_s=0.0)
    scrapes.put("e", counted(11, queries=1500, hits=400), at_s=0.25)
    signals = scrapes.signals("e", now=0.25)
    assert signals is not None
    assert signals.preemptions_per_s == pytest.approx(4.0)
    assert signals.prefix_cache_queries_per_s == pytest.approx(2000.0)
    assert signals.prefix_cache_hits_per_s == pytest.approx(1200.0)
    assert signals.rate_window_s == pytest.approx(0.25)
    assert signals.preemptions_total == 11.0


def test_rates_are_over_the_window_not_the_last_two_scrapes() -> None:
    scrapes = LatestScrapes(stale_after_s=2.0, rate_window_s=2.0)
    for step in range(13):  # every 0.25 s for 3 s; one preemption at 2.5 s
        scrapes.put("e", counted(0 if step < 10 else 1), at_s=step * 0.25)
    signals = scrapes.signals("e", now=3.0)
    assert signals is not None
    assert signals.rate_window_s == pytest.approx(2.0)
    assert signals.preemptions_per_s == pytest.approx(0.5)
    for step in range(13, 23):  # no preemption since: it leaves the window 2 s later
        scrapes.put("e", counted(1), at_s=step * 0.25)
    later = scrapes.signals("e", now=5.5)
    assert later is not None and later.preemptions_per_s == 0.0


@pytest.mark.parametrize(
    ("scrapes_at", "rate_after"),
    [
        ([(50, 0.0), (2, 0.25), (3, 0.5)], 4.0),  # the engine restarted at the second scrape
        ([(0, 0.0), (30, 10.0), (31, 10.5)], 2.0),  # scrapes failed for 10 s before it
    ],
)
def test_a_restart_or_a_gap_starts_the_window_afresh(
    scrapes_at: list[tuple[float, float]], rate_after: float
) -> None:
    scrapes = LatestScrapes(stale_after_s=2.0, rate_window_s=2.0)
    rates = []
    for preemptions, at_s in scrapes_at:
        scrapes.put("e", counted(preemptions), at_s=at_s)
        signals = scrapes.signals("e", now=at_s)
        assert signals is not None
        rates.append(signals.preemptions_per_s)
    assert rates[1] is None, "no rate across the restart or the gap"
    assert rates[2] == pytest.approx(rate_after)


def test_a_counter_the_engine_does_not_export_has_no_rate() -> None:
    scrapes = LatestScrapes(stale_after_s=2.0)
    scrapes.put("e", ScrapedState("tgi", waiting=1.0), at_s=0.0)
    scrapes.put("e", ScrapedState("tgi", waiting=2.0), at_s=0.25)
    signals = scrapes.signals("e", now=0.25)
    assert signals is not None and signals.rate_window_s == pytest.approx(0.25)
    assert (signals.preemptions_per_s, signals.prefix_cache_hits_per_s) == (None, None)


def test_stale_signals_are_all_unknown_rates_and_config_included() -> None:
    scrapes = LatestScrapes(stale_after_s=2.0)
    scrapes.put("e", counted(0), at_s=0.0)
    scrapes.put("e", counted(1), at_s=0.25)
    assert scrapes.signals("e", now=2.5) == EngineSignals(age_s=2.25)
    assert scrapes.signals("other", now=2.5) is None
