"""Requests the app cannot serve get an answer, not a 500: the app database down or out of
connections is a 503 "try again" (never a debug page); text with a NUL byte is a 400 with a sentence.

Django turns an exception raised in a view into a response through process_exception, but one
raised while a middleware first reads the signed-in user (the session lookup, in
LoginRequiredMiddleware) goes straight to the 500 handler, or to the debug page under DEBUG; so
this middleware also reads the user itself, first, where it can answer. The API gets JSON in its
one error shape; pages get templates/503.html.
"""

from __future__ import annotations

import json
import logging

from django.db import InterfaceError, OperationalError, connections
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.multipartparser import MultiPartParserError
from django.template.loader import render_to_string

from infra.text import find_nul, nul_message

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


def _find_in_fields(data, where: str) -> str | None:
    for key in data:
        shown = key.replace("\x00", "\\x00")
        if "\x00" in key or any("\x00" in value for value in data.getlist(key)):
            return f"{where}'s field {shown!r}"
    return None


class NulByteMiddleware:
    """Every web entry (the ask form, the API, imports through the API, reviews, docs, any form or
    query string) refuses a NUL character before its view runs. Uploaded files are left to their
    parsers (askdb/library_io.py refuses a NUL in an imported file; a spreadsheet is binary)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_view(self, request: HttpRequest, view_func, view_args, view_kwargs) -> HttpResponse | None:
        try:
            where = self._find(request)
        except MultiPartParserError:  # no or a broken boundary: Django raises on reading the form (a 500)
            return self._refuse(request, "The request body could not be read: it is not a well-formed form.")
        if where is None:
            return None
        return self._refuse(request, nul_message(where))

    @staticmethod
    def _refuse(request: HttpRequest, message: str) -> HttpResponse:
        if request.path.startswith("/api/") or "application/json" in request.headers.get("Accept", ""):
            return JsonResponse({"error": message}, status=400)
        return HttpResponse(render_to_string("400.html", {"message": message}), status=400)

    @staticmethod
    def _find(request: HttpRequest) -> str | None:
        if "\x00" in request.path or "%00" in request.get_full_path():
            return "The address"
        found = _find_in_fields(request.GET, "The address")
        if found or request.method in ("GET", "HEAD", "OPTIONS"):
            return found
        content_type = request.content_type or ""
        if content_type == "application/json":
            try:
                body = json.loads(request.body or b"null")
            except (ValueError, UnicodeDecodeError):
                return "The request" if b"\x00" in request.body else None  # the API says what is wrong
            return find_nul(body, "The request")
        if content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
            return _find_in_fields(request.POST, "The form")
        return None
