"""The HTTP transport: uvicorn with time limits on receiving a request's head and body (docs/server.md, "Timeouts").

uvicorn arms no timer while it waits for a request head: its only one, ``timeout_keep_alive``, starts after a response
and is cancelled by the first byte of the next request, so a client that sends part of a head (one byte every few
seconds, or nothing after the first line) holds its connection forever, and a few hundred such clients hold as many
sockets. :class:`GuardedH11Protocol` (uvicorn's h11 protocol, subclassed) adds two deadlines:

* **head**: from the connection's start, or from the first byte of a kept-alive connection's next request, the whole
  head must arrive within ``head_timeout_s``; otherwise the server answers ``408`` and closes. Bytes trickling in do
  not extend it.
* **body**: from the end of the head, the body must arrive within ``body_timeout_s`` plus one second per
  :data:`BODY_MIN_BYTES_PER_S` bytes received (a slow client that keeps sending at that rate is never cut off, one
  that stalls is); otherwise the connection is closed and the route sees the client gone.

:func:`uvicorn_config` builds the ``uvicorn.Config`` of an app made by :func:`~textfree.server.create_app` with that
protocol and the app's :class:`~textfree.server.config.ServerConfig`; :func:`run_server` runs it (what
``textfree serve`` and :func:`~textfree.server.testing.serve_in_thread` use).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["BODY_MIN_BYTES_PER_S", "GuardedH11Protocol", "guarded_protocol", "run_server", "uvicorn_config"]

log = logging.getLogger("textfree.server")

#: Each byte of a body received buys 1 / this many seconds beyond ``body_timeout_s`` (64 KiB/s: 512 kbit/s).
BODY_MIN_BYTES_PER_S = 64 * 1024
_TIMEOUT_BODY = json.dumps(
    {"error": {"type": "request_timeout", "message": "the request head did not arrive in time"}}
).encode()


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on each request head and body (this module's docstring)."""

    head_timeout_s: float = 10.0
    body_timeout_s: float = 30.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._guard: asyncio.TimerHandle | None = None
        self._phase: str | None = None
        self._body_start = 0.0
        self._body_bytes = 0
        self._arm("head", self.head_timeout_s)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._phase == "body":
            self._body_bytes += len(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._follow()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    # ------------------------------------------------------------------ the deadlines
    def _follow(self) -> None:
        """Arm, move or drop the deadline after the peer's state changed (a head or a body completed)."""
        state = self.conn.their_state
        if state is h11.IDLE:
            if self._phase != "head" and self.conn.trailing_data[0]:  # the first bytes of a kept-alive next request
                self._arm("head", self.head_timeout_s)
        elif state is h11.SEND_BODY:
            if self._phase != "body":
                self._body_start, self._body_bytes = time.monotonic(), 0
                self._arm("body", self.body_timeout_s)
        elif self._phase is not None:
            self._disarm()

    def _arm(self, phase: str, seconds: float) -> None:
        self._disarm()
        self._phase = phase
        self._guard = self.loop.call_later(seconds, self._expired, phase)

    def _disarm(self) -> None:
        if getattr(self, "_guard", None) is not None:
            self._guard.cancel()
        self._guard, self._phase = None, None

    def _expired(self, phase: str) -> None:
        self._guard = None
        if self.transport.is_closing() or phase != self._phase:
            return
        if phase == "body":
            allowed = self.body_timeout_s + self._body_bytes / BODY_MIN_BYTES_PER_S
            left = self._body_start + allowed - time.monotonic()
            if left > 0:  # the client kept sending: its deadline moved on
                self._guard = self.loop.call_later(left, self._expired, phase)
                return
            log.debug("closing a connection whose request body stalled (%d bytes in %.0f s)", self._body_bytes, allowed)
            self.transport.close()
            return
        if self.conn.their_state is h11.IDLE:  # still no whole head
            log.debug("closing a connection whose request head did not arrive in %.0f s", self.head_timeout_s)
            self._answer_408()

    def _answer_408(self) -> None:
        """``408 Request Timeout`` (the error JSON) and close, if no response has begun on this connection."""
        try:
            headers = [
                ("content-type", "application/json"),
                ("content-length", str(len(_TIMEOUT_BODY))),
                ("connection", "close"),
            ]
            out = self.conn.send(h11.Response(status_code=408, headers=headers, reason=b"Request Timeout"))
            out += self.conn.send(h11.Data(data=_TIMEOUT_BODY)) + self.conn.send(h11.EndOfMessage())
            self.transport.write(out)
        except h11.LocalProtocolError:  # a response is under way already: just close
            pass
        self.transport.close()


def guarded_protocol(head_timeout_s: float, body_timeout_s: float) -> type[GuardedH11Protocol]:
    """A :class:`GuardedH11Protocol` class with these deadlines (uvicorn instantiates the class it is given)."""
    for name, value in (("head_timeout_s", head_timeout_s), ("body_timeout_s", body_timeout_s)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 3600:
            raise ValueError(f"{name} must lie in (0, 3600] seconds, got {value!r}")
    attrs = {"head_timeout_s": float(head_timeout_s), "body_timeout_s": float(body_timeout_s)}
    return type("GuardedH11Protocol", (GuardedH11Protocol,), attrs)


def uvicorn_config(app: Any, **kwargs: Any) -> uvicorn.Config:
    """The ``uvicorn.Config`` of ``app`` (from :func:`~textfree.server.create_app`): the guarded h11 protocol with the
    deadlines of ``app.state.config``; ``kwargs`` go to ``uvicorn.Config`` (host, port, log_level, ...)."""
    config = app.state.config
    protocol = guarded_protocol(config.head_timeout_s, config.body_timeout_s)
    return uvicorn.Config(app, http=protocol, **{"host": config.host, **kwargs})


def run_server(app: Any, **kwargs: Any) -> None:
    """Serve ``app`` until interrupted, as :func:`uvicorn_config` configures it (``textfree serve``)."""
    uvicorn.Server(uvicorn_config(app, **kwargs)).run()
