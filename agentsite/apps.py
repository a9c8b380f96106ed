"""The project's own AppConfig: it wires the composition root in at start-up."""

from __future__ import annotations

from django.apps import AppConfig


class AgentsiteConfig(AppConfig):
    name = "agentsite"
    verbose_name = "Agentsite"

    def ready(self) -> None:
        # The one place that imports the root: every app reaches it through agentsite.runtime.
        from agentsite.composition import install

        install()
