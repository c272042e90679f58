import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("askdb", "0006_example_template_key"),
        ("metadata_admin", "0001_initial"),
    ]

    operations = [
        migrations.CreateModel(
            name="LibraryGeneration",
            fields=[
                (
                    "source",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="+",
                        serialize=False,
                        to="metadata_admin.clinicalsource",
                    ),
                ),
                ("examples", models.PositiveBigIntegerField(default=0)),
                ("data", models.PositiveBigIntegerField(default=0)),
            ],
        ),
    ]
