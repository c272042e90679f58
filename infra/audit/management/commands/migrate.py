"""Django's migrate, run as the owner role (DATABASE_OWNER_URL, or the embedded superuser) when
the app itself connects as a runtime role that may not create tables; see infra/audit/database_roles.py."""

from django.core.management.commands.migrate import Command as MigrateCommand

from infra.audit.database_roles import as_owner


class Command(MigrateCommand):
    def handle(self, *args, **options):
        with as_owner(options["database"]):
            return super().handle(*args, **options)
