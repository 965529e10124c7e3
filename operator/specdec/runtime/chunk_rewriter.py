"""trtllm-serve's server-sent events rewritten for the front's client, as bytes (pure: no I/O).

The served model's name goes into each chunk by a byte substitution, and only the chunks that must change are
parsed: the usage chunk (the front always asks trtllm-serve for one, to count tokens; it reaches the client
only when the client asked for it too) and anything the byte path does not recognise. As OpenAI streams,
every chunk says `usage: null` when the client asked for usage, and no chunk names it otherwise.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

# A key can only be a JSON string followed by a colon: a string value never is, and quotes inside strings
# are escaped, so these match the chunk's own `model` and `usage` keys and nothing in generated text.
MODEL_FIELD = re.compile(rb'"model"\s*:\s*"(?:[^"\\]|\\.)*"')
USAGE_KEY = b'"usage"'
NULL_USAGE = re.compile(rb',\s*"usage"\s*:\s*null')
DONE = b"data: [DONE]\n\n"


class ChunkRewriter:
    """trtllm-serve's SSE bytes in, the client's SSE bytes out (pure: no I/O).

    `usage` is the usage chunk's, once it has passed. A chunk the byte path does not recognise is parsed and
    rewritten as a whole (or passed on as it is when it is not JSON)."""

    def __init__(self, model: str, client_usage: bool):
        self.model = model
        self.model_field = b'"model":' + orjson.dumps(model)
        self.client_usage = client_usage
        self.usage: Any = None
        self.pending = b""
        self.upstream_field = b""  # trtllm-serve's own `"model": "..."`, as the first chunk spelled it

    def feed(self, data: bytes) -> bytes:
        """The complete events of what arrived so far, rewritten; a partial event waits for its rest."""
        field = self.upstream_field
        # What a token's read usually holds: one event, one JSON data line, no usage, the model named as in the
        # first chunk: the name replaced in one pass. (`find`, not `in`: on bytes, `in` first tries the needle
        # as an integer and formats the error.)
        if (
            field
            and not self.pending
            and data.endswith(b"}\n\n")
            and data.startswith(b"data: {")
            and data.find(b"\n") == len(data) - 2
            and data.find(USAGE_KEY) < 0
            and data.find(field) > 0
        ):
            data = data.replace(field, self.model_field, 1)
            return data[:-3] + b',"usage":null}\n\n' if self.client_usage else data
        data = self.pending + data
        if data.find(b"\r") >= 0:
            data = data.replace(b"\r\n", b"\n")
        end = data.rfind(b"\n\n")
        if end < 0:
            self.pending = data
            return b""
        self.pending = data[end + 2 :]
        events = data[:end].split(b"\n\n")
        if len(events) == 1:  # what a token's read usually holds
            return self._event(events[0])
        return b"".join([self._event(event) for event in events])

    def finish(self) -> bytes:
        """The last event, when the stream ended without a blank line after it."""
        rest, self.pending = self.pending, b""
        return self._event(rest) if rest.strip() else b""

    def _event(self, event: bytes) -> bytes:
        if event.startswith(b"data: {") and event.find(b"\n") < 0:  # one JSON data line: most events
            chunk = self._fast(event[6:].rstrip())
            if chunk is not None:
                return b"data: " + chunk + b"\n\n"
        out = []
        for line in event.split(b"\n"):
            if not line.startswith(b"data:"):
                continue  # comments and other fields: trtllm-serve sends none, OpenAI's clients want none
            payload = line[5:].strip()
            if payload == b"[DONE]":
                out.append(DONE)
                continue
            chunk = self._fast(payload)
            if chunk is None:
                chunk = self._parsed(payload)
            if chunk is not None:
                out.append(b"data: " + chunk + b"\n\n")
        return b"".join(out)

    def _fast(self, payload: bytes) -> bytes | None:
        """A content chunk rewritten without parsing; None when it needs parsing."""
        if not (payload.startswith(b"{") and payload.endswith(b"}")):
            return None
        # trtllm-serve names the same model in every chunk: a plain search for the field the first chunk had
        # finds it in the others (the regular expression costs a third of the rewrite when run on each).
        start = payload.find(self.upstream_field) if self.upstream_field else -1
        if start >= 0:
            end = start + len(self.upstream_field)
        else:
            match = MODEL_FIELD.search(payload)
            if match is None:
                return None
            start, end = match.span()
            self.upstream_field = match.group()
        payload = payload[:start] + self.model_field + payload[end:]
        if payload.find(USAGE_KEY) >= 0:
            if self.client_usage:
                return None
            payload = NULL_USAGE.sub(b"", payload, count=1)
            return None if payload.find(USAGE_KEY) >= 0 else payload
        return payload[:-1] + b',"usage":null}' if self.client_usage else payload

    def _parsed(self, payload: bytes) -> bytes | None:
        try:
            chunk = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return payload
        if not isinstance(chunk, dict):
            return payload
        if chunk.get("usage") and not chunk.get("choices"):
            self.usage = chunk["usage"]
            if not self.client_usage:
                return None
        elif not self.client_usage:
            chunk.pop("usage", None)
        elif "usage" not in chunk:
            chunk["usage"] = None  # OpenAI's chunks say usage: null until the usage chunk
        if "model" in chunk:
            chunk["model"] = self.model
        return orjson.dumps(chunk)
