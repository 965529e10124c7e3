"""The front's request heads (specdec.runtime.request_head) against two other parsers, property-based: h11 and
llhttp given the whole stream at once (the front feeds llhttp one head at a time, in the pieces that arrive).
Whatever head the front reads, both read too, with the same method, target and body framing; the front refuses
more than h11 does (bare LF, a Host of its own rules), never less."""

from __future__ import annotations

import h11
import httptools
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specdec.runtime.request_head import HeadReader, Refused, RequestHead

NEXT = b"GET /next HTTP/1.1\r\nHost: x\r\n\r\n"  # the request after: where each parser sees the first one end
BODY = b"0123456789" * 3
# Bounded: a few hundred heads per property, the same ones on every run.
EXAMPLES = settings(max_examples=500, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])

ODD = [
    b"\x00",
    b"\x01",
    b"\x0b",
    b"\x0c",
    b"\x7f",
    b"\x85",
    b"\xa0",
    b"\xb2",
    b" ",
    b"\t",
    b"\r",
    b"\n",
    b",",
    b"+",
    b"-",
    b"_",
    b";",
]


def mostly(good: list[bytes], bad: list[bytes]) -> st.SearchStrategy[bytes]:
    """One of `good` most of the time, else one of `bad`: heads that are mostly well-formed, with a flaw."""
    return st.sampled_from(good * (6 * len(bad) // len(good) + 4) + bad)


methods = mostly([b"GET", b"POST", b"HEAD"], [b"PUT", b"OPTIONS", b"get", b"G ET", b"PRI", b""])
targets = mostly(
    [b"/", b"/v1/completions", b"/v1/models?x=1", b"http://h:1/health"],
    [b"*", b"h:1", b"", b"/a b", b"/a%20b", b"//x", b"/\xff"],
)
versions = mostly([b"HTTP/1.1", b"HTTP/1.0"], [b"HTTP/2.0", b"HTTP/1.2", b"HTTP/1", b"http/1.1", b"HTTP/1.1 "])
names = mostly(
    [b"Content-Length", b"X-A", b"Connection", b"Expect"],
    [b"Host", b"Transfer-Encoding", b"content-length", b"Host ", b" Host", b"X\x00A", b"X A", b"X:A", b""],
)
values = st.one_of(
    *[
        mostly(
            [b"x", b"3", b"30", b"0", b"close", b"keep-alive", b"100-continue"],
            [b"chunked", b"3, 3", b"-1", b"+3", b"0x1e", b"1" * 25, b"", b"gzip, chunked", b"identity"],
        )
    ]
    * 4,
    st.binary(max_size=6),
)
line_ends = mostly([b"\r\n"], [b"\n", b"\r", b"\r\r\n"])
pads = mostly([b"", b" "], [b"\t", b"  ", *ODD[:8]])


@st.composite
def heads(draw: st.DrawFn) -> bytes:
    """A request head, mostly well-formed, with some of the ways heads go wrong."""
    end = draw(line_ends)
    line = draw(methods) + draw(mostly([b" "], [b"  ", b"\t"])) + draw(targets) + b" " + draw(versions)
    fields = [b"Host: x"] if draw(st.integers(0, 5)) else []
    for _ in range(draw(st.integers(0, 3))):
        fields.append(
            draw(names) + draw(mostly([b": ", b":"], [b" :", b":\t"])) + draw(pads) + draw(values) + draw(pads)
        )
    fields = draw(st.permutations(fields))
    head = end.join([line, *fields]) + end + draw(mostly([b"\r\n"], [b"\n"]))
    if not draw(st.integers(0, 3)):  # one odd byte somewhere
        at = draw(st.integers(0, len(head)))
        head = head[:at] + draw(st.sampled_from(ODD)) + head[at:]
    return head


def front(stream: bytes, pieces: list[int]) -> tuple[RequestHead, int] | None:
    """The front's reading of the stream's first head, the stream arriving in pieces; None when refused."""
    reader, buffer = HeadReader(max_fields=100, max_bytes=32 * 1024), bytearray()
    try:
        for size in [*pieces, len(stream)]:
            buffer += stream[len(buffer) : len(buffer) + size]
            read = reader.read(buffer)
            if read is not None:
                return read
    except Refused:
        return None
    raise AssertionError("the whole stream arrived and the front neither read a head nor refused one")


def h11_reading(stream: bytes) -> tuple[bytes, bytes, int, bool] | None:
    """(method, target, body bytes, chunked) of h11's first request, None when h11 refuses it."""
    connection = h11.Connection(h11.SERVER)
    connection.receive_data(stream)
    try:
        request = connection.next_event()
        if not isinstance(request, h11.Request):
            return None
        body = 0
        while not isinstance(event := connection.next_event(), h11.EndOfMessage):
            if not isinstance(event, h11.Data):
                return None
            body += len(event.data)
    except h11.RemoteProtocolError:
        return None
    chunked = any(name == b"transfer-encoding" for name, _ in request.headers)
    return request.method, request.target, body, chunked


class Whole:
    """llhttp given the whole stream: the first message's parts."""

    def __init__(self) -> None:
        self.url, self.body, self.complete = b"", 0, False

    def on_url(self, url: bytes) -> None:
        if not self.complete:
            self.url += url

    def on_body(self, body: bytes) -> None:
        if not self.complete:
            self.body += len(body)

    def on_message_complete(self) -> None:
        self.complete = True


def llhttp_reading(stream: bytes) -> tuple[bytes, bytes, int] | None:
    whole = Whole()
    parser = httptools.HttpRequestParser(whole)
    try:
        parser.feed_data(stream)
    except httptools.HttpParserError:
        if not whole.complete:
            return None
    return (parser.get_method(), whole.url, whole.body) if whole.complete else None


@EXAMPLES
@given(head=heads(), pieces=st.lists(st.integers(1, 40), max_size=6))
def test_a_head_the_front_reads_is_read_alike_by_h11_and_by_llhttp_given_the_whole_stream(head, pieces):
    stream = head + BODY + NEXT
    read = front(stream, pieces)
    if read is None:
        return
    got, size = read
    assert not got.chunked or not got.has_length  # llhttp refuses both
    theirs = h11_reading(stream)
    assert theirs is not None, f"h11 refuses a head the front reads: {head!r}"
    method, target, body, chunked = theirs
    assert got.method.encode() == method and got.chunked == chunked
    if not chunked:  # the front refuses a chunked body (411) before reading any of it
        assert got.length == body
        assert stream[size + got.length :] == BODY[got.length :] + NEXT  # the head ends where h11's did
        assert llhttp_reading(stream) == (method, target, body)


@EXAMPLES
@given(head=heads(), pieces=st.lists(st.integers(1, 40), max_size=6))
def test_the_front_reads_a_head_in_pieces_as_it_reads_it_whole(head, pieces):
    """The front feeds llhttp what has arrived up to where a head may end: the pieces change nothing."""
    stream = head + BODY + NEXT
    assert front(stream, pieces) == front(stream, [])
