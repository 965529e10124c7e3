"""The request heads the front's server reads (RFC 9112), parsed by llhttp (through httptools, the parser
uvicorn and Node use): what it refuses (bare LF, control characters, a Content-Length that is not plain
digits or overflows, a duplicate one, a malformed header name) is refused here with 400. On top of it, the
rules llhttp leaves to the server: an HTTP/1.1 request needs one Host (RFC 9112 3.2), the version must be
1.x, one space between the request line's parts and only CRLF before it (llhttp takes several spaces and a
bare LF there), the target origin- or absolute-form; at most `max_fields` fields in at most `max_bytes`
bytes (431).

llhttp is fed a request's head and nothing past it: the front reads one request at a time and the bodies
itself (FrontConnection), so that a request sent ahead of its turn stays bytes in the buffer until its turn
(llhttp would parse every pipelined request it is given at once), and a body is sliced out by its
Content-Length rather than copied piece by piece out of llhttp's body callbacks. A head ends at the first
empty line; in the bytes received, no head can end before the first LF followed by CRLF or LF, so the reader
feeds llhttp up to there, or everything when there is none yet.

Cost: a typical head (8 fields, curl's or httpx's) takes 5.5 µs here, against 2.6 µs for splitting it on
CRLF and colons in Python (timeit, Python 3.11), which takes heads that llhttp and h11 both refuse
(tests/runtime/test_front_hostile.py): 3 µs more a request, about 0.1 % of the front's CPU for a stream of
128 tokens (some 18 µs a token, docs/performance/runtime-front.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

import httptools

MAX_CONTENT_LENGTH_DIGITS = 18  # llhttp refuses overflowing values; this keeps int() linear-time anyway
_REQUEST_LINE = re.compile(rb"[!-~]+ [^\x00-\x20\x7f]+ [!-~]+")  # RFC 9112 3: one SP between the three
_HOST = re.compile(rb"[A-Za-z0-9._~!$&'()*+,;=%:\[\]-]*")  # RFC 3986 host [":" port], or empty


class Refused(Exception):
    """A head the front does not read: answered with `status` and `message`, counted by `reason`."""

    def __init__(self, status: int, reason: str, message: str):
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ costs a microsecond more a request
class RequestHead:
    method: str
    path: str  # the target's path, decoded
    version: str  # "1.1" or "1.0"
    length: int  # of the body (Content-Length; 0 without one)
    has_length: bool
    chunked: bool  # a Transfer-Encoding was sent
    keep_alive: bool  # HTTP/1.1 without "Connection: close"
    expects_continue: bool  # HTTP/1.1 with "Expect: 100-continue"
    fields: dict[bytes, bytes]  # by lower-case name, values stripped, repeated ones joined with ", "


class HeadReader:
    """Reads one request head at a time from the front of a connection's buffer (`read`)."""

    def __init__(self, max_fields: int, max_bytes: int):
        self.max_fields, self.max_bytes = max_fields, max_bytes
        self._reset()

    def _reset(self) -> None:
        self._parser = httptools.HttpRequestParser(self)
        self._fed = 0  # bytes of the buffer given to llhttp
        self._url: list[bytes] = []
        self._fields: dict[bytes, bytes] = {}
        self._count = 0
        self._hosts = 0
        self._complete = False

    @property
    def started(self) -> bool:
        """Some of a head has been received (a timeout applies)."""
        return self._fed > 0

    def read(self, buffer: bytearray) -> tuple[RequestHead, int] | None:
        """(the head, its length in bytes) when the buffer starts with a whole one, None while it is incomplete.
        Raises Refused. The caller removes the head's bytes from the buffer."""
        while not self._complete:
            start = self._fed
            if start >= len(buffer):
                return None
            end = _head_end(buffer, start, self.max_bytes + 1)
            if end > self.max_bytes:
                self._reset()
                raise Refused(431, "head_too_large", f"The request's head is longer than {self.max_bytes} bytes.")
            self._fed = end
            try:
                self._parser.feed_data(buffer[start:end])
            except httptools.HttpParserCallbackError as error:
                self._reset()
                if isinstance(error.__context__, Refused):
                    raise error.__context__ from None
                raise Refused(400, "bad_request", f"The request's head is not HTTP/1.1: {error}.") from None
            except httptools.HttpParserError as error:
                self._reset()
                raise Refused(400, "bad_request", f"The request's head is not HTTP/1.1: {error}.") from None
        try:
            return self._head(bytes(buffer[: self._fed])), self._fed
        finally:
            self._reset()

    # --- llhttp's callbacks ---------------------------------------------------------------------------------

    def on_url(self, url: bytes) -> None:
        self._url.append(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count += 1
        if self._count > self.max_fields:
            raise Refused(431, "too_many_fields", f"The request has more than {self.max_fields} header fields.")
        name = name.lower()
        if name == b"host":
            self._hosts += 1
        previous = self._fields.get(name)
        self._fields[name] = value.strip() if previous is None else previous + b", " + value.strip()

    def on_headers_complete(self) -> None:
        self._complete = True

    # --- the server's rules ---------------------------------------------------------------------------------

    def _head(self, raw: bytes) -> RequestHead:
        parser, fields = self._parser, self._fields
        start = 0
        while raw.startswith(b"\r\n", start):  # empty lines before the request line (RFC 9112 2.2)
            start += 2
        if not _REQUEST_LINE.fullmatch(raw[start : raw.find(b"\r\n", start)]):  # llhttp takes runs of spaces, a LF
            raise Refused(
                400, "bad_request", "The request line is not a method, a target and a version, each after one space."
            )
        version = parser.get_http_version()
        if version not in ("1.1", "1.0"):
            raise Refused(505, "version", f"HTTP/{version} is not served here (HTTP/1.1 is).")
        if version == "1.1" and self._hosts != 1:
            raise Refused(
                400, "bad_request", f"An HTTP/1.1 request has one Host header field (this one has {self._hosts})."
            )
        if self._hosts and not _HOST.fullmatch(fields[b"host"]):
            raise Refused(400, "bad_request", "The Host header field is not a host.")
        length_field = fields.get(b"content-length")
        if length_field is not None and not (length_field.isdigit() and len(length_field) <= MAX_CONTENT_LENGTH_DIGITS):
            raise Refused(400, "bad_request", f"Content-Length is not a length: {length_field[:40]!r}.")
        tokens = fields.get(b"connection", b"").lower()
        return RequestHead(
            method=parser.get_method().decode("ascii"),
            path=_path(b"".join(self._url)),
            version=version,
            length=int(length_field) if length_field is not None else 0,
            has_length=length_field is not None,
            chunked=b"transfer-encoding" in fields,
            keep_alive=version == "1.1" and b"close" not in tokens,
            expects_continue=version == "1.1" and fields.get(b"expect", b"").lower() == b"100-continue",
            fields=fields,
        )


def _head_end(buffer: bytearray, start: int, limit: int) -> int:
    """Where llhttp may be fed up to: past the first LF followed by CRLF or LF that ends after `start` (no head
    can end before), else the buffer's end; `limit` at most (a head longer than that is refused anyway)."""
    crlf = buffer.find(b"\n\r\n", max(start - 2, 0), limit + 3)
    end = crlf + 3 if crlf >= 0 else min(len(buffer), limit)
    lf = buffer.find(b"\n\n", max(start - 1, 0), end)  # only before: not through the body
    return lf + 2 if lf >= 0 else end


def _path(target: bytes) -> str:
    """The decoded path of an origin-form target ("/v1/models?x") or an absolute-form one
    ("http://host/v1/models"), whose authority the server ignores (RFC 9112 3.2.2)."""
    text = target.decode("latin-1")
    if text.startswith("/"):
        return unquote(text.partition("?")[0])
    parts = urlsplit(text)
    if parts.scheme.lower() in ("http", "https") and parts.netloc:
        return unquote(parts.path or "/")
    raise Refused(400, "bad_request", f"The request target is not a path or an http URL: {text[:100]!r}.")
