"""Fixtures of the security tests: API tokens for the personas, and a throttle-free start."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from rest_framework.authtoken.models import Token


@pytest.fixture
def alice_token(alice: Any) -> str:
    return Token.objects.get_or_create(user=alice)[0].key


@pytest.fixture
def bob_token(bob: Any) -> str:
    return Token.objects.get_or_create(user=bob)[0].key


@pytest.fixture(autouse=True)
def _fresh_throttle_counts() -> Iterator[None]:
    """DRF counts requests in the default cache, keyed by user id; ids repeat across tests
    (SQLite rolls its sequences back), so each test starts and ends with no history."""
    from django.core.cache import cache

    cache.clear()
    yield
    cache.clear()
