"""A running stream's marks: when a stretch is due, and what is left at its end."""

from __future__ import annotations

import pytest

from gateway.core.progress import StreamProgress, Stretch


def close(found: Stretch | None, expected: Stretch) -> bool:
    return (
        found is not None
        and found.tokens == expected.tokens
        and (found.tpot_s == pytest.approx(expected.tpot_s))
    )


def test_a_stretch_is_due_every_quarter_second_however_many_tokens_came() -> None:
    progress = StreamProgress()
    progress.start(1, 10.0)
    assert progress.stretch(10, 10.1) is None
    assert progress.stretch(200, 10.2) is None  # many tokens, fast: not due yet
    assert close(progress.stretch(201, 10.25), Stretch(0.25 / 200, 200))
    assert progress.stretch(202, 10.3) is None  # 1 token in 0.05 s
    assert close(progress.stretch(203, 10.51), Stretch(0.13, 2))  # 0.26 s passed


def test_the_rest_is_what_no_stretch_reported() -> None:
    progress = StreamProgress()
    progress.start(1, 0.0)
    assert progress.stretch(17, 0.25) is not None
    assert progress.rest() is None  # nothing since
    progress.stretch(20, 0.31)
    assert close(progress.rest(), Stretch(0.02, 3))
    assert progress.rest() is None


def test_stretches_add_up_to_the_whole_streams_tpot() -> None:
    progress = StreamProgress()
    progress.start(1, 0.0)
    reported = [s for n in range(2, 101) if (s := progress.stretch(n, 0.02 * (n - 1)))]
    if (tail := progress.rest()) is not None:
        reported.append(tail)
    assert sum(s.tokens for s in reported) == 99
    assert sum(s.tpot_s * s.tokens for s in reported) == pytest.approx(0.02 * 99)
