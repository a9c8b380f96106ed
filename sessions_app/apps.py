from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class SessionsAppConfig(AppConfig):
    name = "sessions_app"
    label = "sessions_app"
    verbose_name = _("Sessions")
    default_auto_field = "django.db.models.BigAutoField"
