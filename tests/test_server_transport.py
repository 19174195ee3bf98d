"""Slow clients on loopback against a real uvicorn server (textfree.server.transport): a connection that sends part of
a request head, trickles it byte by byte, sends nothing, or stalls in its body is closed within the server's deadline,
and the server keeps answering others meanwhile."""

import socket
import time

import httpx
import pytest

from textfree.server import ServerConfig, create_app
from textfree.server.testing import serve_in_thread
from textfree.server.transport import guarded_protocol

HEAD_S = 1.0
BODY_S = 1.0
MARGIN_S = 4.0  # a loaded 2-core machine may be late by this much; the unguarded server never closes at all


@pytest.fixture(scope="module")
def url(tiny_encoder_dir):
    config = ServerConfig(
        embed_models={"emb": str(tiny_encoder_dir)}, auth=False, head_timeout_s=HEAD_S, body_timeout_s=BODY_S
    )
    with serve_in_thread(create_app(config)) as base:
        yield base


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=5)
    sock.settimeout(HEAD_S + MARGIN_S)
    return sock


def _until_closed(sock: socket.socket) -> tuple[bytes, float]:
    """(everything the server sent, seconds until it closed); raises socket.timeout if it never closes."""
    start, got = time.monotonic(), b""
    while True:
        chunk = sock.recv(4096)
        if not chunk:
            return got, time.monotonic() - start
        got += chunk


def test_a_partial_request_head_is_answered_408_and_closed(url):
    with _connect(url) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        got, waited = _until_closed(sock)
    assert got.startswith(b"HTTP/1.1 408"), got
    assert b'"request_timeout"' in got
    assert 0.5 * HEAD_S <= waited <= HEAD_S + MARGIN_S


def test_a_head_sent_byte_by_byte_does_not_extend_the_deadline(url):
    head = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-Pad: " + b"a" * 200
    with _connect(url) as sock:
        start = time.monotonic()
        closed = False
        for byte in head:
            try:
                sock.sendall(bytes([byte]))
            except OSError:  # the server closed the connection
                closed = True
                break
            time.sleep(0.05)
            if time.monotonic() - start > HEAD_S + MARGIN_S:
                break
        if not closed:
            got, _ = _until_closed(sock)
            assert got.startswith(b"HTTP/1.1 408"), got
        assert time.monotonic() - start <= HEAD_S + MARGIN_S + 0.5


def test_a_connection_that_sends_nothing_is_closed(url):
    with _connect(url) as sock:
        _, waited = _until_closed(sock)
    assert waited <= HEAD_S + MARGIN_S


def test_a_kept_alive_connection_with_a_partial_next_head_is_closed(url):
    with _connect(url) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        first = b""
        while b'"status":"ok"' not in first:
            first += sock.recv(4096)
        assert first.startswith(b"HTTP/1.1 200")
        sock.sendall(b"GET /health HTTP/1.1\r\n")  # cancels uvicorn's keep-alive timer: only the head deadline is left
        got, waited = _until_closed(sock)
    assert got.startswith(b"HTTP/1.1 408") and waited <= HEAD_S + MARGIN_S


def test_a_stalled_body_is_closed(url):
    with _connect(url) as sock:
        sock.sendall(
            b"POST /v1/embed?model=emb HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/octet-stream\r\n"
            b"Content-Length: 100000\r\n\r\n" + b"\x00" * 10
        )
        got, waited = _until_closed(sock)
    assert waited <= BODY_S + MARGIN_S
    assert not got.startswith(b"HTTP/1.1 5"), got


def test_many_slow_connections_are_all_closed_and_others_are_served(url):
    socks = [_connect(url) for _ in range(64)]
    try:
        for s in socks:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        assert httpx.get(f"{url}/health", timeout=5).status_code == 200  # served while the slow ones wait
        deadline = time.monotonic() + HEAD_S + MARGIN_S
        for s in socks:
            s.settimeout(max(0.1, deadline - time.monotonic()))
            got, _ = _until_closed(s)
            assert got.startswith(b"HTTP/1.1 408")
    finally:
        for s in socks:
            s.close()
    assert httpx.get(f"{url}/health", timeout=5).status_code == 200


def test_deadlines_are_checked():
    with pytest.raises(ValueError, match="head_timeout_s"):
        ServerConfig(embed_models={"e": "x"}, auth=False, head_timeout_s=0)
    with pytest.raises(ValueError, match="body_timeout_s"):
        guarded_protocol(1.0, float("inf"))
    assert guarded_protocol(2.5, 7.0).head_timeout_s == 2.5
