"""A scripted, OpenAI-compatible HTTP server on loopback, for tests and benchmarks.

Why this exists
---------------
askdb reaches its LLM only through the official ``openai`` Python client, pointed at a
configurable base URL.  Mocking or patching that client would skip the code that matters
most when things go wrong: request serialisation, response parsing, retries with back-off,
``Retry-After`` handling, timeouts and the exception types the client raises.  Instead,
tests start this server and give askdb ``llm.base_url``; the *real* client then talks real
HTTP to a server whose answers the test scripts in advance.

Quick start::

    with ScriptedLLM() as llm:
        llm.enqueue(Reply("SELECT 1"))                  # next chat call answers "SELECT 1"
        llm.when("patients", Reply("SELECT * FROM patients"))   # standing rule
        llm.default = Reply("I don't know")             # fallback
        client = openai.OpenAI(base_url=llm.base_url, api_key="test", max_retries=0)
        ...
        assert llm.chat_requests()[-1][-1]["content"] == "..."

Endpoints
---------
* ``POST /v1/chat/completions`` -- answered from the script (see precedence below).
  ``n`` is honoured (n choices).  ``stream: true`` is refused with a 400 (not supported).
* ``POST /v1/embeddings`` -- deterministic: each input string maps to a SHA-256-seeded
  unit vector (float32 precision) of ``embedding_dim`` dimensions (default 384; a request's
  ``dimensions`` overrides it).  Both ``encoding_format`` "float" and "base64" (the client's
  default) are served.  :func:`deterministic_embedding` gives the same vector without HTTP.
* ``GET /v1/models`` -- lists the configured model.
* Anything else -- 404 in OpenAI's error shape.

Precedence for a chat request
-----------------------------
1. the FIFO queue (``enqueue``), if non-empty -- explicit, per-call sequencing wins;
2. the rules (``when``), first registered rule that matches and still has ``times`` left;
3. ``default``;
4. otherwise a 500 whose message says "scripted LLM has no answer for this request", with
   ``x-should-retry: false`` so the client fails at once instead of retrying.  The problem
   is also recorded in ``llm.problems``.

For ``n > 1`` the first step may be a ``Reply`` with a list of contents (one per choice);
if it supplies fewer than ``n`` contents, further steps are drawn (same precedence) until
there are ``n``.  Those extra steps must be ``Reply`` (optionally wrapped in ``Delay``).
Supplying *more* than ``n`` contents is a scripting error (500, recorded in ``problems``).

Step types
----------
``Reply``, ``Error``, ``Delay``, ``Malformed``, ``Hang`` (below).  Wherever a step is
accepted, a plain ``str`` is shorthand for ``Reply(str)``.

What the real openai client (3.54, ``max_retries=0``) raises
------------------------------------------------------------
* ``Error(429)`` -> ``openai.RateLimitError``; ``Error(500/503)`` -> ``openai.InternalServerError``;
  ``Error(400)`` -> ``openai.BadRequestError`` (all ``openai.APIStatusError``).  With
  ``max_retries > 0`` the client retries 408/409/429/5xx, honouring ``retry_after``.
* ``Delay`` longer than the client timeout, or ``Hang`` -> ``openai.APITimeoutError``.  A
  request still held by ``Hang`` when ``stop()`` runs is closed without an answer ->
  ``openai.APIConnectionError``.
* ``Malformed("not json")`` with a JSON content type -> ``json.JSONDecodeError`` escapes the
  client unwrapped (it is *not* an ``openai.APIError``).
* ``Malformed`` with a non-JSON content type -> no exception: ``create()`` returns the body
  as a plain ``str``.
* ``Malformed('{"id": "x"}')`` (valid JSON, no ``choices``) -> no exception: the client does
  not validate responses by default, so ``create()`` returns a ``ChatCompletion`` whose
  ``.choices`` is ``None`` (code doing ``.choices[0]`` then gets a ``TypeError``).
* ``Malformed(..., status=502, content_type="text/html")`` -> ``openai.InternalServerError``.
* ``stream: true`` -> ``openai.BadRequestError`` (the request does not consume a step).
* No answer scripted -> ``openai.InternalServerError`` at once, even with retries enabled.

CLI (for benchmarks running the server as a separate process)::

    python -m tests.support.scripted_llm --port 8765 --latency 0.5 --script FILE.json

where FILE.json is ``{"rules": [{"match": "substring", "reply": "..."}], "default": "..."}``.
The base URL is printed on the first line of stdout; SIGINT/SIGTERM stop the server.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import http
import itertools
import json
import math
import random
import signal
import socket
import struct
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeAlias

__all__ = [
    "NO_ANSWER_MESSAGE",
    "Delay",
    "Error",
    "Hang",
    "Malformed",
    "RecordedRequest",
    "Reply",
    "Rule",
    "ScriptedLLM",
    "Step",
    "deterministic_embedding",
    "load_script",
    "main",
]

NO_ANSWER_MESSAGE = "scripted LLM has no answer for this request"

# --------------------------------------------------------------------------- steps

ContentFn: TypeAlias = Callable[[dict[str, Any]], "str | Sequence[str]"]


@dataclass(frozen=True)
class Reply:
    """A successful chat completion.

    ``content`` is a string (one choice), a list of strings (one choice each, for ``n``),
    or a callable taking the parsed request body and returning either.  ``usage`` is
    ``(prompt_tokens, completion_tokens)``; when None it is estimated (~4 chars a token).
    """

    content: str | Sequence[str] | ContentFn
    usage: tuple[int, int] | None = None
    finish_reason: str = "stop"

    def __post_init__(self) -> None:
        if not callable(self.content) and not isinstance(self.content, str):
            object.__setattr__(self, "content", tuple(self.content))
            if not all(isinstance(c, str) for c in self.content):
                raise TypeError("Reply content list must hold only strings")
        if self.usage is not None and len(self.usage) != 2:
            raise ValueError("Reply usage must be (prompt_tokens, completion_tokens)")


@dataclass(frozen=True)
class Error:
    """An HTTP error in OpenAI's error JSON shape (429, 500, 503, 400 ...).

    ``retry_after`` (seconds, may be fractional) is sent as ``Retry-After`` and
    ``retry-after-ms``; the openai client honours it when retrying.
    """

    status: int
    message: str = ""
    retry_after: float | None = None
    code: str | None = None

    def __post_init__(self) -> None:
        if not 400 <= self.status <= 599:
            raise ValueError(f"Error status must be 4xx/5xx, got {self.status}")


@dataclass(frozen=True)
class Delay:
    """Sleep ``seconds`` then answer with ``then`` (latency injection, client timeouts)."""

    seconds: float
    then: Step | str

    def __post_init__(self) -> None:
        if self.seconds < 0:
            raise ValueError("Delay seconds must be >= 0")


@dataclass(frozen=True)
class Malformed:
    """Send ``body`` verbatim (e.g. not JSON, or JSON without ``choices``)."""

    body: str | bytes
    status: int = 200
    content_type: str | None = "application/json"


@dataclass(frozen=True)
class Hang:
    """Never answer; the connection is held until the server stops, then closed."""


Step: TypeAlias = Reply | Error | Delay | Malformed | Hang
StepLike: TypeAlias = Step | str
Matcher: TypeAlias = str | Callable[[dict[str, Any]], bool]


def _as_step(step: StepLike) -> Step:
    if isinstance(step, str):
        return Reply(step)
    if isinstance(step, Reply | Error | Delay | Malformed | Hang):
        return step
    raise TypeError(f"not a scripted step: {step!r}")


@dataclass
class Rule:
    """A standing answer: ``step`` for requests that ``match``; ``times`` None = unlimited."""

    match: Matcher
    step: Step
    times: int | None = None
    hits: int = 0

    def matches(self, body: dict[str, Any]) -> bool:
        if self.times is not None and self.times <= 0:
            return False
        if callable(self.match):
            return bool(self.match(body))
        return self.match in _message_text(body)


@dataclass(frozen=True)
class RecordedRequest:
    """One received HTTP call. ``headers`` keys are lower-cased; ``time`` is ``time.monotonic()``."""

    method: str
    path: str
    body: Any
    headers: dict[str, str]
    time: float
    raw: bytes = field(repr=False, default=b"")


# --------------------------------------------------------------------------- helpers


def _message_text(body: dict[str, Any]) -> str:
    """Concatenate the text of all messages (string content or text parts), newline-joined."""
    parts: list[str] = []
    for message in body.get("messages") or []:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    parts.append(part["text"])
    return "\n".join(parts)


def _estimate_tokens(text: str) -> int:
    return (len(text) + 3) // 4


def deterministic_embedding(text: str, dim: int = 384) -> list[float]:
    """The unit vector the server returns for ``text`` (float32-rounded, SHA-256 seeded)."""
    seed = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest(), "big")
    rng = random.Random(seed)
    vec = [rng.gauss(0.0, 1.0) for _ in range(dim)]
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    packed = struct.pack(f"<{dim}f", *(v / norm for v in vec))
    return list(struct.unpack(f"<{dim}f", packed))


def _error_type(status: int) -> str:
    return {
        400: "invalid_request_error",
        401: "authentication_error",
        403: "permission_error",
        404: "invalid_request_error",
        429: "requests",
    }.get(status, "server_error" if status >= 500 else "invalid_request_error")


def _error_body(message: str, status: int, code: str | None = None, type_: str | None = None) -> bytes:
    payload = {
        "error": {"message": message, "type": type_ or _error_type(status), "param": None, "code": code}
    }
    return json.dumps(payload).encode()


class _Stopped(Exception):
    """Raised inside a handler when the server stops while it waits."""


class _ScriptError(Exception):
    """A scripting problem (no answer, bad n ...): answered as a non-retryable 500."""


# --------------------------------------------------------------------------- server


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    llm: ScriptedLLM

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError) or self.llm._stopping.is_set():
            return  # client went away (e.g. its timeout fired) or we are stopping: not a bug
        self.llm._problem(f"handler crashed: {exc!r}")
        traceback.print_exc()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # one small response must not wait for a delayed ACK
    server: _Server
    server_version = "ScriptedLLM/1.0"
    sys_version = ""

    # -- plumbing ------------------------------------------------------------

    def setup(self) -> None:
        super().setup()
        self.server.llm._track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass
        finally:
            self.server.llm._track(self.connection, add=False)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # silence default request logging

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(
        self, status: int, body: bytes, content_type: str | None = "application/json", **headers: str
    ) -> None:
        llm = self.server.llm
        if llm._stopping.is_set():
            raise _Stopped
        try:
            self.send_response(status)
            if content_type is not None:
                self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("x-request-id", f"req_scripted_{next(llm._ids)}")
            for name, value in headers.items():
                self.send_header(name.replace("_", "-"), value)
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()
        except OSError:
            self.close_connection = True  # client disconnected (timed out): stay quiet

    def _send_json(self, status: int, payload: Any) -> None:
        self._send(status, json.dumps(payload).encode())

    def _send_error(
        self, status: int, message: str, code: str | None = None, type_: str | None = None, **headers: str
    ) -> None:
        self._send(status, _error_body(message, status, code, type_), **headers)

    def _wait(self, seconds: float) -> None:
        if seconds > 0 and self.server.llm._stopping.wait(seconds):
            raise _Stopped

    # -- dispatch ------------------------------------------------------------

    def _dispatch(self, method: str) -> None:
        llm = self.server.llm
        raw = self._read_body()
        path = self.path.split("?", 1)[0]
        body: Any = None
        bad_json = False
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                bad_json = True
        headers = {k.lower(): v for k, v in self.headers.items()}
        llm._record(RecordedRequest(method, path, body, headers, time.monotonic(), raw))
        try:
            self._wait(llm.latency)
            route = (method, path.rstrip("/"))
            if route == ("POST", "/v1/chat/completions"):
                if bad_json or not isinstance(body, dict):
                    self._send_error(400, "We could not parse the JSON body of your request.")
                else:
                    self._chat(body)
            elif route == ("POST", "/v1/embeddings"):
                if bad_json or not isinstance(body, dict):
                    self._send_error(400, "We could not parse the JSON body of your request.")
                else:
                    self._embeddings(body)
            elif route == ("GET", "/v1/models"):
                self._send_json(
                    200,
                    {
                        "object": "list",
                        "data": [
                            {"id": llm.model, "object": "model", "created": 0, "owned_by": "scripted-llm"}
                        ],
                    },
                )
            else:
                self._send_error(404, f"Invalid URL ({method} {path})")
        except _Stopped:
            self.close_connection = True

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    # -- endpoints -----------------------------------------------------------

    def _resolve(self, body: dict[str, Any]) -> Step:
        """Next step for this request, with any Delay slept through."""
        step = self.server.llm._next_step(body)
        while isinstance(step, Delay):
            self._wait(step.seconds)
            step = _as_step(step.then)
        return step

    def _contents(self, reply: Reply, body: dict[str, Any]) -> list[str]:
        content = reply.content
        if callable(content):
            try:
                content = content(body)
            except Exception as exc:
                raise _ScriptError(f"Reply content callable raised {exc!r}") from exc
        if isinstance(content, str):
            return [content]
        if not all(isinstance(c, str) for c in content):
            raise _ScriptError(f"Reply content must be str or list of str, got {content!r}")
        return list(content)

    def _chat(self, body: dict[str, Any]) -> None:
        llm = self.server.llm
        if body.get("stream"):
            self._send_error(
                400, "scripted LLM does not support streaming (stream: true)", code="stream_unsupported"
            )
            return
        n = body.get("n") or 1
        if not isinstance(n, int) or n < 1:
            self._send_error(400, f"Invalid 'n': {n!r}; expected an integer >= 1.")
            return
        try:
            step = self._resolve(body)
            if isinstance(step, Hang):
                llm._stopping.wait()
                raise _Stopped
            if isinstance(step, Error):
                headers = {}
                if step.retry_after is not None:
                    headers["Retry-After"] = f"{step.retry_after:g}"
                    headers["retry-after-ms"] = str(round(step.retry_after * 1000))
                message = step.message or f"{step.status} {http.HTTPStatus(step.status).phrase} (scripted)"
                self._send_error(step.status, message, step.code, **headers)
                return
            if isinstance(step, Malformed):
                raw = step.body.encode() if isinstance(step.body, str) else step.body
                self._send(step.status, raw, step.content_type)
                return
            assert isinstance(step, Reply)
            choices: list[tuple[str, str]] = [(c, step.finish_reason) for c in self._contents(step, body)]
            usage = step.usage
            while len(choices) < n:
                more = self._resolve(body)
                if not isinstance(more, Reply):
                    raise _ScriptError(
                        f"n={n} requested; choice {len(choices) + 1} came from {more!r}, not a Reply"
                    )
                choices += [(c, more.finish_reason) for c in self._contents(more, body)]
            if len(choices) > n:
                raise _ScriptError(f"Reply supplies {len(choices)} contents but the request asked for n={n}")
        except _ScriptError as exc:
            llm._problem(str(exc))
            self._send_error(500, f"scripted LLM: {exc}", type_="scripted_llm_error", x_should_retry="false")
            return
        if usage is None:
            prompt_tokens = max(1, _estimate_tokens(_message_text(body)))
            usage = (prompt_tokens, sum(_estimate_tokens(c) for c, _ in choices))
        self._send_json(
            200,
            {
                "id": f"chatcmpl-scripted-{next(llm._ids)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model") or llm.model,
                "choices": [
                    {
                        "index": i,
                        "message": {"role": "assistant", "content": content, "refusal": None},
                        "logprobs": None,
                        "finish_reason": finish_reason,
                    }
                    for i, (content, finish_reason) in enumerate(choices)
                ],
                "usage": {
                    "prompt_tokens": usage[0],
                    "completion_tokens": usage[1],
                    "total_tokens": usage[0] + usage[1],
                },
            },
        )

    def _embeddings(self, body: dict[str, Any]) -> None:
        llm = self.server.llm
        data = body.get("input")
        if data is None or data == [] or data == "":
            self._send_error(400, "'input' is required and must not be empty.")
            return
        if isinstance(data, str) or (isinstance(data, list) and data and isinstance(data[0], int)):
            inputs = [data]  # one string, or one list of token ids
        elif isinstance(data, list):
            inputs = data
        else:
            self._send_error(400, f"Invalid 'input': {data!r}")
            return
        dim = body.get("dimensions") or llm.embedding_dim
        if not isinstance(dim, int) or dim < 1:
            self._send_error(400, f"Invalid 'dimensions': {dim!r}")
            return
        as_base64 = body.get("encoding_format") == "base64"
        items = []
        tokens = 0
        for i, item in enumerate(inputs):
            text = item if isinstance(item, str) else json.dumps(item)
            tokens += len(item) if isinstance(item, list) else max(1, _estimate_tokens(text))
            vector: Any = deterministic_embedding(text, dim)
            if as_base64:
                vector = base64.b64encode(struct.pack(f"<{dim}f", *vector)).decode()
            items.append({"object": "embedding", "index": i, "embedding": vector})
        self._send_json(
            200,
            {
                "object": "list",
                "data": items,
                "model": body.get("model") or llm.model,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )


# --------------------------------------------------------------------------- public API


class ScriptedLLM:
    """A scripted OpenAI-compatible server on 127.0.0.1 (see the module docstring).

    Use as a context manager, or call ``start()`` / ``stop()``.  ``latency`` (seconds) is
    added before every answer and may be changed while running.
    """

    def __init__(
        self,
        *,
        port: int = 0,
        host: str = "127.0.0.1",
        model: str = "scripted-llm",
        latency: float = 0.0,
        embedding_dim: int = 384,
        default: StepLike | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.model = model
        self.latency = latency
        self.embedding_dim = embedding_dim
        self.default: StepLike | None = default
        self.problems: list[str] = []
        self._lock = threading.Lock()
        self._queue: deque[Step] = deque()
        self._rules: list[Rule] = []
        self._requests: list[RecordedRequest] = []
        self._conns: set[socket.socket] = set()
        self._ids = itertools.count(1)
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> ScriptedLLM:
        """Bind and serve in a daemon thread; returns self."""
        if self._server is not None:
            raise RuntimeError("ScriptedLLM already started")
        self._stopping.clear()
        server = _Server((self.host, self.port), _Handler)
        server.llm = self
        self._server = server
        self.port = server.server_address[1]
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.02},
            name=f"scripted-llm:{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; wakes Delay/Hang handlers and closes every open connection. Idempotent."""
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=2)
            self._thread = None

    def __enter__(self) -> ScriptedLLM:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1`` -- give this to ``openai.OpenAI(base_url=...)``."""
        return f"http://{self.host}:{self.port}/v1"

    # -- scripting ---------------------------------------------------------------

    def enqueue(self, *steps: StepLike) -> None:
        """Append steps to the FIFO queue; each chat choice consumes one."""
        converted = [_as_step(s) for s in steps]
        with self._lock:
            self._queue.extend(converted)

    def when(self, match: Matcher, step: StepLike, times: int | None = None) -> Rule:
        """Add a rule: substring of the concatenated message contents, or predicate(body)."""
        rule = Rule(match, _as_step(step), times)
        with self._lock:
            self._rules.append(rule)
        return rule

    def pending(self) -> int:
        """Number of queued steps not yet consumed."""
        with self._lock:
            return len(self._queue)

    def assert_exhausted(self) -> None:
        """Fail if queued steps remain or a scripting problem occurred."""
        with self._lock:
            left, problems = list(self._queue), list(self.problems)
        assert not left, f"scripted LLM: {len(left)} queued step(s) never used: {left!r}"
        assert not problems, f"scripted LLM problems: {problems!r}"

    def reset(self) -> None:
        """Clear queue, rules, default, recorded requests and problems."""
        with self._lock:
            self._queue.clear()
            self._rules.clear()
            self._requests.clear()
            self.problems.clear()
            self.default = None

    def _next_step(self, body: dict[str, Any]) -> Step:
        with self._lock:
            if self._queue:
                return self._queue.popleft()
            for rule in self._rules:
                try:
                    matched = rule.matches(body)
                except Exception as exc:
                    raise _ScriptError(f"rule predicate raised {exc!r}") from exc
                if matched:
                    rule.hits += 1
                    if rule.times is not None:
                        rule.times -= 1
                    return rule.step
            if self.default is not None:
                return _as_step(self.default)
        raise _ScriptError(NO_ANSWER_MESSAGE)

    # -- inspection --------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """Snapshot of every received call, oldest first."""
        with self._lock:
            return list(self._requests)

    def chat_bodies(self) -> list[dict[str, Any]]:
        """Parsed JSON bodies of the chat-completion calls."""
        return [
            r.body for r in self.requests if r.path == "/v1/chat/completions" and isinstance(r.body, dict)
        ]

    def chat_requests(self) -> list[list[dict[str, Any]]]:
        """The ``messages`` list of each chat-completion call."""
        return [body.get("messages") or [] for body in self.chat_bodies()]

    def embedding_inputs(self) -> list[Any]:
        """The ``input`` of each embeddings call."""
        return [
            r.body.get("input")
            for r in self.requests
            if r.path == "/v1/embeddings" and isinstance(r.body, dict)
        ]

    # -- internals used by the handler -------------------------------------------

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _problem(self, message: str) -> None:
        with self._lock:
            self.problems.append(message)

    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._lock:
            if not add:
                self._conns.discard(conn)
                return
            self._conns.add(conn)
        if self._stopping.is_set():  # accepted just as stop() ran: do not let it linger
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


# --------------------------------------------------------------------------- CLI


def _step_from_json(spec: Any) -> Step:
    """``"text"`` | ``["a", "b"]`` | ``{"reply": ..., "error": 503, "message": ..., "delay": 0.1}``."""
    if isinstance(spec, str | list):
        return Reply(spec)
    if not isinstance(spec, dict):
        raise ValueError(f"cannot build a step from {spec!r}")
    if "error" in spec:
        step: Step = Error(int(spec["error"]), spec.get("message", ""), spec.get("retry_after"))
    elif "reply" in spec:
        step = Reply(spec["reply"])
    else:
        raise ValueError(f"step needs 'reply' or 'error': {spec!r}")
    if spec.get("delay"):
        step = Delay(float(spec["delay"]), step)
    return step


def load_script(llm: ScriptedLLM, script: dict[str, Any]) -> None:
    """Apply ``{"rules": [{"match": str, "reply"|"error": ..., "times"?: int}], "default": ...}``."""
    for rule in script.get("rules", []):
        llm.when(rule.get("match", ""), _step_from_json(rule), rule.get("times"))
    if script.get("default") is not None:
        llm.default = _step_from_json(script["default"])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.scripted_llm", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (default)")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added to every answer")
    parser.add_argument("--script", help="JSON file: {'rules': [{'match', 'reply'}], 'default': ...}")
    parser.add_argument("--model", default="scripted-llm")
    parser.add_argument("--embedding-dim", type=int, default=384)
    args = parser.parse_args(argv)

    llm = ScriptedLLM(
        host=args.host,
        port=args.port,
        latency=args.latency,
        model=args.model,
        embedding_dim=args.embedding_dim,
    )
    if args.script:
        with open(args.script, encoding="utf-8") as fh:
            load_script(llm, json.load(fh))

    # The handler only appends to a list: it runs in the main thread between two bytecodes, and a
    # threading.Event's set() takes the lock its wait() may hold at that moment, a deadlock (the
    # process once ignored SIGTERM for good that way).
    signals: list[int] = []

    def _on_signal(signum: int, frame: Any) -> None:
        signals.append(signum)

    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    llm.start()
    print(llm.base_url, flush=True)
    try:
        while not signals:
            time.sleep(0.05)
    finally:
        llm.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
