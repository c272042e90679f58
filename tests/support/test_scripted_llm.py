"""Tests for the scripted LLM server, driven through the REAL openai client (no mocks).

Run alone (no Django, no embedded services from tests/conftest.py)::

    .venv/bin/pytest tests/support -p no:django --noconftest -q

They also pass inside the full suite (``.venv/bin/pytest tests/support``).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.support.scripted_llm import (
    NO_ANSWER_MESSAGE,
    Delay,
    Error,
    Hang,
    Malformed,
    Reply,
    ScriptedLLM,
    deterministic_embedding,
)

PROJECT_ROOT = Path(__file__).resolve().parents[2]
USER = [{"role": "user", "content": "How many patients are there?"}]


@pytest.fixture(scope="module")
def _shared() -> Iterator[tuple[ScriptedLLM, openai.OpenAI]]:
    # One server and one real client per module: building an openai client loads the CA bundle
    # (~30 ms), so per-test clients are derived with ``with_options`` (same connection pool).
    with ScriptedLLM() as server, make_client(server) as shared_client:
        yield server, shared_client


@pytest.fixture
def llm(_shared: tuple[ScriptedLLM, openai.OpenAI]) -> ScriptedLLM:
    server = _shared[0]
    server.reset()
    server.latency = 0.0
    return server


@pytest.fixture
def client(_shared: tuple[ScriptedLLM, openai.OpenAI], llm: ScriptedLLM) -> openai.OpenAI:
    return _shared[1]


def make_client(llm: ScriptedLLM, *, timeout: float = 5.0, max_retries: int = 0) -> openai.OpenAI:
    return openai.OpenAI(base_url=llm.base_url, api_key="test", timeout=timeout, max_retries=max_retries)


def ask(client: openai.OpenAI, text: str = "How many patients are there?", **kw) -> object:
    return client.chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": text}], **kw
    )


# --------------------------------------------------------------------------- basics


def test_reply_round_trips_with_usage_and_is_recorded(llm: ScriptedLLM, client: openai.OpenAI) -> None:
    llm.enqueue(Reply("SELECT count(*) FROM patients", usage=(12, 7)))
    r = ask(client)
    assert r.choices[0].message.content == "SELECT count(*) FROM patients"
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].finish_reason == "stop"
    assert r.model == "gpt-test"
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (12, 7, 19)
    assert llm.chat_requests() == [USER]
    req = llm.requests[-1]
    assert req.method == "POST" and req.path == "/v1/chat/completions"
    assert req.headers["authorization"] == "Bearer test"
    assert req.body["model"] == "gpt-test"


def test_usage_is_estimated_when_not_given(llm: ScriptedLLM, client: openai.OpenAI) -> None:
    llm.enqueue(Reply("x" * 40, finish_reason="length"))
    r = ask(client)
    assert r.usage.completion_tokens == 10
    assert r.usage.prompt_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert r.choices[0].finish_reason == "length"


def test_n_choices_from_one_list_step(llm: ScriptedLLM, client: openai.OpenAI) -> None:
    llm.enqueue(Reply(["a", "b", "c"]))
    r = ask(client, n=3)
    assert [c.message.content for c in r.choices] == ["a", "b", "c"]
    assert [c.index for c in r.choices] == [0, 1, 2]


def test_n_choices_from_separate_steps_and_from_repeating_rule(
    llm: ScriptedLLM, client: openai.OpenAI
) -> None:
    llm.enqueue("one", "two", "three")
    r = ask(client, n=3)
    assert [c.message.content for c in r.choices] == ["one", "two", "three"]
    llm.when("patients", Reply("same"))
    r = ask(client, n=3)
    assert [c.message.content for c in r.choices] == ["same"] * 3


def test_more_contents_than_n_is_a_loud_scripting_error(llm: ScriptedLLM, client: openai.OpenAI) -> None:
    llm.enqueue(Reply(["a", "b"]))
    with pytest.raises(openai.InternalServerError, match="asked for n=1"):
        ask(client)
    assert llm.problems


def test_queue_is_fifo(llm: ScriptedLLM, client: openai.OpenAI) -> None:
    llm.enqueue(Reply("first"), "second")
    llm.enqueue(Reply("third"))
    assert llm.pending() == 3
    got = [ask(client).choices[0].message.content for _ in range(3)]
    assert got == ["first", "second", "third"]
    llm.assert_exhausted()


def test_reply_content_callable_sees_request_body(llm: ScriptedLLM, client: openai.OpenAI) -> None:
    llm.default = Reply(lambda body: body["messages"][-1]["content"].upper())
    assert ask(client, "echo me").choices[0].message.content == "ECHO ME"


# --------------------------------------------------------------------------- rules & precedence


def test_rule_by_substring(llm: ScriptedLLM, client: openai.OpenAI) -> None:
    llm.when("admissions", "SELECT * FROM admissions")
    rule = llm.when("patients", Reply("SELECT * FROM patients"))
    assert ask(client, "list patients").choices[0].message.content == "SELECT * FROM patients"
    assert ask(client, "list admissions").choices[0].message.content == "SELECT * FROM admissions"
    assert rule.hits == 1


def test_rule_substring_sees_system_and_text_parts(llm: ScriptedLLM, client: openai.OpenAI) -> None:
    llm.when("SCHEMA:", "matched")
    r = client.chat.completions.create(
        model="m",
        messages=[
            {"role": "system", "content": [{"type": "text", "text": "SCHEMA: patients(...)"}]},
            {"role": "user", "content": "hi"},
        ],
    )
    assert r.choices[0].message.content == "matched"


def test_rule_by_callable(llm: ScriptedLLM, client: openai.OpenAI) -> None:
    llm.when(lambda body: body.get("temperature") == 0, "deterministic")
    llm.default = "creative"
    assert ask(client, temperature=0).choices[0].message.content == "deterministic"
    assert ask(client, temperature=1).choices[0].message.content == "creative"


def test_precedence_queue_then_rules_then_default(llm: ScriptedLLM, client: openai.OpenAI) -> None:
    llm.default = "from default"
    llm.when("patients", "from rule", times=1)
    llm.enqueue("from queue")
    got = [ask(client).choices[0].message.content for _ in range(3)]
    assert got == ["from queue", "from rule", "from default"]


def test_no_answer_is_a_loud_500_and_not_retried(llm: ScriptedLLM, client: openai.OpenAI) -> None:
    client = client.with_options(max_retries=2)
    with pytest.raises(openai.InternalServerError, match=NO_ANSWER_MESSAGE) as info:
        ask(client)
    assert info.value.status_code == 500
    assert len(llm.requests) == 1  # x-should-retry: false
    assert llm.problems == [NO_ANSWER_MESSAGE]
    with pytest.raises(AssertionError):
        llm.assert_exhausted()


# --------------------------------------------------------------------------- errors & retries


def test_429_is_rate_limit_error(llm: ScriptedLLM, client: openai.OpenAI) -> None:
    llm.enqueue(Error(429, "slow down", retry_after=1, code="rate_limit_exceeded"))
    with pytest.raises(openai.RateLimitError) as info:
        ask(client)
    err = info.value
    assert err.status_code == 429
    assert err.code == "rate_limit_exceeded"
    assert err.body["message"] == "slow down"
    assert err.response.headers["retry-after"] == "1"


def test_500_is_internal_server_error(llm: ScriptedLLM, client: openai.OpenAI) -> None:
    llm.enqueue(Error(500), Error(503, "overloaded"))
    with pytest.raises(openai.InternalServerError):
        ask(client)
    with pytest.raises(openai.InternalServerError, match="overloaded"):
        ask(client)


def test_retries_recover_from_500_then_reply(llm: ScriptedLLM, client: openai.OpenAI) -> None:
    client = client.with_options(max_retries=2)
    llm.enqueue(Error(500, retry_after=0.01), Error(429, retry_after=0.01), Reply("recovered"))
    assert ask(client).choices[0].message.content == "recovered"
    assert len(llm.chat_requests()) == 3
    assert llm.pending() == 0


def test_retry_after_is_honoured(llm: ScriptedLLM, client: openai.OpenAI) -> None:
    llm.enqueue(Error(503, retry_after=0.2), "ok")
    ask(client.with_options(max_retries=1))
    first, second = llm.requests
    assert second.time - first.time >= 0.2


def test_stream_is_refused_without_consuming_a_step(llm: ScriptedLLM, client: openai.OpenAI) -> None:
    llm.enqueue("kept")
    with pytest.raises(openai.BadRequestError, match="streaming"):
        ask(client, stream=True)
    assert llm.pending() == 1


# --------------------------------------------------------------------------- timeouts, hangs, stop


def test_delay_past_client_timeout_raises_timeout_and_server_stays_usable(
    llm: ScriptedLLM, client: openai.OpenAI, capfd: pytest.CaptureFixture[str]
) -> None:
    llm.enqueue(Delay(0.3, "too late"), "on time")
    with pytest.raises(openai.APITimeoutError):
        ask(client.with_options(timeout=0.1))
    assert ask(client).choices[0].message.content == "on time"
    time.sleep(0.25)  # let the delayed handler write into the socket the client closed
    assert capfd.readouterr().err == ""
    assert llm.problems == []


def test_delay_shorter_than_timeout_just_delays(llm: ScriptedLLM, client: openai.OpenAI) -> None:
    llm.enqueue(Delay(0.15, Reply("eventually")))
    start = time.monotonic()
    assert ask(client).choices[0].message.content == "eventually"
    assert time.monotonic() - start >= 0.15


def test_hang_times_out_and_stop_releases_held_connections() -> None:
    llm = ScriptedLLM().start()
    llm.default = Hang()
    impatient = make_client(llm, timeout=0.2)
    with pytest.raises(openai.APITimeoutError):
        ask(impatient)

    outcome: list[BaseException] = []

    def patient() -> None:
        try:
            ask(impatient.with_options(timeout=30))
        except BaseException as exc:
            outcome.append(exc)

    waiter = threading.Thread(target=patient)
    waiter.start()
    deadline = time.monotonic() + 2
    while len(llm.requests) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    start = time.monotonic()
    llm.stop()
    assert time.monotonic() - start < 2
    waiter.join(timeout=2)
    assert not waiter.is_alive()
    # the held connection is closed without a response: the client sees a connection error
    assert len(outcome) == 1 and isinstance(outcome[0], openai.APIConnectionError)
    assert not isinstance(outcome[0], openai.APITimeoutError)
    llm.stop()  # idempotent
    impatient.close()


# --------------------------------------------------------------------------- malformed responses


def test_malformed_non_json_raises_json_decode_error(llm: ScriptedLLM, client: openai.OpenAI) -> None:
    # What openai 3.54 really does: the JSONDecodeError escapes unwrapped (not an openai.APIError).
    llm.enqueue(Malformed("this is not json"))
    with pytest.raises(json.JSONDecodeError):
        ask(client)


def test_malformed_json_without_choices_parses_with_choices_none(
    llm: ScriptedLLM, client: openai.OpenAI
) -> None:
    llm.enqueue(Malformed(json.dumps({"id": "x", "object": "chat.completion"})))
    r = ask(client)
    assert r.id == "x"
    assert r.choices is None


def test_malformed_text_plain_returns_str_and_html_502_is_server_error(
    llm: ScriptedLLM, client: openai.OpenAI
) -> None:
    llm.enqueue(Malformed("plain words", content_type="text/plain"))
    assert ask(client) == "plain words"
    llm.enqueue(Malformed(b"<html>Bad Gateway</html>", status=502, content_type="text/html"))
    with pytest.raises(openai.InternalServerError):
        ask(client)


# --------------------------------------------------------------------------- embeddings, models, 404


def test_embeddings_are_deterministic_unit_vectors(llm: ScriptedLLM, client: openai.OpenAI) -> None:
    batch = client.embeddings.create(model="emb", input=["alpha", "beta", "alpha"])
    assert [d.index for d in batch.data] == [0, 1, 2]
    vectors = [d.embedding for d in batch.data]
    assert all(len(v) == 384 for v in vectors)
    assert all(math.isclose(math.fsum(x * x for x in v), 1.0, abs_tol=1e-5) for v in vectors)
    assert vectors[0] == vectors[2] != vectors[1]
    single = client.embeddings.create(model="emb", input="alpha")  # string input, base64 transport
    floats = client.embeddings.create(model="emb", input="alpha", encoding_format="float")
    assert (
        single.data[0].embedding == floats.data[0].embedding == vectors[0] == deterministic_embedding("alpha")
    )
    assert batch.usage.prompt_tokens > 0 and batch.usage.total_tokens == batch.usage.prompt_tokens
    assert llm.embedding_inputs()[0] == ["alpha", "beta", "alpha"]


def test_embedding_dimension_is_configurable() -> None:
    with ScriptedLLM(embedding_dim=8) as llm, make_client(llm) as client:
        assert len(client.embeddings.create(model="e", input="x").data[0].embedding) == 8
        assert len(client.embeddings.create(model="e", input="x", dimensions=16).data[0].embedding) == 16


def test_models_lists_configured_model() -> None:
    with ScriptedLLM(model="askdb-test-model") as llm, make_client(llm) as client:
        assert [m.id for m in client.models.list()] == ["askdb-test-model"]


def test_unknown_path_is_404_in_openai_shape(llm: ScriptedLLM, client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("nope")
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(urllib.request.Request(llm.base_url + "/completions", data=b"{}"), timeout=5)
    assert info.value.code == 404
    error = json.loads(info.value.read())["error"]
    assert error["type"] == "invalid_request_error" and "Invalid URL" in error["message"]
    assert set(error) == {"message", "type", "param", "code"}


# --------------------------------------------------------------------------- latency & CLI


def test_latency_setting_delays_every_answer(llm: ScriptedLLM, client: openai.OpenAI) -> None:
    llm.default = "ok"
    llm.latency = 0.15
    for call in (lambda: ask(client), lambda: client.embeddings.create(model="e", input="x")):
        start = time.monotonic()
        call()
        assert time.monotonic() - start >= 0.15


def test_given_port_is_used() -> None:
    probe = ScriptedLLM().start()
    port = probe.port
    probe.stop()
    with ScriptedLLM(port=port) as llm:
        assert llm.base_url == f"http://127.0.0.1:{port}/v1"


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_cli_serves_script_and_stops_on_signal(tmp_path: Path, stop_signal: signal.Signals) -> None:
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            {
                "rules": [{"match": "patients", "reply": "SELECT 1"}, {"match": "boom", "error": 503}],
                "default": "fallback",
            }
        )
    )
    command = [sys.executable, "-m", "tests.support.scripted_llm", "--port", "0", "--latency", "0.05"]
    with subprocess.Popen(
        [*command, "--script", str(script)],
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    ) as proc:
        try:
            base_url = proc.stdout.readline().strip()
            assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")
            with openai.OpenAI(base_url=base_url, api_key="test", timeout=5, max_retries=0) as client:
                start = time.monotonic()
                assert ask(client, "count patients").choices[0].message.content == "SELECT 1"
                assert time.monotonic() - start >= 0.05
                assert ask(client, "something else").choices[0].message.content == "fallback"
                with pytest.raises(openai.InternalServerError):
                    ask(client, "boom")
            proc.send_signal(stop_signal)
            assert proc.wait(timeout=5) == 0
            assert proc.stderr.read() == ""
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
