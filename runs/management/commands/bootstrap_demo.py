"""`manage.py bootstrap_demo`: the local demo user, its token, and how to log in."""

from __future__ import annotations

import secrets
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from rest_framework.authtoken.models import Token

from agentsite.composition import build_model
from skills_app.services import skill_import_folders


class Command(BaseCommand):
    help = "Create the local demo user on first run and print how to log in and call the API."

    def handle(self, *args: Any, **options: Any) -> None:
        users = get_user_model()
        credentials = settings.VAR_DIR / "demo_credentials.txt"
        user = users.objects.filter(username="demo").first()
        if user is None or not credentials.exists():
            password = secrets.token_urlsafe(12)
            if user is None:
                user = users.objects.create_superuser(username="demo", email="demo@localhost", password=password)
            else:
                user.set_password(password)
                user.save(update_fields=["password"])
            credentials.write_text(f"demo\n{password}\n")
            credentials.chmod(0o600)
        password = credentials.read_text().splitlines()[1]
        token, _ = Token.objects.get_or_create(user=user)
        # The demo's folder skills become published revisions, so the admin can show,
        # revise and roll them back; a second run imports nothing unless a folder changed.
        imported = skill_import_folders(app=settings.AGENTSITE_APP, roots=settings.AGENTSITE_SKILLS_ROOTS)
        model = build_model().info()
        self.stdout.write(
            "\n".join([
                "",
                "Agentsite is ready on http://127.0.0.1:8000/",
                f"  admin:  http://127.0.0.1:8000/admin/   user: demo   password: {password}",
                f"  model:  {model.name} ({model.description or model.provider}), context window {model.context_window}",
                f"  token:  {token.key}",
                f"  skills: {len(imported)} imported from {', '.join(settings.AGENTSITE_SKILLS_ROOTS)}",
                "  try:",
                f"    curl -s -X POST -H 'Authorization: Bearer {token.key}' -H 'Content-Type: application/json' \\",
                "      -d '{\"message\": \"Why does payments.internal.example.com fail TLS handshakes?\", \"wait\": true}' \\",
                "      http://127.0.0.1:8000/api/runs/",
                "",
            ])
        )
