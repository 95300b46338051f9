"""Hot reload of the YAML config on SIGHUP or when the file changes.

Tenants, classes, the policy and admission parameters are swapped in place; requests already in
flight keep the objects they started with, so nothing is dropped. An invalid file is rejected
with the reason logged, and the running config stays. Endpoint, server and state sections are
read at startup only: a change there is logged as needing a restart.
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

from gateway.config.settings import ConfigError, load_config
from gateway.server.runtime import Runtime
from gateway.telemetry.metrics import log

POLL_INTERVAL_S = 1.0


class ConfigReloader:
    def __init__(self, path: Path, runtime: Runtime, interval_s: float = POLL_INTERVAL_S) -> None:
        self.path = path
        self.runtime = runtime
        self.interval_s = interval_s
        self._digest = self._read_digest()

    def _read_digest(self) -> str | None:
        try:
            return hashlib.sha256(self.path.read_bytes()).hexdigest()
        except OSError:
            return None

    def reload(self) -> bool:
        """Load and apply the file now; False (old config kept) when it is invalid."""
        self._digest = self._read_digest()
        try:
            config = load_config(self.path)
        except ConfigError as exc:
            log.error("config reload rejected, keeping the running config:\n%s", exc)
            self.runtime.metrics.config_reloads.labels("rejected").inc()
            return False
        self.runtime.apply(config)
        self.runtime.metrics.config_reloads.labels("applied").inc()
        log.warning("config reloaded from %s", self.path)
        return True

    async def run(self) -> None:
        """Owned by the app lifespan: reload when the file's content changes."""
        while True:
            await asyncio.sleep(self.interval_s)
            digest = self._read_digest()
            if digest is not None and digest != self._digest:
                self.reload()
