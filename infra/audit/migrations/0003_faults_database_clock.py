# Audit rows take their time from the database clock and their actor's name from the users table,
# whatever an INSERT says: a default of now() for Django, and a BEFORE INSERT trigger, owned by the
# owner role, for everyone else (the runtime role may INSERT, and could otherwise date an event or
# name its actor as it liked).
from django.db import migrations, models
from django.db.models.functions import Now

CLOCK = """
CREATE OR REPLACE FUNCTION askdb_audit_stamp() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.at := now();
    IF NEW.actor_id IS NOT NULL THEN
        NEW.actor_name := (SELECT username FROM auth_user WHERE id = NEW.actor_id);
    END IF;
    RETURN NEW;
END $$;
DROP TRIGGER IF EXISTS askdb_audit_stamp ON askdb_auditevent;
CREATE TRIGGER askdb_audit_stamp BEFORE INSERT ON askdb_auditevent
    FOR EACH ROW EXECUTE FUNCTION askdb_audit_stamp();
"""
UNDO = """
DROP TRIGGER IF EXISTS askdb_audit_stamp ON askdb_auditevent;
DROP FUNCTION IF EXISTS askdb_audit_stamp();
"""


def _stamp(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CLOCK)


def _unstamp(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(UNDO)


class Migration(migrations.Migration):
    dependencies = [("audit", "0002_actor_protected")]

    operations = [
        migrations.AlterField(
            model_name="auditevent",
            name="at",
            field=models.DateTimeField(db_default=Now(), db_index=True, editable=False),
        ),
        migrations.RunPython(_stamp, _unstamp),
    ]
