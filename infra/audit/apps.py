from django.apps import AppConfig


class AuditConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "infra.audit"
    label = "audit"
    verbose_name = "audit log"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from infra.audit.database_roles import grant_after_migrate

        # once per migrate (after every app's migrations): the runtime role's grants cover every
        # table, and the audit table's stay SELECT and INSERT
        post_migrate.connect(grant_after_migrate, sender=self, dispatch_uid="audit.grant_runtime_role")
