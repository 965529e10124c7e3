"""spec.drafter.learning at the front: a sample of completed requests written to the samples' directory
(specdec.drafter.samples' JSON Lines), the draft's training data.

A request is drawn at the sampling rate when it starts, unless it carries the opt-out header; a drawn one is
recorded only when its answer completed (200, a whole answer or a stream that ended well). The record (the
prompt as the model saw it, the target's answer, the traffic-class header's value) is handed to one writer
thread through a bounded queue, so the request never waits for the claim's storage; a full queue drops the
sample. The thread appends to this pod's current file (`samples-<pod>-<start>.jsonl`, a new one every
ROTATE_SECONDS at most, so retention frees whole files) and, every SCAN_SECONDS, accounts the directory's samples
files (all pods') and deletes those older than the retention. Past the byte budget nothing more is written
until retention frees room. A sample not captured is counted by reason in specdec_drafter_dropped_total, and a
failure is logged without the request's text; the client's answer is never touched.

The prompt: a completion request's prompt as sent; a chat request's messages rendered with the model's own chat
template (specdec.runtime.chat, as trtllm-serve renders them with transformers' apply_chat_template).
"""

from __future__ import annotations

import logging
import os
import queue
import random
import re
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from prometheus_client import CollectorRegistry, Counter, Gauge

from specdec.api.drafter import FrontCapture
from specdec.drafter.samples import Sample, dump, parse
from specdec.runtime.chat import Tokenizer

log = logging.getLogger("specdec.runtime")

SCAN_SECONDS = 15.0  # the operator's scrape interval: the directory's totals are at most this old
ROTATE_SECONDS = 3600.0  # a file is written to for at most this long (or a quarter of the retention)
QUEUE_SAMPLES = 1024  # records waiting for the writer; more are dropped (reason backlog)
MAX_CLASSES = 32  # distinct traffic classes counted; a request naming one more is dropped (reason classes)
CLASS_VALUE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
FILE_NAME = re.compile(r"samples-[A-Za-z0-9.-]+-[0-9]+\.jsonl")  # the front's own files: nothing else is deleted
CHAT = "/v1/chat/completions"
DROP_REASONS = ("opted_out", "budget", "backlog", "classes", "bad_class", "unsupported", "error")


class DrafterMetrics:
    def __init__(self, registry: CollectorRegistry):
        self.captured = Counter(
            "specdec_drafter_captured_total", "Samples this pod wrote, by traffic class.", ["class"], registry=registry
        )
        self.dropped = Counter(
            "specdec_drafter_dropped_total",
            "Drawn requests not captured, by reason: " + ", ".join(DROP_REASONS) + ".",
            ["reason"],
            registry=registry,
        )
        self.samples = Gauge(
            "specdec_drafter_samples",
            "Samples the directory holds (every pod's files), by traffic class.",
            ["class"],
            registry=registry,
        )
        self.bytes = Gauge(
            "specdec_drafter_bytes", "Bytes of those samples, by traffic class.", ["class"], registry=registry
        )
        self.files = Gauge("specdec_drafter_files", "Samples files in the directory.", registry=registry)
        for reason in DROP_REASONS:
            self.dropped.labels(reason)


@dataclass
class _FileCount:
    size: int = 0  # bytes read so far
    mtime: float = 0.0
    by_class: dict[str, tuple[int, int]] = field(default_factory=dict)  # class -> (samples, bytes)


@dataclass(frozen=True)
class Totals:
    files: int
    bytes: int
    by_class: dict[str, tuple[int, int]]


def count_lines(data: bytes, into: dict[str, tuple[int, int]]) -> None:
    """Adds the samples of whole lines in `data` to `into`, per class ('' for none)."""
    for line in data.splitlines(keepends=True):
        sample = parse(line.decode("utf-8", errors="replace"))
        if sample is None:
            continue
        key = sample.traffic_class or ""
        samples, size = into.get(key, (0, 0))
        into[key] = (samples + 1, size + len(line))


class SamplesDirectory:
    """The samples files of one directory, counted incrementally (each file's new whole lines only) and kept
    within the retention. Not thread-safe: the writer thread owns it."""

    def __init__(self, directory: Path, retention_seconds: float, clock: Callable[[], float] = time.time):
        self.directory = directory
        self.retention = retention_seconds
        self.clock = clock
        self._files: dict[str, _FileCount] = {}

    def scan(self, keep: str | None = None) -> Totals:
        """Deletes the front's files older than the retention (`keep`, the file being written, too once it is
        older: nothing was written to it for that long), then counts what is left."""
        now = self.clock()
        seen: set[str] = set()
        for entry in os.scandir(self.directory):
            if not FILE_NAME.fullmatch(entry.name) or not entry.is_file():
                continue
            stat = entry.stat()
            if now - stat.st_mtime > self.retention:
                try:
                    os.unlink(entry.path)
                except FileNotFoundError:  # another pod's front deleted it first
                    pass
                continue
            seen.add(entry.name)
            known = self._files.setdefault(entry.name, _FileCount())
            if stat.st_size > known.size:
                with open(entry.path, "rb") as stream:
                    stream.seek(known.size)
                    data = stream.read(stat.st_size - known.size)
                whole = data[: data.rfind(b"\n") + 1]  # a line still being written is read next time
                count_lines(whole, known.by_class)
                known.size += len(whole)
            known.mtime = stat.st_mtime
        self._files = {name: count for name, count in self._files.items() if name in seen}
        by_class: dict[str, tuple[int, int]] = {}
        for count in self._files.values():
            for key, (samples, size) in count.by_class.items():
                before = by_class.get(key, (0, 0))
                by_class[key] = (before[0] + samples, before[1] + size)
        return Totals(len(self._files), sum(c.size for c in self._files.values()), by_class)


class DrafterCapture:
    """Draws, records and writes samples; `start` before the first request, `stop` after the last."""

    def __init__(
        self,
        config: FrontCapture,
        registry: CollectorRegistry,
        tokenizer: Tokenizer,
        *,
        pod: str | None = None,
        draw: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.time,
        scan_seconds: float = SCAN_SECONDS,
    ):
        self.config = config
        self.metrics = DrafterMetrics(registry)
        self.tokenizer = tokenizer
        self.pod = re.sub(r"[^A-Za-z0-9.-]", "-", pod or socket.gethostname())
        self.draw = draw
        self.clock = clock
        self.scan_seconds = scan_seconds
        self.opt_out = config.opt_out_header.lower().encode()
        self.class_header = config.traffic_class_header.lower().encode()
        self.rotate_seconds = min(ROTATE_SECONDS, config.retention_seconds / 4)
        self._queue: queue.Queue[Sample | None] = queue.Queue(QUEUE_SAMPLES)
        self._thread: threading.Thread | None = None
        self._classes: set[str] = set()
        # the writer thread's own
        self._directory = SamplesDirectory(Path(config.directory), config.retention_seconds, clock)
        self._file: Any = None
        self._file_name: str | None = None
        self._file_started = 0.0
        self._used = 0  # the directory's bytes: the last scan's, plus what this pod wrote since
        self._scanned_at: float | None = None
        self._gauge_classes: set[str] = set()

    # --- the event loop's side ------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._write_loop, name="drafter-capture", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=10)

    def drawn(self, endpoint: str, body: Mapping[str, Any], fields: Mapping[bytes, bytes]) -> PendingSample | None:
        """The request's sample to complete when its answer has, or None: not drawn, opted out, or not one the
        front can record (counted). Never raises: a fault here is a dropped sample, not a failed request."""
        try:
            return self._drawn(endpoint, body, fields)
        except Exception:  # noqa: BLE001 - see above
            log.exception("drafter capture: drawing a %s request failed; sample dropped", endpoint)
            self.metrics.dropped.labels("error").inc()
            return None

    def _drawn(self, endpoint: str, body: Mapping[str, Any], fields: Mapping[bytes, bytes]) -> PendingSample | None:
        if self.config.sample_rate <= 0 or self.draw() >= self.config.sample_rate:
            return None
        if self.opt_out in fields:
            self.metrics.dropped.labels("opted_out").inc()
            return None
        known, traffic_class = self._class_of(fields.get(self.class_header))
        if not known:
            return None
        try:
            prompt = self._prompt(endpoint, body)
        except Exception:  # noqa: BLE001 - the template or the request's shape: the sample is dropped, not the request
            log.warning("drafter capture: no prompt for a %s request (template or shape); sample dropped", endpoint)
            prompt = None
        if prompt is None:
            self.metrics.dropped.labels("unsupported").inc()
            return None
        return PendingSample(self, endpoint == CHAT, prompt, traffic_class)

    def _class_of(self, value: bytes | None) -> tuple[bool, str | None]:
        """(whether the request may be recorded, its traffic class); a value that cannot be a class is counted."""
        if not value:
            return True, None
        text = value.decode("latin-1")
        if not CLASS_VALUE.fullmatch(text):
            self.metrics.dropped.labels("bad_class").inc()
            return False, None
        if text not in self._classes:
            if len(self._classes) >= MAX_CLASSES:
                self.metrics.dropped.labels("classes").inc()
                return False, None
            self._classes.add(text)
        return True, text

    def _prompt(self, endpoint: str, body: Mapping[str, Any]) -> str | None:
        if endpoint == CHAT:
            messages = body.get("messages")
            return self.tokenizer.chat_prompt(messages) if isinstance(messages, list) else None
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1:
            prompt = prompt[0]
        return prompt if isinstance(prompt, str) else None  # token ids or several prompts: not recorded

    def record(self, sample: Sample) -> None:
        try:
            self._queue.put_nowait(sample)
        except queue.Full:
            self.metrics.dropped.labels("backlog").inc()

    # --- the writer thread ------------------------------------------------------------------------------------

    def _write_loop(self) -> None:
        """Writes the queued samples, and scans the directory every scan_seconds, until `stop`."""
        while True:
            sample: Sample | None = None
            try:
                sample = self._queue.get(timeout=self._until_scan())
                if sample is None:
                    self._close()
                    return
            except queue.Empty:
                pass  # no sample: time to scan
            try:
                if self._scanned_at is None or self.clock() - self._scanned_at >= self.scan_seconds:
                    self._scan()
                if sample is not None:
                    self._write(sample)
            except Exception:  # noqa: BLE001 - storage failures: counted and logged, the thread writes on
                log.exception("drafter capture: the samples directory failed")
                if sample is not None:
                    self.metrics.dropped.labels("error").inc()
                self._close()

    def _until_scan(self) -> float:
        if self._scanned_at is None:
            return 0.0
        return max(0.0, self.scan_seconds - (self.clock() - self._scanned_at))

    def _scan(self) -> None:
        self._scanned_at = self.clock()
        directory = Path(self.config.directory)
        directory.mkdir(parents=True, exist_ok=True)
        totals = self._directory.scan()
        if self._file_name is not None and not (directory / self._file_name).exists():
            self._close()  # retention deleted it
        self._used = totals.bytes
        self.metrics.files.set(totals.files)
        self._gauge_classes |= set(totals.by_class)  # a class whose files retention deleted shows 0
        for key in self._gauge_classes:
            samples, size = totals.by_class.get(key, (0, 0))
            self.metrics.samples.labels(key).set(samples)
            self.metrics.bytes.labels(key).set(size)

    def _write(self, sample: Sample) -> None:
        line = dump(sample).encode()
        if self._used + len(line) > self.config.max_bytes:
            self.metrics.dropped.labels("budget").inc()
            return
        now = self.clock()
        if self._file is None or now - self._file_started >= self.rotate_seconds:
            self._close()
            self._file_name = f"samples-{self.pod}-{int(now * 1000)}.jsonl"
            self._file = open(Path(self.config.directory) / self._file_name, "ab")  # noqa: SIM115 - kept open
            self._file_started = now
        self._file.write(line)
        self._file.flush()  # a whole line on storage: the scan and the replay read complete lines
        self._used += len(line)
        self.metrics.captured.labels(sample.traffic_class or "").inc()

    def _close(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass
        self._file = self._file_name = None


class PendingSample:
    """A drawn request's sample, completed from its answer: `answer` for a whole one, `chunk` for each piece of
    a stream and `ended` when it ended well. Each catches its own failures: the client's answer is never touched."""

    def __init__(self, capture: DrafterCapture, chat: bool, prompt: str, traffic_class: str | None):
        self.capture, self.chat, self.prompt, self.traffic_class = capture, chat, prompt, traffic_class
        self.pieces: list[bytes] = []

    def answer(self, data: Any) -> None:
        self._guarded(lambda: _answer_text(data, self.chat))

    def chunk(self, data: bytes) -> None:
        self.pieces.append(data)

    def ended(self) -> None:
        self._guarded(lambda: _stream_text(b"".join(self.pieces), self.chat))

    def _guarded(self, text: Callable[[], str | None]) -> None:
        try:
            completion = text()
        except Exception:  # noqa: BLE001 - an answer of a shape not known: dropped, never the client's problem
            log.warning("drafter capture: the answer's text could not be read; sample dropped")
            completion = None
        if completion is None:
            self.capture.metrics.dropped.labels("unsupported").inc()
            return
        self.capture.record(Sample(self.prompt, completion, self.traffic_class, self.capture.clock()))


def _answer_text(data: Any, chat: bool) -> str | None:
    """The first choice's text of a whole OpenAI answer."""
    choices = data.get("choices") if isinstance(data, dict) else None
    if not choices or not isinstance(choices[0], dict):
        return None
    choice = choices[0]
    text = (choice.get("message") or {}).get("content") if chat else choice.get("text")
    return text if isinstance(text, str) else None


def _stream_text(events: bytes, chat: bool) -> str | None:
    """The first choice's text of an OpenAI event stream, its pieces joined."""
    parts: list[str] = []
    for line in events.split(b"\n"):
        if not line.startswith(b"data: {"):
            continue
        chunk = orjson.loads(line[6:])
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            piece = (choice.get("delta") or {}).get("content") if chat else choice.get("text")
            if isinstance(piece, str):
                parts.append(piece)
    return "".join(parts)
