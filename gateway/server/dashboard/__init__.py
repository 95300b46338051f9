"""The operator's dashboard, served by the gateway itself: one page, one JSON document.

    routes.py    GET /dashboard, its sign-in, GET /admin/dashboard.json, the static files
    board.py     the JSON document: endpoints, classes, tenants, decisions
    readings.py  what is read from the runtime: predictions, counters, one history sample
    history.py   the bounded ring of samples behind sparklines and windowed counts
    explain.py   routing decisions in words
    page.py      the server-rendered HTML (complete without JavaScript)
    static/      dashboard.js (polling, no build step) and dashboard.css

docs/observability.md describes what an operator sees and how to read it.
"""

from gateway.server.dashboard.history import History, watch
from gateway.server.dashboard.routes import routes

__all__ = ["History", "routes", "watch"]
