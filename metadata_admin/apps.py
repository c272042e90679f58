from django.apps import AppConfig


class MetadataAdminConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "metadata_admin"
    verbose_name = "Schema catalog"

    def ready(self) -> None:
        from metadata_admin import (
            checks,  # noqa: F401 - registers the catalog's system checks
            receivers,  # noqa: F401 - re-grants the readers on catalog changes
        )
