# The AuditEvent model moved here from askdb. Its table (askdb_auditevent, created with its
# append-only trigger by askdb.0001_initial) is kept as it is: this migration only tells Django's
# state that the audit app owns it now. askdb.0004 removes it from askdb's state.
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("askdb", "0003_review_examples"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.CreateModel(
                    name="AuditEvent",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("at", models.DateTimeField(auto_now_add=True, db_index=True)),
                        ("actor_name", models.CharField(blank=True, max_length=150)),
                        ("action", models.CharField(db_index=True, max_length=64)),
                        ("target_type", models.CharField(blank=True, max_length=64)),
                        ("target_id", models.CharField(blank=True, max_length=64)),
                        ("message", models.TextField(blank=True)),
                        ("detail", models.JSONField(blank=True, default=dict)),
                        ("ip", models.GenericIPAddressField(blank=True, null=True)),
                        (
                            "actor",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="+",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "db_table": "askdb_auditevent",
                        "ordering": ["-at", "-id"],
                        "indexes": [
                            models.Index(
                                fields=["target_type", "target_id"], name="askdb_audit_target__59b6d0_idx"
                            )
                        ],
                    },
                ),
            ],
        ),
    ]
