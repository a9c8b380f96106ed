from django.apps import AppConfig


class EvolutionAppConfig(AppConfig):
    name = "evolution_app"
    verbose_name = "Evolution"
    default_auto_field = "django.db.models.BigAutoField"
