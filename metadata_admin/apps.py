from django.apps import AppConfig


class MetadataAdminConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "metadata_admin"
    verbose_name = "Schema catalog"
