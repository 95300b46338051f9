"""Rolling latency statistics in time buckets: what both stores write and how reads merge them.

Method
    Time is cut into buckets of `bucket_s` (default 5 s); an endpoint's window is the last
    `ceil(window_s / bucket_s)` buckets, the newest one still filling. Each finished request adds
    plain sums to its bucket (`sample_fields`), so replicas merge by addition (Redis
    HINCRBYFLOAT) and a bucket older than the window is simply not read (its key expires).

    Reads weight bucket b by `w_b = 0.5 ** (age_b / half_life_s)`, age_b = whole buckets between
    b and the newest bucket times bucket_s. With the defaults (60 s window, 15 s half-life) the
    newest 5 s carry about a fifth of the weight under steady traffic, so a 3x slow-down moves
    the mean by about 40% and the p95 fully within one bucket, while a lull still shows the
    older samples. Counts reported as such (`samples`, `errors`, `throttled`) are unweighted.

    TTFT is fitted as `ttft = base + per_token * prompt_tokens` by weighted least squares from
    the sums n, x, y, xx, xy (x = prompt tokens, y = TTFT s); TPOT likewise against the
    gateway-wide in-flight count at the request's start (c, cc, cy). The fit is guarded:
    - fewer than MIN_FIT_SAMPLES (weighted) or x nearly constant (std below max(min_spread,
      10% of the mean)): base = mean, slope = 0;
    - a slope <= 0 (noise, or cache hits on long prompts): base = mean, slope = 0;
    - a negative intercept: the line through the origin, slope = xy / xx.

    Quantiles come from fixed log-spaced histograms (bounds lo * 2**(i/4), i.e. 19% apart, so
    an interpolated quantile is off by a few percent at most); counts merge across replicas.

    Calibration: an attempt routed on a prediction (`LatencySample.ttft_predicted_s`,
    `tpot_predicted_s`: the policy's predicted means) adds measured / predicted to a ratio
    histogram, TTFT's where its TTFT is seen, TPOT's with its whole TPOT. Their decayed p95s
    (`ttft_ratio_p95`, `tpot_ratio_p95`) and plain counts are what the estimate's p95 is built
    from (policies/estimate.py): the deviation of outcomes from the model, as measured, merged
    across replicas exactly like every other count.

Only successful requests (ok) feed TTFT, TPOT and E2E; `errors` counts every failed request
and `throttled` those answered 429. A whole answer (a request that did not stream) is a `whole`
sample whose TTFT and TPOT are its end-to-end time split as its prediction was
(policies/estimate.py, Whole answers), so it feeds the same sums, histograms and fast window.

A streamed request is observed in parts (`LatencySample.kind`, gateway/core/progress.py): its
first token adds n and the TTFT sums; each stretch of a running stream adds its TPOT to the
TPOT sums (mean and fit) weighted by its tokens / STRETCH_TOKENS, so the mean is per token as a
request's own TPOT is (a slow stretch does not weigh more for taking longer); its end adds E2E
(or the error) and its whole TPOT to the TPOT histogram only: quantiles stay per request, as
the SLO judges them, while the level moves with the stretches. A request counts once in n,
its TTFT once, and each of its tokens once in the TPOT sums.

The fast window (policies/step_change.py) sums `FAST_FIELDS` of the same samples in buckets of
`FAST_BUCKET_S`, unweighted; `estimate` hands it on (`LatencyEstimate.fast`), and the shared
view (view.py) applies a step it shows.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from gateway.state.store import LatencySample
from policies.base import FastWindow, LatencyEstimate

HISTOGRAM_RATIO = 2.0**0.25
MIN_FIT_SAMPLES = 3.0
MIN_PROMPT_SPREAD_TOKENS = 8.0
MIN_IN_FLIGHT_SPREAD = 1.0

_Name = TypeVar("_Name", str, bytes)
FAST_FIELDS = ("tn", "ty", "pn", "py", "tx", "pc")
STRETCH_TOKENS = 16.0  # a stretch of this many tokens weighs as one whole request's TPOT


@dataclass(frozen=True, slots=True)
class LogBuckets:
    """Log-spaced bounds `lo * ratio**i`, i < size; index `size` is the overflow bucket."""

    field: str
    lo_s: float
    size: int

    def index(self, value_s: float) -> int:
        if value_s <= self.lo_s:
            return 0
        return min(self.size, math.ceil(math.log(value_s / self.lo_s, HISTOGRAM_RATIO) - 1e-9))

    def upper_s(self, index: int) -> float:
        return self.lo_s * math.pow(HISTOGRAM_RATIO, min(index, self.size - 1))

    def quantiles(self, counts: Mapping[int, float], qs: Sequence[float]) -> list[float | None]:
        total = sum(counts.values())
        if total <= 0:
            return [None for _ in qs]
        ordered = sorted(counts.items())
        return [self._at_rank(ordered, q * total) for q in qs]

    def _at_rank(self, ordered: Sequence[tuple[int, float]], rank: float) -> float:
        seen = 0.0
        for index, count in ordered:
            if count > 0 and seen + count >= rank:
                return self._interpolate(index, (rank - seen) / count)
            seen += count
        return self.upper_s(ordered[-1][0])

    def _interpolate(self, index: int, fraction: float) -> float:
        if index >= self.size:
            return self.upper_s(index)
        upper = self.upper_s(index)
        return upper * math.pow(HISTOGRAM_RATIO, fraction - 1.0)  # geometric within the bucket


TTFT_HISTOGRAM = LogBuckets("ht", lo_s=0.001, size=72)  # 1 ms .. ~250 s
TPOT_HISTOGRAM = LogBuckets("hp", lo_s=0.00025, size=64)  # 0.25 ms .. ~16 s
# measured / predicted, 1/16 .. 64 (unitless: `lo_s` is a ratio here)
TTFT_RATIOS = LogBuckets("rt", lo_s=0.0625, size=40)
TPOT_RATIOS = LogBuckets("rp", lo_s=0.0625, size=40)


def bucket_index(at_s: float, bucket_s: float) -> int:
    return math.floor(at_s / bucket_s)


def sample_fields(sample: LatencySample) -> dict[str, float]:
    """The increments a sample adds to its bucket (field -> amount); see the module docstring
    for how a streamed request's parts add up."""
    kind = sample.kind
    fields: dict[str, float] = {"n": 1.0} if kind in ("whole", "first_token") else {}
    if not sample.ok:
        fields["err"] = 1.0
        if sample.status == 429:
            fields["thr"] = 1.0
        return fields
    if kind in ("whole", "rest"):
        fields.update(e2e_n=1.0, e2e=sample.e2e_s)
    if sample.ttft_s is not None and kind in ("whole", "first_token"):
        x, y = float(sample.prompt_tokens), sample.ttft_s
        fields.update(tn=1.0, tx=x, ty=y, txx=x * x, txy=x * y)
        fields[f"{TTFT_HISTOGRAM.field}:{TTFT_HISTOGRAM.index(y)}"] = 1.0
        if sample.ttft_predicted_s:
            fields[_ratio_field(TTFT_RATIOS, y, sample.ttft_predicted_s)] = 1.0
    tpot = sample.tpot_s
    if tpot is None or kind == "first_token":
        return fields
    if kind != "rest":
        c = float(sample.in_flight)
        w = sample.output_tokens / STRETCH_TOKENS if kind == "progress" else 1.0
        fields.update(pn=w, pc=w * c, py=w * tpot, pcc=w * c * c, pcy=w * c * tpot)
    if kind != "progress":
        fields[f"{TPOT_HISTOGRAM.field}:{TPOT_HISTOGRAM.index(tpot)}"] = 1.0
        if sample.tpot_predicted_s:
            fields[_ratio_field(TPOT_RATIOS, tpot, sample.tpot_predicted_s)] = 1.0
    return fields


def _ratio_field(histogram: LogBuckets, measured_s: float, predicted_s: float) -> str:
    return f"{histogram.field}:{histogram.index(measured_s / predicted_s)}"


def fast_fields(fields: Mapping[str, float]) -> dict[str, float]:
    """What of a sample's increments the fast window keeps."""
    return {name: fields[name] for name in FAST_FIELDS if name in fields}


def fast_window(sums: Mapping[str, float]) -> FastWindow:
    get = sums.get
    return FastWindow(
        get("tn", 0.0),
        get("ty", 0.0),
        get("pn", 0.0),
        get("py", 0.0),
        get("tx", 0.0),
        get("pc", 0.0),
    )


def fit_line(
    n: float, sx: float, sy: float, sxx: float, sxy: float, *, min_spread: float
) -> tuple[float, float]:
    """(intercept, slope) of a guarded least-squares line; see the module docstring."""
    mean_x, mean_y = sx / n, sy / n
    var_x = max(0.0, sxx / n - mean_x * mean_x)
    spread = max(min_spread, 0.1 * abs(mean_x))
    if n < MIN_FIT_SAMPLES or var_x < spread * spread:
        return mean_y, 0.0
    slope = (sxy / n - mean_x * mean_y) / var_x
    if slope <= 0:
        return mean_y, 0.0
    intercept = mean_y - slope * mean_x
    if intercept < 0:
        return 0.0, sxy / sxx
    return intercept, slope


def weight(age_s: float, half_life_s: float) -> float:
    return math.pow(0.5, max(0.0, age_s) / half_life_s)


def merge(
    fields: Iterable[tuple[float, _Name, float | bytes | str]],
) -> tuple[dict[_Name, float], dict[_Name, float]]:
    """Sum (bucket weight, name, value) fields: (plain sums, weighted sums) per name.

    Values may be Redis replies (bytes); names are left as they come, so that a caller decodes
    the few merged names instead of every field of every bucket.
    """
    sums: dict[_Name, float] = {}
    weighted: dict[_Name, float] = {}
    for w, name, value in fields:
        number = float(value)
        sums[name] = sums.get(name, 0.0) + number
        weighted[name] = weighted.get(name, 0.0) + w * number
    return sums, weighted


def estimate(
    sums: Mapping[str, float],
    weighted: Mapping[str, float],
    fast: Mapping[str, float] | None = None,
) -> LatencyEstimate:
    """The estimate from merged buckets: plain sums give the counts, weighted sums the rest;
    `fast`: the fast window's sums, carried along."""
    histograms = _histograms(weighted)
    return LatencyEstimate(
        samples=round(sums.get("n", 0.0)),
        errors=round(sums.get("err", 0.0)),
        throttled=round(sums.get("thr", 0.0)),
        e2e_mean_s=_ratio(weighted, "e2e", "e2e_n"),
        **_ttft(weighted, histograms[TTFT_HISTOGRAM.field]),
        **_tpot(weighted, histograms[TPOT_HISTOGRAM.field]),
        **_calibration(sums, histograms),
        fast=fast_window(fast) if fast else None,
    )


def _calibration(
    sums: Mapping[str, float], weighted: Mapping[str, dict[int, float]]
) -> dict[str, Any]:
    """The ratio histograms' plain counts and decayed p95s."""
    found: dict[str, Any] = {}
    for name, histogram in (("ttft", TTFT_RATIOS), ("tpot", TPOT_RATIOS)):
        counts = weighted[histogram.field]
        if counts:
            prefix = f"{histogram.field}:"
            plain = sum(v for k, v in sums.items() if k.startswith(prefix))
            found[f"{name}_ratio_n"] = round(plain)
            found[f"{name}_ratio_p95"] = histogram.quantiles(counts, (0.95,))[0]
    return found


def _ttft(w: Mapping[str, float], counts: Mapping[int, float]) -> dict[str, Any]:
    n = w.get("tn", 0.0)
    if n <= 0:
        return {}
    base, per_token = fit_line(
        n, w["tx"], w["ty"], w["txx"], w["txy"], min_spread=MIN_PROMPT_SPREAD_TOKENS
    )
    p50, p95 = TTFT_HISTOGRAM.quantiles(counts, (0.50, 0.95))
    return {
        "prompt_tokens_mean": w["tx"] / n,
        "ttft_mean_s": w["ty"] / n,
        "ttft_base_s": base,
        "ttft_per_token_s": per_token,
        "ttft_p50_s": p50,
        "ttft_p95_s": p95,
    }


def _tpot(w: Mapping[str, float], counts: Mapping[int, float]) -> dict[str, Any]:
    n = w.get("pn", 0.0)
    if n <= 0:
        return {}
    base, per_in_flight = fit_line(
        n, w["pc"], w["py"], w["pcc"], w["pcy"], min_spread=MIN_IN_FLIGHT_SPREAD
    )
    p50, p95 = TPOT_HISTOGRAM.quantiles(counts, (0.50, 0.95))
    return {
        "tpot_mean_s": w["py"] / n,
        "tpot_base_s": base,
        "tpot_per_in_flight_s": per_in_flight,
        "tpot_p50_s": p50,
        "tpot_p95_s": p95,
    }


# Every histogram field name ("ht:12") with its histogram and index, parsed once: an estimate is
# rebuilt from ~60 merged fields whenever an endpoint's window changes.
_ALL_HISTOGRAMS = (TTFT_HISTOGRAM, TPOT_HISTOGRAM, TTFT_RATIOS, TPOT_RATIOS)
_HISTOGRAM_FIELDS = {
    f"{h.field}:{i}": (h.field, i) for h in _ALL_HISTOGRAMS for i in range(h.size + 1)
}


def _histograms(w: Mapping[str, float]) -> dict[str, dict[int, float]]:
    """LogBuckets fields ("ht:12") grouped by histogram: {"ht": {12: count}, ...}."""
    found: dict[str, dict[int, float]] = {h.field: {} for h in _ALL_HISTOGRAMS}
    fields = _HISTOGRAM_FIELDS
    for name, value in w.items():
        parsed = fields.get(name)
        if parsed is not None:
            found[parsed[0]][parsed[1]] = value
    return found


def _ratio(w: Mapping[str, float], total: str, count: str) -> float | None:
    n = w.get(count, 0.0)
    return w.get(total, 0.0) / n if n > 0 else None
