"""The one SLO judgement: did a request meet every target of its class?

Used by the live outcome (metrics, log line, dashboard), the offline report and the load-test
report, so that live and offline attainment agree for the same request; the router predicts the
same quantity (policies/slo_aware.py), so `slo_met` and met mean the same.

A request that did not succeed missed. A streamed one is judged by what its client saw: TTFT
against the TTFT target (a stream whose first token was never seen, by its whole time), TPOT
against the TPOT target (fewer than two tokens: none to judge), its whole time against the
deadline. A non-streamed one (chat, completions, Responses, Messages and embeddings alike)
shows its client nothing before the whole answer, so its whole time is held to the class's
answer budget (`SloTarget.answer_budget_s`): the TTFT target plus the TPOT target per output
token after the first, within the deadline.
"""

from __future__ import annotations

from policies.base import SloTarget


def meets_slo(
    slo: SloTarget,
    *,
    ok: bool,
    ttft_s: float | None,
    tpot_s: float | None,
    e2e_s: float,
    stream: bool,
    output_tokens: int,
) -> bool:
    return not missed_target(
        slo, ok=ok, ttft_s=ttft_s, tpot_s=tpot_s, e2e_s=e2e_s, stream=stream,
        output_tokens=output_tokens,
    )  # fmt: skip


def missed_target(
    slo: SloTarget,
    *,
    ok: bool,
    ttft_s: float | None,
    tpot_s: float | None,
    e2e_s: float,
    stream: bool,
    output_tokens: int,
) -> str:
    """The judgement above: "" when met, else what missed: `not_ok`, `ttft`, `tpot` or `e2e`
    (the deadline, or a whole answer's budget)."""
    if not ok:
        return "not_ok"
    if not stream:
        budget_s = slo.answer_budget_s(output_tokens)
        return "" if budget_s is None or e2e_s <= budget_s else "e2e"
    ttft = ttft_s if ttft_s is not None else e2e_s
    if slo.ttft_s is not None and ttft > slo.ttft_s:
        return "ttft"
    if slo.tpot_s is not None and tpot_s is not None and tpot_s > slo.tpot_s:
        return "tpot"
    return "" if slo.deadline_s is None or e2e_s <= slo.deadline_s else "e2e"
