"""The command hook's one-request HTTP client: the answers parkgate (uvicorn)
sends, read whole or refused, and its deadline."""

from __future__ import annotations

import socket
import threading

import pytest

from parkgate.cli import hook_http


def test_fixed_length_and_chunked_answers_are_read_whole() -> None:
    fixed = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-type: x\r\n\r\n{}"
    assert hook_http._parse(fixed) == (200, b"{}")
    chunked = (b"HTTP/1.1 422 Unprocessable\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"4\r\n{\"a\"\r\n3\r\n:1}\r\n0\r\n\r\n")
    assert hook_http._parse(chunked) == (422, b'{"a":1}')


@pytest.mark.parametrize("raw", [b"", b"garbage\r\n\r\n", b"HTTP/1.1 200 OK\r\n",
                                 b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\n{}"])
def test_a_cut_or_foreign_answer_is_an_error(raw: bytes) -> None:
    with pytest.raises(OSError):
        hook_http._parse(raw)


def test_the_deadline_holds_against_a_silent_server() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    threading.Thread(target=lambda: accepted.append(server.accept()[0]), daemon=True).start()
    port = server.getsockname()[1]
    with pytest.raises(TimeoutError):
        hook_http.request("POST", f"http://127.0.0.1:{port}/v1/hooks/codex", {}, b"{}", 0.5)
    server.close()


def test_hosts_and_bad_urls() -> None:
    assert hook_http._split("[::1]:8420") == ("::1", 8420)
    assert hook_http._split("gate.internal") == ("gate.internal", 80)
    with pytest.raises(ValueError):
        hook_http.request("GET", "ftp://x/", {}, None, 1)
