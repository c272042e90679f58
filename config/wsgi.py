"""WSGI entry point (gunicorn config.wsgi in production)."""

import os

from django.core.wsgi import get_wsgi_application
from django.urls import get_resolver

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
application = get_wsgi_application()
# Import every view now, at start: otherwise the first request after a start pays for it (~0.7 s).
get_resolver().url_patterns  # noqa: B018
