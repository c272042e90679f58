"""The app database down or out of connections is a 503 "try again", never a 500 or a debug page.

Django turns an exception raised in a view into a response through process_exception, but one
raised while a middleware first reads the signed-in user (the session lookup, in
LoginRequiredMiddleware) goes straight to the 500 handler, or to the debug page under DEBUG; so
this middleware also reads the user itself, first, where it can answer. The API gets JSON in its
one error shape; pages get templates/503.html.
"""

from __future__ import annotations

import logging

from django.db import InterfaceError, OperationalError, connections
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string

logger = logging.getLogger("askdb.database")

RETRY_AFTER_S = 10
BUSY = "askdb is busy: every database connection is in use. Try again in a few seconds."
DOWN = "askdb's database is not reachable right now. Nothing you entered was lost; try again shortly."


def database_unavailable(exc: BaseException) -> str | None:
    """Why the app database cannot serve this request, in a sentence; None when `exc` is not that."""
    if not isinstance(exc, (OperationalError, InterfaceError)):
        return None
    cause = exc.__cause__
    if type(cause).__name__ == "PoolTimeout":  # psycopg_pool: waited DATABASE_POOL_TIMEOUT for one
        # Every connection in use, or none could be opened? One direct attempt tells them apart.
        return _why_no_connection()
    text = str(exc).lower()
    if "too many clients" in text or "too many connections" in text or "remaining connection slots" in text:
        return BUSY
    return DOWN


def _why_no_connection() -> str:
    import psycopg

    params = connections["default"].get_connection_params()
    kwargs = {k: params[k] for k in ("dbname", "user", "password", "host", "port") if params.get(k)}
    try:
        psycopg.connect(**kwargs, connect_timeout=2).close()
    except psycopg.OperationalError as exc:
        text = str(exc).lower()
        return BUSY if "too many" in text or "connection slots" in text else DOWN
    return BUSY


def unavailable_response(request: HttpRequest, message: str) -> HttpResponse:
    if request.path.startswith("/api/") or "application/json" in request.headers.get("Accept", ""):
        response: HttpResponse = JsonResponse({"error": message}, status=503)
    else:
        response = HttpResponse(render_to_string("503.html", {"message": message}), status=503)
    response["Retry-After"] = str(RETRY_AFTER_S)
    return response


class DatabaseUnavailableMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_view(self, request: HttpRequest, view_func, view_args, view_kwargs) -> HttpResponse | None:
        user = getattr(request, "user", None)
        if user is None:
            return None
        try:
            user.is_authenticated  # noqa: B018 - loads the session and the user here, not in a later middleware
        except (OperationalError, InterfaceError) as exc:
            return self._answer(request, exc)
        return None

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, (OperationalError, InterfaceError)):
            return self._answer(request, exception)
        return None

    def _answer(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        message = database_unavailable(exc)
        if message is None:
            return None
        logger.warning("%s %s: app database unavailable (%s)", request.method, request.path, exc)
        return unavailable_response(request, message)
