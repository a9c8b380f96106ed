from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class EvolutionAppConfig(AppConfig):
    name = "evolution_app"
    verbose_name = _("Evolution")
    default_auto_field = "django.db.models.BigAutoField"
