"""SLO-aware routing: the cheapest endpoint predicted to meet the request's SLO.

Method
1. Predict TTFT and TPOT, mean and p95, for the request on every candidate (`policies.estimate`).
   The p95s are cautious: widened by the estimate's uncertainty u while an endpoint has few
   observations (u = 1 once warm). TPOT only when the class sets a TPOT or deadline target:
   nothing else reads it.
2. Headroom = min over the targets the class sets of (1 − predicted p95 / target):
       ttft_p95 vs ttft_s,   tpot_p95 vs tpot_s,   ttft_p95 + tpot_p95·N vs deadline_s
   (N = max_tokens or the estimate's default). A fraction of the SLO, so targets of different
   units compare; +inf when the class sets no target. A request that does not stream is
   judged by its whole answer (gateway/core/slo.py), so it is predicted by it alone:
       e2e:  ttft_p95 + tpot_p95·(N − 1)  vs  min(ttft_s + tpot_s·(N − 1), deadline_s)
   (`SloTarget.answer_budget_s`; an embedding has N = 0, so its TTFT p95 against ttft_s).
3. Each endpoint falls in one of three tiers, and the ranking takes them in this order:
   - meets: headroom ≥ 0. Those with headroom ≥ `spill_margin` first, then the tight ones:
     the margin spills the requests most at risk (long prompts on a filling replica) to an
     endpoint with room before a queue forms (in a burst the prediction trails the load by a
     refresh and a scrape, and a request predicted to meet its SLO by a hair is the one that
     misses it). Within each, cheapest for this request first (prompt and N tokens at the
     endpoint's prices, the prompt tokens predicted cached at its cached rate), self-hosted
     (kind vllm) before hosted at equal cost, then the most headroom in bands of `band`
     counted from the best meeting endpoint ((p95/target − the least p95/target) rounded
     down to a multiple of it: fixed multiples put two endpoints measured a hair apart
     either side of a boundary, and identical engines split 179/25), then the least uncached
     prompt (in tenths of it: a cache holder keeps its prefix within the band), then the least
     utilised (in-flight over max_concurrency, or in-flight alone), then the most headroom.
     Equal endpoints thus share load: the model's TTFT does not grow with in-flight requests
     below a batch's slots, so without bands the one whose fit is a little better takes
     nearly all (16/84 for two identical engines under 64 connections). A predicted hit is
     worth its seconds: across bands it counts only as b·C in the p95. With
     `session_affinity`, a request naming a session (`RouteRequest.session`) for which no
     endpoint holds anything yet (its first turn) takes, in place of the uncached tenths, its
     rendezvous rank (crc32 of session and endpoint): every replica places a new
     conversation on the same endpoint within the band, so their indexes agree; it never
     moves an endpoint across bands, so it never overrides load. Both preferences are bounded
     by load: an endpoint with more in flight than `bounded_load` times the candidates' mean
     utilisation (plus one request) is *crowded*, and ranks as if it held nothing of the
     prompt and were no session's home. Without the bound, one prompt sent over and over (a
     benchmark's) went almost wholly to whichever endpoint took it first, each replica to its
     own; with it, the next endpoint takes the prompt once the first is past the bound, holds
     it too, and identical endpoints share it. The bound does not override a band: a band
     apart is a p95 apart, and an endpoint measured slower (a slowed engine) must stay behind
     however little it holds.
   - unproven: misses at the cautious p95 but meets at the optimistic one (p95 / u²): a cold
     endpoint whose prior is too thin to judge. Least utilised first (in-flight leases over
     max_concurrency, or in-flight alone without one), then the cheapest. Without evidence
     the best bet is to spread load, as least_loaded does; concentrating it on one
     unmeasured endpoint (the cheapest by its prior) stakes every request on that prior.
   - misses: those within the load bound first (as above), then the most headroom first
     (the least negative: the best predicted). In overload every endpoint misses and the
     predictions trail the load (queue gauges lag, a warm fit does not count the prefill this
     replica sent ahead), so the best predicted took a burst of requests at once; bounded
     (measured on the commit that made it, 4 December 2026, seeds 1-3), the public Mooncake
     window (docs/loadtesting.md) went 52.5% -> 69.1% offline, and
     sessions_slow and sessions_rag_engines moved up a little (seeds 1-3: 94.6% -> 94.8%,
     87.2% -> 88.0% chat); ranking misses by utilisation alone did better on the window
     (79.7%) but lost prefix locality on sessions (87.2% -> 79.2%).
   Remaining ties break at random. All candidates are returned: the ranking is the failover
   order.
4. The ranking reports the first endpoint's predicted mean and p95 TTFT (`predicted_ttft_s`,
   `predicted_ttft_p95_s`), the target that binds it (the one with the largest p95/target
   ratio, with that p95 and target), `at_risk` when it is not predicted to meet the SLO at its
   cautious p95, and a reason: `slo_met`, `cold` (none is predicted to meet it at its cautious
   p95, and the first goes unproven: too little measured to judge), `slo_at_risk` (none is
   predicted to meet it even at its optimistic p95) or `explore`.
5. Exploration: with probability `explore_fraction`, a cold endpoint (fewer observations than
   the estimate's `min_samples`), drawn uniformly, goes first, so endpoints whose priors look
   slow still get measured. Randomness comes only from the injected rng.

Parameters: `explore_fraction` (0..1, default 0.02), `spill_margin` (0..1 of the SLO, default
0.15), `band` (0..1, default 0.2; 0: no bands, the most headroom first), `session_affinity`
(default true), `bounded_load` (≥ 1, default 1.25), `prefix_aware` (default true: predictions
count the request's predicted cached tokens; false ignores them, a baseline) and `estimate` (see
`policies.estimate`).
"""

from __future__ import annotations

import math
import random
import zlib
from collections.abc import Sequence
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from policies.base import NO_CACHED, EndpointSnapshot, Ranking, RouteRequest, SloTarget
from policies.estimate import EstimateParams, Estimator, Prediction


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: Literal["slo_aware"] = "slo_aware"
    explore_fraction: float = Field(default=0.02, ge=0, le=1)
    spill_margin: float = Field(default=0.15, ge=0, lt=1)
    prefix_aware: bool = True  # False: predictions ignore the prefix index (a baseline)
    band: float = Field(default=0.2, ge=0, le=1)
    session_affinity: bool = True  # a session's first turn by rendezvous hashing (see 3.)
    bounded_load: float = Field(default=1.25, ge=1)  # of the mean utilisation (see 3.)
    estimate: EstimateParams = EstimateParams()


def ratio(slo: SloTarget, prediction: Prediction, stream: bool = True) -> float:
    """The largest p95/target ratio over the targets the class sets (0 with none): ≤ 1 meets.
    Without a stream, the whole answer's p95 over its budget."""
    if not stream:
        budget_s = slo.answer_budget_s(prediction.output_tokens)
        return answer_p95_s(prediction) / budget_s if budget_s else 0.0
    worst = 0.0
    if slo.ttft_s is not None:
        worst = prediction.ttft_p95_s / slo.ttft_s
    if slo.tpot_s is not None:
        worst = max(worst, prediction.tpot_p95_s / slo.tpot_s)
    if slo.deadline_s is not None:
        worst = max(worst, prediction.e2e_p95_s / slo.deadline_s)
    return worst


def answer_p95_s(prediction: Prediction) -> float:
    """The p95 of a whole answer's time: its first token, then N − 1 more."""
    return prediction.ttft_p95_s + prediction.tpot_p95_s * max(0, prediction.output_tokens - 1)


def headroom(slo: SloTarget, prediction: Prediction, stream: bool = True) -> float:
    """Fraction of the tightest target left over at the p95; negative when it is missed."""
    if slo.ttft_s is None and slo.tpot_s is None and slo.deadline_s is None:
        return math.inf
    return 1.0 - ratio(slo, prediction, stream)


def binding(
    slo: SloTarget, prediction: Prediction, stream: bool = True
) -> tuple[str, float | None, float | None]:
    """The target with the largest p95/target ratio: (name, that p95, the target); without a
    stream, the whole answer (`e2e`) against its budget."""
    if not stream:
        budget_s = slo.answer_budget_s(prediction.output_tokens)
        return ("e2e", answer_p95_s(prediction), budget_s) if budget_s else ("", None, None)
    if not slo.tpot_s and not slo.deadline_s:  # a TTFT target alone (most classes): no ratios
        return ("ttft", prediction.ttft_p95_s, slo.ttft_s) if slo.ttft_s else ("", None, None)
    judged = (
        ("ttft", prediction.ttft_p95_s, slo.ttft_s),
        ("tpot", prediction.tpot_p95_s, slo.tpot_s),
        ("deadline", prediction.e2e_p95_s, slo.deadline_s),
    )
    ratios = [(p95 / target, name, p95, target) for name, p95, target in judged if target]
    if not ratios:
        return "", None, None
    _, name, p95, target = max(ratios)
    return name, p95, target


class SloAware:
    name: ClassVar[str] = "slo_aware"

    def __init__(self, params: Params) -> None:
        self.params = params
        self.estimator = Estimator(params.estimate)
        self._explore_fraction = params.explore_fraction  # a plain attribute reads faster
        self._comfort = 1.0 - params.spill_margin
        self._prefix_aware = params.prefix_aware
        self._band = params.band
        self._affinity = params.session_affinity
        self._bounded_load = params.bounded_load

    def rank(
        self, request: RouteRequest, candidates: Sequence[EndpointSnapshot], rng: random.Random
    ) -> Ranking:
        if not candidates:
            return Ranking(endpoints=())
        if request.cached_tokens and not self._prefix_aware:
            request = request._replace(cached_tokens=NO_CACHED)
        slo = request.slo
        predictions = self.estimator.predict_all(request, candidates)
        home = self._affinity and request.session is not None and not request.cached_tokens
        order, met, unproven = _ranked(
            request,
            candidates,
            predictions,
            rng,
            self._band,
            home,
            self._comfort,
            self._bounded_load,
        )
        reason = "slo_met" if met else "cold" if unproven else "slo_at_risk"
        if self._explores(predictions, order, rng):
            cold = [i for i in order if predictions[i].cold]
            pick = cold[rng.randrange(len(cold))]
            order = [pick, *(i for i in order if i != pick)]
            reason = "explore"
        first = predictions[order[0]]
        # positional: keyword arguments cost about half a µs more on this path
        return Ranking(
            tuple([candidates[i] for i in order]),
            first.ttft_mean_s,
            headroom(slo, first, request.stream) < 0,  # at_risk
            reason,
            first.ttft_p95_s,
            *binding(slo, first, request.stream),
            tuple([predictions[i] for i in order]),
        )

    def _explores(
        self, predictions: Sequence[Prediction], order: Sequence[int], rng: random.Random
    ) -> bool:
        if rng.random() >= self._explore_fraction:
            return False
        return any(predictions[i].cold for i in order[1:])


# Sort keys per tier, each ending in a random tie and the candidate's index (unique, so ties
# never compare further). Meets: tight, cost, hosted, p95/target band, uncached tenths,
# utilisation, p95/target; unproven: utilisation, cost; misses: crowded, p95/target, ttft p95.
MeetsKey = tuple[float, float, float, float, float, float, float, float, int]
OtherKey = tuple[float, float, float, int]
MissKey = tuple[float, float, float, float, int]


def _ranked(
    request: RouteRequest,
    candidates: Sequence[EndpointSnapshot],
    predictions: Sequence[Prediction],
    rng: random.Random,
    band_width: float,
    home: bool,
    comfort: float,
    bounded_load: float,
) -> tuple[list[int], int, int]:
    """The candidates' indices in ranking order (each tier's keys sorted, the tiers in turn),
    how many meet and how many are unproven."""
    tiers = _tiers(request, candidates, predictions, rng, band_width, home, comfort, bounded_load)
    for keys in tiers:
        keys.sort()
    return [key[-1] for keys in tiers for key in keys], len(tiers[0]), len(tiers[1])


def _tiers(
    request: RouteRequest,
    candidates: Sequence[EndpointSnapshot],
    predictions: Sequence[Prediction],
    rng: random.Random,
    band_width: float,
    home: bool,
    comfort: float,
    bounded_load: float,
) -> tuple[list[MeetsKey], list[OtherKey], list[MissKey]]:
    """Each candidate's sort key (see 3. above), in its tier's list."""
    slo, prompt_tokens, cached_of = request.slo, request.prompt_tokens, request.cached_tokens.get
    stream = request.stream
    tenth = 0.1 * prompt_tokens + 1.0  # the uncached prompt is ranked in tenths of it
    bound = bounded_load * sum(map(utilisation, candidates)) / len(candidates)
    meets: list[MeetsKey] = []
    unproven: list[OtherKey] = []
    misses: list[MissKey] = []
    ratios = [ratio(slo, prediction, stream) for prediction in predictions]
    best = min([worst for worst in ratios if worst <= 1.0], default=0.0)  # bands count from it
    for index, (snapshot, prediction) in enumerate(zip(candidates, predictions, strict=True)):
        worst = ratios[index]
        uncertainty = prediction.uncertainty
        crowded = snapshot.in_flight > bound * (snapshot.max_concurrency or 1) + 1
        if not worst <= uncertainty * uncertainty:  # not even at the optimistic p95 (u ≥ 1)
            misses.append((float(crowded), worst, prediction.ttft_p95_s, rng.random(), index))
            continue
        cached = cached_of(snapshot.endpoint_id, 0.0)
        cost = snapshot.cost(prompt_tokens, prediction.output_tokens, cached)
        if worst > 1.0:
            unproven.append((utilisation(snapshot), cost, rng.random(), index))
            continue
        hosted = 0.0 if snapshot.kind == "vllm" else 1.0
        # within a band of the SLO: the least uncached prompt (in tenths of it), then the least
        # utilised; equal endpoints share load, a cache holder keeps its prefix
        band = (worst - best) // band_width if band_width else worst
        # a session's first turn: its rendezvous rank, the same endpoint on every replica;
        # neither it nor a cached prefix holds an endpoint past the load bound
        if home:
            missed = 0.0 if crowded else rendezvous(request.session or "", snapshot.endpoint_id)
        else:
            missed = (prompt_tokens - (0.0 if crowded else cached)) // tenth
        tight = 1.0 if worst > comfort else 0.0
        meets.append(
            (
                tight,
                cost,
                hosted,
                band,
                missed,
                utilisation(snapshot),
                worst,
                rng.random(),
                index,
            )
        )
    return meets, unproven, misses


def rendezvous(session: str, endpoint_id: str) -> float:
    """The session's rendezvous rank of an endpoint (lowest first), the same on every replica."""
    return -float(zlib.crc32(f"{session}\x00{endpoint_id}".encode()))


def utilisation(snapshot: EndpointSnapshot) -> float:
    """In-flight leases over max_concurrency, or the in-flight count without a limit."""
    limit = snapshot.max_concurrency
    return snapshot.in_flight / limit if limit else float(snapshot.in_flight)
