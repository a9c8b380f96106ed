from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = _("Runs")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from runs import receivers  # noqa: F401  (connects the signal receivers)
