"""Fixtures shared by every suite: a real Redis (see tests/fixtures/redis.py)."""

from tests.fixtures.redis import key_prefix, redis_client, redis_url

__all__ = ["key_prefix", "redis_client", "redis_url"]
