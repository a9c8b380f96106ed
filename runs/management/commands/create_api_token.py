"""`manage.py create_api_token USER`: print USER's API token alone on the last line."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from rest_framework.authtoken.models import Token


class Command(BaseCommand):
    help = "Print (creating if needed) the API token of USER. --rotate replaces an existing one."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--rotate", action="store_true", help="replace the user's token with a new one")
        parser.add_argument("--create-user", action="store_true", help="create USER (no password) if missing")

    def handle(self, *args: Any, username: str, rotate: bool, create_user: bool, **options: Any) -> None:
        users = get_user_model()
        user = users.objects.filter(username=username).first()
        if user is None:
            if not create_user:
                raise CommandError(f"no user named {username!r} (use --create-user to make one)")
            user = users.objects.create_user(username=username)
        if rotate:
            Token.objects.filter(user=user).delete()
        token, _ = Token.objects.get_or_create(user=user)
        self.stdout.write(token.key)
