"""HTTP/1.1 as the front speaks it (RFC 9112) as its backend's client: the request it sends, the response
head it reads, and the body framings (chunked, Content-Length, to the end of the connection); as a server,
the head of its answers (the request heads it reads are llhttp's: specdec.runtime.request_head). Pure: bytes
in, parts out, no I/O (specdec.runtime.upstream and specdec.runtime.front_server do the I/O).
"""

from __future__ import annotations

import email.utils
import time
from http import HTTPStatus

MAX_HEAD = 64 * 1024  # a response head longer than this is not a server the front talks to
MAX_SIZE_LINE = 4096  # a chunk-size line (hex digits and extensions)


class ProtocolError(Exception):
    """What the server sent is not HTTP/1.1 the client can read."""


def request_head(method: str, host: str, path: str, headers: dict[str, str], length: int) -> bytes:
    lines = [
        f"{method} {path} HTTP/1.1",
        f"Host: {host}",
        *(f"{k}: {v}" for k, v in headers.items()),
        f"Content-Length: {length}",
        "",
        "",
    ]
    return "\r\n".join(lines).encode("latin-1")


def parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    """(status, headers by lower-case name) of a response head without its blank line."""
    status_line, *lines = head.decode("latin-1").split("\r\n")
    version, _, rest = status_line.partition(" ")
    code = rest[:3]
    if not version.startswith("HTTP/1.") or len(code) != 3 or not code.isdigit():
        raise ProtocolError(f"not an HTTP/1.1 status line: {status_line[:100]!r}")
    return int(code), _fields(lines)


def _fields(lines: list[str]) -> dict[str, str]:
    """Header fields by lower-case name; repeated ones joined with ", " (RFC 9110 5.3)."""
    headers: dict[str, str] = {}
    for line in lines:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise ProtocolError(f"not a header field: {line[:100]!r}")
        name, value = name.lower(), value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return headers


def keeps_alive(headers: dict[str, str]) -> bool:
    return "close" not in headers.get("connection", "").lower()


class Body:
    """A response body's framing: `feed` takes what arrived and returns the body bytes in it; `done` once the
    body is complete; bytes past its end are an error (the client sends one request at a time)."""

    done = False

    def feed(self, data: bytes) -> bytes:
        raise NotImplementedError

    def eof(self) -> bool:
        """The connection ended: True when that completes the body."""
        return self.done


class UntilClose(Body):
    def feed(self, data: bytes) -> bytes:
        return data

    def eof(self) -> bool:
        self.done = True
        return True


class Sized(Body):
    def __init__(self, length: int):
        self.remaining = length
        self.done = length == 0

    def feed(self, data: bytes) -> bytes:
        if len(data) > self.remaining:
            raise ProtocolError("more bytes than the Content-Length")
        self.remaining -= len(data)
        self.done = self.remaining == 0
        return data


class Chunked(Body):
    """Transfer-Encoding: chunked. A read usually holds one whole chunk (a streamed token's event): that
    case takes a search, a parse and a slice."""

    def __init__(self):
        self.buffer = b""  # bytes not yet decoded: a partial size line, chunk end or trailer
        self.remaining = 0  # data bytes of the current chunk still to come
        self.crlf = False  # the current chunk's data is complete; its CRLF is next
        self.trailers = False  # the last chunk has passed; trailer fields until a blank line
        self.between = True  # nothing of a chunk is pending: a read may start with a size line

    def feed(self, data: bytes) -> bytes:
        if self.between:
            end = data.find(b"\r\n")
            if 0 < end < 8 and data.endswith(b"\r\n"):
                size = _hex(data[:end])
                if size and len(data) == end + size + 4:
                    return data[end + 2 : -2]
        self.buffer += data
        out = []
        while self.buffer and not self.done:
            piece = self._step()
            if piece is None:
                break
            out.append(piece)
        if self.done and self.buffer:
            raise ProtocolError("bytes after the end of the chunked body")
        self.between = not (self.buffer or self.remaining or self.crlf or self.trailers)
        return b"".join(out)

    def _step(self) -> bytes | None:
        """One part of the body out of the buffer: data (maybe empty), or None when more bytes are needed."""
        buffer = self.buffer
        if self.remaining:
            piece, self.buffer = buffer[: self.remaining], buffer[self.remaining :]
            self.remaining -= len(piece)
            self.crlf = not self.remaining
            return piece
        end = buffer.find(b"\r\n")
        if end < 0:
            if len(buffer) > MAX_SIZE_LINE:
                raise ProtocolError("a chunk-size line too long")
            return None
        line, self.buffer = buffer[:end], buffer[end + 2 :]
        if self.crlf:
            if line:
                raise ProtocolError("chunk data longer than its size")
            self.crlf = False
        elif self.trailers:
            self.done = not line  # trailer fields are read and dropped
        else:
            size = _hex(line.split(b";", 1)[0].strip())
            if size is None:
                raise ProtocolError(f"not a chunk size: {line[:40]!r}")
            self.remaining, self.trailers = size, size == 0
        return b""

    def eof(self) -> bool:
        return self.done


def _hex(digits: bytes) -> int | None:
    """A chunk size: hex digits only (int() would take a sign, blanks and underscores too)."""
    try:
        return int(digits, 16) if digits.isalnum() else None
    except ValueError:
        return None


def body_framing(status: int, headers: dict[str, str]) -> Body:
    """The framing of a final (not 1xx) response's body to a request other than HEAD."""
    if status in (204, 304):
        return Sized(0)
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return Chunked()
    length = headers.get("content-length")
    if length is not None:
        if not length.isdigit():
            raise ProtocolError(f"not a Content-Length: {length[:40]!r}")
        return Sized(int(length))
    return UntilClose()


# --- as a server -----------------------------------------------------------------------------------------


def answer_head(status: int, content_type: str, *, close: bool) -> bytes:
    """An answer's status line and first fields, up to the framing's (open: more fields may follow)."""
    connection = b"Connection: close\r\n" if close else b""
    return b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nDate: %s\r\nServer: specdec-runtime\r\n%b" % (
        status,
        reason_phrase(status),
        content_type.encode(),
        http_date(),
        connection,
    )


def reason_phrase(status: int) -> bytes:
    """The status line's reason (empty for a status Python does not name, e.g. a backend's 499)."""
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


_date = (0, b"")


def http_date() -> bytes:
    """The Date header's value (RFC 9110 6.6.1), made once a second."""
    global _date
    now = int(time.time())
    if _date[0] != now:
        _date = (now, email.utils.formatdate(now, usegmt=True).encode())
    return _date[1]
