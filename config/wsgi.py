"""WSGI entry point (gunicorn config.wsgi in production)."""

import os

from django.core.wsgi import get_wsgi_application
from django.urls import get_resolver

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
application = get_wsgi_application()
# Pay at start what the first request after a start would otherwise pay: importing every view
# (~0.7 s) and the broker's transport (~0.25 s, the first question or approval queues a task).
get_resolver().url_patterns  # noqa: B018
from config.celery import app as celery_app  # noqa: E402 - needs Django set up

celery_app.connection_for_write().get_transport_cls()  # imports the transport; connects to nothing
