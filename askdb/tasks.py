"""Celery tasks. Thin: take ids, call a service. Named like their service."""

from __future__ import annotations

import socket

from celery import shared_task
from django.db import connection


@shared_task(name="askdb.ping", acks_late=True, soft_time_limit=10, time_limit=20)
def ping() -> dict:
    """Proves the whole path: broker → worker → app database."""
    with connection.cursor() as cur:
        cur.execute("SELECT 1")
        db_ok = cur.fetchone()[0] == 1
    return {"pong": True, "worker": socket.gethostname(), "database": db_ok}
