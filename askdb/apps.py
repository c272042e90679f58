from django.apps import AppConfig


class AskdbConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "askdb"
    verbose_name = "askdb"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from askdb import checks, signals  # noqa: F401 - registers system checks and audit receivers
        from askdb.roles import roles_sync_after_migrate

        post_migrate.connect(roles_sync_after_migrate, dispatch_uid="askdb.roles_sync")
        signals.connect_group_signals()
