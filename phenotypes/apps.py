from django.apps import AppConfig


class PhenotypesConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "phenotypes"
    verbose_name = "Phenotypes from notes"
