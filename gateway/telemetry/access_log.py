"""uvicorn's access log without query strings: a query can carry a secret (a key pasted into a
URL, an old `?key=` bookmark of the dashboard), and a log line outlives it.

uvicorn writes `'%s - "%s %s HTTP/%s" %d'` with (client, method, path with query, HTTP version,
status) as the record's arguments; `WithoutQuery` cuts the third at its "?". It is a filter on
the `uvicorn.access` logger itself, so it applies whatever handlers and formatters uvicorn's
log config installs (dictConfig keeps a logger's filters).
"""

from __future__ import annotations

import logging

ACCESS_LOGGER = "uvicorn.access"
_PATH = 2  # the index of the path in uvicorn's access-log arguments


class WithoutQuery(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) > _PATH:
            target = args[_PATH]
            if isinstance(target, str) and "?" in target:
                record.args = (*args[:_PATH], target.partition("?")[0], *args[_PATH + 1 :])
        return True


def strip_queries() -> None:
    """Install the filter on uvicorn's access logger; safe to call again."""
    logger = logging.getLogger(ACCESS_LOGGER)
    if not any(isinstance(f, WithoutQuery) for f in logger.filters):
        logger.addFilter(WithoutQuery())
