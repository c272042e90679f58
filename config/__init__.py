"""askdb's project configuration: settings, URLs, the Celery app and the embedded runtime."""

from .celery import app as celery_app

__all__ = ("celery_app",)
