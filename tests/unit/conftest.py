"""Fixtures of the unit tests that talk to a loopback server (the health and scraper wires)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    """One client per test, as the gateway shares one across its checkers and scrapers."""
    async with httpx.AsyncClient() as shared:
        yield shared
