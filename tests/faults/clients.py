"""Clients that drive a gateway from threads while a test breaks something around it.

`Stream` holds one streamed completion open and records how it ended; `Load` sends sequential
requests from a few threads and records every result, so a test can assert that none was lost.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx

from tests.fixtures.gateway import TENANT_KEY, chat_body

AUTH = {"authorization": f"Bearer {TENANT_KEY}"}
CLIENT_TIMEOUT_S = 20.0


def chat_url(base_url: str) -> str:
    return base_url + "/v1/chat/completions"


def post_chat(base_url: str, max_tokens: int = 4, **extra: Any) -> httpx.Response:
    body = chat_body(max_tokens=max_tokens, stream=True, **extra)
    return httpx.post(chat_url(base_url), json=body, headers=AUTH, timeout=CLIENT_TIMEOUT_S)


class Stream:
    """One streamed completion read in a thread until it ends (or `close` is called)."""

    def __init__(self, base_url: str, max_tokens: int = 2000) -> None:
        self.body = chat_body(max_tokens=max_tokens, stream=True)
        self.url = chat_url(base_url)
        self.status = 0
        self.endpoint = ""
        self.text = ""
        self.error: str | None = None  # the exception that ended the read, if any
        self.started = threading.Event()
        self.ended = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            with httpx.stream(
                "POST", self.url, json=self.body, headers=AUTH, timeout=CLIENT_TIMEOUT_S
            ) as response:
                self.status = response.status_code
                self.endpoint = response.headers.get("x-slo-gateway-endpoint", "")
                for chunk in response.iter_text():
                    self.text += chunk
                    self.started.set()
                    if self._stop.is_set():
                        return
        except httpx.HTTPError as exc:
            self.error = type(exc).__name__
        finally:
            self.started.set()
            self.ended.set()

    @property
    def completed(self) -> bool:
        return "data: [DONE]" in self.text

    @property
    def ended_with_error_event(self) -> bool:
        events = [e for e in self.text.split("\n\n") if e.startswith("data:")]
        return bool(events) and '"error"' in events[-1] and not self.completed

    def close(self) -> None:
        self._stop.set()
        self._thread.join(CLIENT_TIMEOUT_S)


@dataclass(frozen=True, slots=True)
class Result:
    status: int  # 0 when no response came
    complete: bool  # a stream that ended with [DONE]
    elapsed_s: float
    endpoint: str
    attempts: int
    retry_after: str | None = None


class Load:
    """Sequential streamed requests from `threads` threads until stopped."""

    def __init__(self, base_url: str, threads: int = 2, max_tokens: int = 8) -> None:
        self.base_url = base_url
        self.max_tokens = max_tokens
        self.results: list[Result] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def _run(self) -> None:
        while not self._stop.is_set():
            self.results.append(self.one())

    def one(self) -> Result:
        started = time.perf_counter()
        try:
            response = post_chat(self.base_url, self.max_tokens)
        except httpx.HTTPError:
            return Result(0, False, time.perf_counter() - started, "", 0)
        headers = response.headers
        return Result(
            response.status_code,
            "data: [DONE]" in response.text,
            time.perf_counter() - started,
            headers.get("x-slo-gateway-endpoint", ""),
            int(headers.get("x-slo-gateway-attempts", "0")),
            headers.get("retry-after"),
        )

    def failures(self) -> list[Result]:
        return [r for r in self.results if r.status != 200 or not r.complete]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(CLIENT_TIMEOUT_S)
