"""Who is making this request, for audit events written far from the view (signals, services)."""

from __future__ import annotations

import contextvars

from django.http import HttpRequest

_request: contextvars.ContextVar[HttpRequest | None] = contextvars.ContextVar("askdb_request", default=None)


def current_request() -> HttpRequest | None:
    """The request being served in this thread/context, or None (workers, commands, shells)."""
    return _request.get()


class AuditContextMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest):
        token = _request.set(request)
        try:
            return self.get_response(request)
        finally:
            _request.reset(token)
