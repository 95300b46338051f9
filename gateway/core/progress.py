"""What a running stream tells the statistics before it ends.

A request observed only at its end shows a slowdown after the requests already inside it end,
tens of seconds for long outputs. So a stream is observed in parts (`LatencySample.kind`):
    first token   its TTFT, at once (the request counts in the statistics from then)
    stretches     the TPOT of the tokens since the last report, every `every_s` seconds,
                  checked as tokens arrive. By time, not by tokens: a fast stream's tokens
                  reported more often say nothing a quarter second would not, and each report
                  is a store write (a 64-token stream that took 2 ms made four of them)
    rest          at its end: the tokens since the last stretch as one more stretch, then the
                  outcome, E2E and the request's whole TPOT (for the TPOT quantiles, which
                  are judged per request) as `rest` (gateway/core/outcomes.py): no part is
                  counted twice
`StreamProgress` keeps one stream's marks; it is pure, and its times are the caller's clock
(perf_counter live, virtual time offline), only ever subtracted from each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

EVERY_S = 0.25


@dataclass(slots=True)
class StreamProgress:
    every_s: float = EVERY_S
    started: bool = False  # its first token was reported
    mark_tokens: int = 0  # tokens counted at the last report
    mark_s: float = 0.0  # when the last of them came
    tokens: int = 0  # tokens seen so far
    last_s: float = 0.0  # when the last of them came
    # the next stretch is due at this time (a caller that sees every token checks it before
    # calling `stretch`)
    due_s: float = 0.0

    def start(self, tokens: int, last_s: float) -> None:
        """Its first token(s) came: reported as TTFT, and the first mark."""
        self.started = True
        self.tokens, self.last_s = tokens, last_s
        self._mark()

    def stretch(self, tokens: int, last_s: float) -> Stretch | None:
        """`tokens` seen so far, the last at `last_s`: the stretch since the last report when
        one is due (the mark moves on), else None."""
        self.tokens, self.last_s = tokens, last_s
        if tokens <= self.mark_tokens or last_s < self.due_s:
            return None
        return self._report()

    def rest(self) -> Stretch | None:
        """At the end: the tokens not reported yet (None when there are none, or before the
        first token)."""
        return self._report() if self.started and self.tokens > self.mark_tokens else None

    def _report(self) -> Stretch:
        gained = self.tokens - self.mark_tokens
        tpot_s = (self.last_s - self.mark_s) / gained
        self._mark()
        return Stretch(tpot_s, gained)

    def _mark(self) -> None:
        self.mark_tokens, self.mark_s = self.tokens, self.last_s
        self.due_s = self.last_s + self.every_s


class Stretch(NamedTuple):
    """Tokens of a running stream since the last report, and their TPOT."""

    tpot_s: float
    tokens: int
