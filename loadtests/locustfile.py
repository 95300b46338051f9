"""The locustfile: replays the plan named by $SLO_LOADTEST_PLAN (written by loadtests/live.py).

    SLO_LOADTEST_PLAN=plan.json locust -f loadtests/locustfile.py --headless --host URL

Locust collects user classes from this module's namespace, so the per-group classes made from
the plan are bound here by name; `ReplayShape` drives the run and ends it.
"""

from __future__ import annotations

import os

from loadtests.plan import PLAN_ENV, Plan
from loadtests.users import Replay, ReplayShape, user_classes

_replay = Replay(Plan.load(os.environ[PLAN_ENV]))
ReplayShape.replay = _replay
globals().update({cls.__name__: cls for cls in user_classes(_replay)})

__all__ = ["ReplayShape"]
