"""The LLM: any OpenAI-compatible chat endpoint, reached only through the official `openai` client.

The client retries 429/5xx/timeouts with exponential backoff (LLM_MAX_RETRIES); whatever still
fails, or answers something unusable, becomes an LLMError with one line a user can act on.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings

from core.types import ChatResult, LLMError


@dataclass(frozen=True)
class LLMSettings:
    base_url: str | None
    model: str
    api_key: str
    timeout_s: float = 60.0
    max_retries: int = 3
    price_prompt_per_1k: float = 0.0
    price_completion_per_1k: float = 0.0


class OpenAIChat:
    """ChatModel over the openai client. Thread-safe; one instance per process is enough."""

    def __init__(self, config: LLMSettings):
        import openai  # local: a process with no LLM configured never pays for importing the client

        self.config = config
        self.model = config.model
        self._client = openai.OpenAI(
            base_url=config.base_url or None,
            api_key=config.api_key or "not-needed",
            timeout=config.timeout_s,
            max_retries=config.max_retries,
        )

    def cost(self, prompt_tokens: int, completion_tokens: int) -> Decimal:
        c = self.config
        usd = (
            prompt_tokens / 1000 * c.price_prompt_per_1k
            + completion_tokens / 1000 * c.price_completion_per_1k
        )
        return Decimal(str(round(usd, 6)))

    def complete(
        self, messages: list[dict], *, temperature: float = 0.0, n: int = 1, max_tokens: int | None = None
    ) -> ChatResult:
        import openai  # local: a process with no LLM configured never pays for importing the client

        start = time.perf_counter()
        try:
            response = self._client.chat.completions.create(
                model=self.model,
                messages=messages,
                temperature=temperature,
                n=n,
                **({"max_tokens": max_tokens} if max_tokens else {}),
            )
        except openai.APITimeoutError as exc:
            raise LLMError(
                f"the LLM did not answer within {self.config.timeout_s:g} s "
                f"(after {self.config.max_retries + 1} tries)",
                transient=True,
            ) from exc
        except openai.RateLimitError as exc:
            raise LLMError(
                "the LLM endpoint is rate-limiting askdb (HTTP 429); try again shortly", transient=True
            ) from exc
        except openai.APIConnectionError as exc:
            raise LLMError(
                f"cannot reach the LLM at {self.config.base_url or 'api.openai.com'}", transient=True
            ) from exc
        except openai.InternalServerError as exc:
            raise LLMError(f"the LLM endpoint failed (HTTP {exc.status_code})", transient=True) from exc
        except openai.APIStatusError as exc:
            raise LLMError(
                f"the LLM endpoint refused the request (HTTP {exc.status_code}): {_brief(exc)}"
            ) from exc
        except (json.JSONDecodeError, ValueError, TypeError) as exc:
            raise LLMError("the LLM endpoint answered with something that is not a chat completion") from exc
        choices = getattr(response, "choices", None)
        if not isinstance(response, object) or not choices:
            raise LLMError("the LLM endpoint answered with no choices")
        texts = [(getattr(getattr(c, "message", None), "content", None) or "") for c in choices]
        usage = getattr(response, "usage", None)
        prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
        return ChatResult(
            texts=tuple(texts),
            model=getattr(response, "model", None) or self.model,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cost_usd=float(self.cost(prompt_tokens, completion_tokens)),
            duration_ms=(time.perf_counter() - start) * 1000,
        )


def _brief(exc) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        message = body.get("message") or (body.get("error") or {}).get("message")
        if message:
            return str(message)[:200]
    return str(exc)[:200]


def get_chat_model() -> OpenAIChat | None:
    """The configured LLM, or None when no LLM is configured (askdb then says so plainly)."""
    if not settings.LLM_MODEL:
        return None
    return _cached(
        LLMSettings(
            base_url=settings.LLM_BASE_URL or None,
            model=settings.LLM_MODEL,
            api_key=settings.LLM_API_KEY,
            timeout_s=settings.LLM_TIMEOUT_S,
            max_retries=settings.LLM_MAX_RETRIES,
            price_prompt_per_1k=settings.LLM_PRICE_PROMPT_PER_1K,
            price_completion_per_1k=settings.LLM_PRICE_COMPLETION_PER_1K,
        )
    )


_clients: dict[LLMSettings, OpenAIChat] = {}


def _cached(config: LLMSettings) -> OpenAIChat:
    if config not in _clients:
        _clients[config] = OpenAIChat(config)
    return _clients[config]
