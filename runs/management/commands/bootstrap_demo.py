"""`manage.py bootstrap_demo`: the local demo user, its token, and how to log in."""

from __future__ import annotations

import secrets
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from rest_framework.authtoken.models import Token

from agentsite.runtime import build_model, workspace_config
from skills_app.core.workspace import Isolation, probe_isolation
from skills_app.services import skill_import_folders


def base_url(host: str, port: int) -> str:
    """Where a browser on this machine reaches a server listening on host:port."""
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"  # listening everywhere, reachable on loopback
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def code_execution_line(isolation: Isolation | None) -> str:
    """Whether the sandbox that skill_run and workspace_exec need works here (None: the
    profile has no execution tools), and if not, how to turn it on."""
    if isolation is None:
        return "  code execution: off (AGENTSITE_SKILLS_PROFILE=knowledge_only)"
    if isolation.available:
        return f"  code execution: on ({isolation.mechanism}, no network)"
    return (
        f'  code execution: OFF: {isolation.reason}. Skills that run scripts ("generate the report") '
        "will answer that they could not run. To turn it on: `apt install bubblewrap` and run as root "
        "(README, Skills)."
    )


class Command(BaseCommand):
    help = "Create the local demo user on first run and print how to log in and call the API."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--host", default="127.0.0.1", help="the address the server will listen on (make's HOST)")
        parser.add_argument("--port", type=int, default=8000, help="the port the server will listen on (make's PORT)")

    def handle(self, *args: Any, **options: Any) -> None:
        url = base_url(options["host"], options["port"])
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
        isolation = probe_isolation(workspace_config()) if settings.AGENTSITE_SKILLS_PROFILE == "full" else None
        self.stdout.write(
            "\n".join(
                [
                    "",
                    f"Agentsite is ready on {url}/",
                    f"  admin:  {url}/admin/   user: demo   password: {password}",
                    f"  model:  {model.name} ({model.description or model.provider}), context window {model.context_window}",
                    f"  token:  {token.key}",
                    f"  skills: {len(imported)} imported from {', '.join(settings.AGENTSITE_SKILLS_ROOTS)}",
                    code_execution_line(isolation),
                    "  try:",
                    f"    curl -s -X POST -H 'Authorization: Bearer {token.key}' -H 'Content-Type: application/json' \\",
                    '      -d \'{"message": "Why does payments.internal.example.com fail TLS handshakes?", "wait": true}\' \\',
                    f"      {url}/api/runs/",
                    "",
                ]
            )
        )
