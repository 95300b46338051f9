"""The base of every YAML- and JSON-loaded model: an unknown field is an error, not ignored (a
misspelt key must not silently fall back to a default), and a loaded value is frozen.

`policies/` keeps its own `ConfigDict(extra="forbid", frozen=True)` on each `Params`: policies
import nothing from `gateway/` (pyproject.toml, [tool.importlinter])."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
