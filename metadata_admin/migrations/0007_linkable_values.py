"""Distinct values of the linkable columns, kept by the loader, with a trigram index for ILIKE."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("metadata_admin", "0006_disclosure_mode"),
    ]

    operations = [
        migrations.CreateModel(
            name="LinkableValue",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("table", models.CharField(max_length=200)),
                ("column", models.CharField(max_length=128)),
                ("key", models.CharField(max_length=200)),
                ("value", models.TextField()),
                ("frequency", models.BigIntegerField(default=0)),
                (
                    "source",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="linkable_values",
                        to="metadata_admin.clinicalsource",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(fields=["source", "key", "-frequency"], name="linkable_value_key_idx")
                ],
            },
        ),
        # pg_trgm is installed with pgvector (infra.embedded; the README's production set-up).
        migrations.RunSQL(
            sql="CREATE INDEX metadata_admin_linkablevalue_trgm ON metadata_admin_linkablevalue "
            "USING gin (value gin_trgm_ops)",
            reverse_sql="DROP INDEX IF EXISTS metadata_admin_linkablevalue_trgm",
        ),
    ]
