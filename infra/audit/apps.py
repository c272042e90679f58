from django.apps import AppConfig


class AuditConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "infra.audit"
    label = "audit"
    verbose_name = "audit log"
