"""The one SLO judgement: did a request meet every target of its class?

Used by the live outcome (metrics, log line, dashboard), the offline report and the load-test
report, so that live and offline attainment agree for the same request.

A request that did not succeed missed. A missing TTFT (a non-streamed answer, whose first token
the client never saw on its own) is judged by the whole answer's time: the client waited that
long for its first byte, so that is the TTFT it experienced, and an answer that arrives within
the TTFT target certainly had its first token in time. A missing TPOT (fewer than two tokens, or
no stream) cannot be judged and is not held against the request; the deadline covers the whole
answer.
"""

from __future__ import annotations

from policies.base import SloTarget


def meets_slo(
    slo: SloTarget, *, ok: bool, ttft_s: float | None, tpot_s: float | None, e2e_s: float
) -> bool:
    if not ok:
        return False
    ttft = ttft_s if ttft_s is not None else e2e_s
    if slo.ttft_s is not None and ttft > slo.ttft_s:
        return False
    if slo.tpot_s is not None and tpot_s is not None and tpot_s > slo.tpot_s:
        return False
    return slo.deadline_s is None or e2e_s <= slo.deadline_s
