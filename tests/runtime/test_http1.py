"""HTTP/1.1 as the front's backend client reads it (specdec.runtime.http1): response heads and body framings,
whatever the reads' boundaries."""

from __future__ import annotations

import pytest

from specdec.runtime.http1 import (
    Chunked,
    ProtocolError,
    Sized,
    UntilClose,
    body_framing,
    keeps_alive,
    parse_head,
    request_head,
)


def chunked(*pieces: bytes, ext: bytes = b"", trailer: bytes = b"") -> bytes:
    return b"".join(b"%x%s\r\n%s\r\n" % (len(p), ext, p) for p in pieces) + b"0\r\n" + trailer + b"\r\n"


def decode(body, reads: list[bytes]) -> bytes:
    return b"".join(body.feed(read) for read in reads)


def test_a_request_head_names_the_host_and_the_length():
    head = request_head("POST", "127.0.0.1:8001", "/v1/completions", {"Content-Type": "application/json"}, 12)
    assert head == (
        b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:8001\r\nContent-Type: application/json\r\n"
        b"Content-Length: 12\r\n\r\n"
    )


def test_a_response_head_gives_status_and_headers_by_lower_case_name():
    status, headers = parse_head(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nX-A: 1\r\nx-a:  2 ")
    assert status == 200 and headers == {"content-type": "text/event-stream", "x-a": "1, 2"}
    assert keeps_alive(headers) and not keeps_alive({"connection": "Close"})
    assert parse_head(b"HTTP/1.0 404 Not Found")[0] == 404


@pytest.mark.parametrize(
    "head", [b"ICY 200 OK", b"HTTP/1.1 2x0 OK", b"HTTP/1.1 200 OK\r\nno colon", b"HTTP/1.1 200 OK\r\n folded: value"]
)
def test_what_is_not_a_response_head_is_refused(head):
    with pytest.raises(ProtocolError):
        parse_head(head)


def test_the_framing_follows_the_headers():
    assert isinstance(body_framing(200, {"transfer-encoding": "chunked"}), Chunked)
    assert isinstance(body_framing(200, {"content-length": "5"}), Sized)
    assert isinstance(body_framing(200, {}), UntilClose)
    assert body_framing(204, {"content-length": "5"}).done
    with pytest.raises(ProtocolError):
        body_framing(200, {"content-length": "-1"})


def test_a_chunked_body_split_anywhere_decodes_to_its_data():
    data = chunked(b'data: {"a": 1}\n\n', b"x" * 300, b"\r\n", ext=b";name=value", trailer=b"X-T: 1\r\n")
    expected = b'data: {"a": 1}\n\n' + b"x" * 300 + b"\r\n"
    for cut in range(1, len(data)):
        body = Chunked()
        assert decode(body, [data[:cut], data[cut:]]) == expected and body.done, cut
    body = Chunked()
    assert decode(body, [data[i : i + 1] for i in range(len(data))]) == expected and body.done


def test_a_read_of_one_whole_chunk_and_of_several_decode_alike():
    body = Chunked()
    assert body.feed(b"5\r\nhello\r\n") == b"hello" and not body.done  # the one-chunk read
    assert body.feed(b"1\r\n,\r\n6\r\n world\r\n") == b", world"
    assert body.feed(b"0\r\n\r\n") == b"" and body.done and body.eof()


@pytest.mark.parametrize("data", [b"zz\r\nab\r\n", b"-2\r\nab\r\n", b"2\r\nabc\r\n", b"0\r\n\r\nmore"])
def test_a_broken_chunked_body_is_refused(data):
    with pytest.raises(ProtocolError):
        Chunked().feed(data)


def test_a_chunked_body_cut_short_is_not_complete():
    body = Chunked()
    body.feed(b"5\r\nhel")
    assert not body.eof()


def test_a_sized_body_ends_at_its_length_and_an_open_ended_one_at_the_connections_end():
    sized = Sized(5)
    assert decode(sized, [b"he", b"llo"]) == b"hello" and sized.done
    with pytest.raises(ProtocolError):
        Sized(2).feed(b"abc")
    short = Sized(5)
    short.feed(b"he")
    assert not short.eof()
    until_close = UntilClose()
    assert until_close.feed(b"abc") == b"abc" and not until_close.done
    assert until_close.eof() and until_close.done
