# AuditEvent now belongs to the audit app (infra.audit); its table stays where it is.
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("askdb", "0003_review_examples"),
        ("audit", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[migrations.DeleteModel(name="AuditEvent")],
        ),
    ]
