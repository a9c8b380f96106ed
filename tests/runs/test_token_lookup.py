"""The API token lookup (`runs.auth.api_token`) builds the token and its user exactly as
`Token.objects.select_related("user")` does, from its one written-out statement."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import models
from rest_framework.authtoken.models import Token

from runs.auth import AuthenticationError, api_token, token_user

pytestmark = pytest.mark.django_db


def _columns(instance: models.Model) -> dict[str, tuple[type, Any]]:
    return {
        f.attname: (type(getattr(instance, f.attname)), getattr(instance, f.attname))
        for f in instance._meta.concrete_fields
    }


def test_the_token_and_its_user_are_the_ones_the_orm_builds(django_assert_num_queries: Any) -> None:
    user = get_user_model().objects.create_user(
        "tokenholder", email="t@example.com", password="pw", first_name="Ada", is_staff=True
    )
    user.last_login = datetime(2026, 12, 4, 12, 0, 1, 250000, tzinfo=UTC)
    user.save()
    key = Token.objects.create(user=user).key
    expected = Token.objects.select_related("user").get(key=key)

    with django_assert_num_queries(1):
        token = api_token(key)
        found_user = token.user  # already there: no second statement

    assert _columns(token) == _columns(expected)
    assert _columns(found_user) == _columns(expected.user)
    assert found_user.is_active is True and found_user.is_superuser is False
    assert found_user.check_password("pw")
    assert token.user_id == user.pk and found_user._state.db == expected.user._state.db
    assert not found_user._state.adding


def test_unknown_and_inactive_tokens_are_refused_with_their_reasons() -> None:
    user = get_user_model().objects.create_user("gone", password="pw")
    key = Token.objects.create(user=user).key
    get_user_model().objects.filter(pk=user.pk).update(is_active=False)

    with pytest.raises(AuthenticationError, match="inactive"):
        api_token(key)
    with pytest.raises(AuthenticationError, match="Invalid token"):
        api_token("x" * 40)
    assert token_user(key) is None and token_user("") is None
    with pytest.raises(AuthenticationError, match="Invalid token"):
        api_token(key[:20] + "\x00" + key[21:])  # a NUL: unknown on every database, not an error
