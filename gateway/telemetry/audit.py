"""The audit log: one JSON line per admin change, on stdout beside the request log.

    time        ISO 8601, UTC
    audit       the action: key.create, key.update, key.rotate, key.revoke, tenant.create,
                tenant.update, tenant.delete
    actor       who: the admin key's SHA-256 prefix (the one key that may change anything)
                and the client's address
    target      the key id or tenant name
    before, after   the record as it was and as it is (null: absent); never a secret, and a
                key's SHA-256 is left out too

Lines go to the `slo_gateway.audit` logger, so a deployment may route them elsewhere.
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from typing import Any

import orjson

audit_log = logging.getLogger("slo_gateway.audit")
_stdout = logging.StreamHandler(sys.stdout)
_stdout.setFormatter(logging.Formatter("%(message)s"))


def configure() -> None:
    """Bare JSON lines on stdout, whatever the root logger does; safe to call again."""
    if _stdout not in audit_log.handlers:
        audit_log.addHandler(_stdout)
    audit_log.setLevel(logging.INFO)
    audit_log.propagate = False


def line(
    action: str,
    actor: dict[str, str],
    target: str,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
) -> str:
    entry = {
        "time": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "audit": action,
        "actor": actor,
        "target": target,
        "before": _without_hash(before),
        "after": _without_hash(after),
    }
    return orjson.dumps(entry).decode()


def record(
    action: str,
    actor: dict[str, str],
    target: str,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
) -> None:
    audit_log.info(line(action, actor, target, before, after))


def _without_hash(view: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if view is None else {k: v for k, v in view.items() if k != "sha256"}
