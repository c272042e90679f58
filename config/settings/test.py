"""pytest: its own embedded state folder (so tests never touch demo data), fast hashing."""

import os
from pathlib import Path

os.environ.setdefault("ASKDB_HOME", str(Path(__file__).resolve().parents[2] / ".askdb" / "test"))
os.environ.setdefault("ASKDB_PG_FAST", "1")

from .base import *  # noqa: F403
from .base import DATABASE_OWNER, DATABASES, env

# pytest-django creates and migrates the test database through "default", so here it is the
# owner; after migrate the runtime role gets exactly its production grants on the test database
# (tests that prove what the app may do connect as that role: tests/askdb/test_audit_role.py).
if DATABASE_OWNER and not env("DATABASE_URL"):
    DATABASES["default"].update({k: DATABASE_OWNER[k] for k in ("USER", "PASSWORD", "HOST", "PORT")})
    DATABASE_OWNER = None

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
WHITENOISE_AUTOREFRESH = True

# One SQL candidate unless a test asks for sampling: scripted replies stay one per request.
ASKDB_CANDIDATES = 1
# Calibration in this process: a test that compares it with worker processes asks for them itself.
ASKDB_CALIBRATION_PROCESSES = 1
