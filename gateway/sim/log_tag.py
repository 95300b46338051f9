"""Log lines of the simulated servers say they come from the simulator: `[sim <member>] ...`.

The demo and the live load test serve the simulated fleet and the gateway from one process,
both under uvicorn, whose loggers (`uvicorn.error`, `uvicorn.access`) they share; without a
tag an engine's "Invalid HTTP request" reads as the gateway's. Each member's server runs in a
context naming it (`serving_as`); tasks and callbacks started from there inherit the context,
so every line uvicorn logs while serving that member carries its tag. A filter on the logger
itself applies whatever handlers and formatters are installed (as `access_log.py` does).
"""

from __future__ import annotations

import contextvars
import logging

UVICORN_LOGGERS = ("uvicorn.error", "uvicorn.access")
_MEMBER: contextvars.ContextVar[str | None] = contextvars.ContextVar("sim_member", default=None)


class SimulatorTag(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        member = _MEMBER.get()
        if member is not None:
            record.msg = f"[sim {member}] {record.msg}"
        return True


def serving_as(member_id: str) -> contextvars.Context:
    """A context in which what runs logs as simulated member `member_id`."""
    context = contextvars.copy_context()
    context.run(_MEMBER.set, member_id)
    return context


def tag_uvicorn_logs() -> None:
    """Install the filter on uvicorn's loggers; safe to call again."""
    for name in UVICORN_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, SimulatorTag) for f in logger.filters):
            logger.addFilter(SimulatorTag())
