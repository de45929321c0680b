"""The command hook's HTTP: one request, one answer, as few imports as possible.

A hook process starts for every tool call of Codex and Gemini CLI, and
`urllib.request` alone (with http.client, email, ssl, tempfile) is most of
its start-up. A plain `http://` URL (parkgate on this host or a private
network) is one HTTP/1.1 request on a socket (`Connection: close`, the answer
read to the end, fixed-length or chunked); `https://` goes through urllib.

`request` answers (status, body) for any HTTP answer, raises TimeoutError
when the deadline passes and OSError (or ValueError for a bad URL) when
parkgate cannot be reached.
"""

from __future__ import annotations

import socket
import time


def request(method: str, url: str, headers: dict[str, str], body: bytes | None,
            timeout: float) -> tuple[int, bytes]:
    """Send one request; (status, body)."""
    if url.startswith("https://"):
        return _urllib(method, url, headers, body, timeout)
    if not url.startswith("http://"):
        raise ValueError(f"not an http(s) URL: {url!r}")
    rest = url[len("http://"):]
    hostport, slash, path = rest.partition("/")
    path = slash + path or "/"
    host, port = _split(hostport)
    deadline = time.monotonic() + timeout
    with socket.create_connection((host, port), timeout=timeout) as sock:
        lines = [f"{method} {path} HTTP/1.1", f"Host: {hostport}", "Connection: close",
                 "Accept: application/json", f"Content-Length: {len(body or b'')}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b""))
        chunks: list[bytes] = []
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the deadline passed")
            sock.settimeout(left)
            data = sock.recv(65536)
            if not data:
                break
            chunks.append(data)
    return _parse(b"".join(chunks))


def _split(hostport: str) -> tuple[str, int]:
    if hostport.startswith("["):  # [::1]:8420
        host, _, port = hostport[1:].partition("]")
        return host, int(port.lstrip(":") or 80)
    host, _, port = hostport.partition(":")
    if not host:
        raise ValueError("the URL names no host")
    return host, int(port or 80)


def _parse(raw: bytes) -> tuple[int, bytes]:
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        raise OSError("the connection closed before a whole HTTP answer")
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
        raise OSError(f"not an HTTP answer: {lines[0][:80]!r}")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
        body = _unchunk(body)
    elif b"content-length" in headers:
        length = int(headers[b"content-length"])
        if len(body) < length:
            raise OSError("the connection closed before the whole answer")
        body = body[:length]
    return int(parts[1]), body


def _unchunk(body: bytes) -> bytes:
    out: list[bytes] = []
    while True:
        size_line, sep, body = body.partition(b"\r\n")
        if not sep:
            raise OSError("a chunked answer ended early")
        size = int(size_line.split(b";")[0].strip() or b"0", 16)
        if size == 0:
            return b"".join(out)
        out.append(body[:size])
        body = body[size + 2:]


def _urllib(method: str, url: str, headers: dict[str, str], body: bytes | None,
            timeout: float) -> tuple[int, bytes]:
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return int(r.status), bytes(r.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), bytes(exc.read())
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):
            raise TimeoutError(str(exc.reason)) from None
        raise OSError(str(exc.reason)) from None
