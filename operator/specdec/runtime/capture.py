"""What the capture directory of a saveState runtime holds: its `<file_prefix>_<n>.pt` files, their bytes, and the
requests and token ids in them (specdec.runtime.capture_file).

The directory is scanned when the front's /metrics is read, at most once per `min_interval` seconds, in a
thread (a claim on network storage may answer slowly) that concurrent reads share and a read that gives up does
not cancel; each file is opened once per size and modification time, so a scan of an unchanged directory costs
one listing. A directory that cannot be listed keeps the last totals (and is logged). A file that cannot be read
(one TensorRT-LLM is still writing, whose time then moves on, or one of another format) counts in files and bytes,
not in tokens, and is logged once.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specdec.runtime.capture_file import UnreadableCapture, captured_tokens

log = logging.getLogger("specdec.runtime")

SCAN_SECONDS = 15.0  # Prometheus' and the operator's scrape interval: a scan per scrape at most


@dataclass(frozen=True)
class CaptureTotals:
    files: int = 0
    bytes: int = 0
    requests: int = 0
    tokens: int = 0
    unreadable: int = 0
    last_write: float | None = None  # the newest file's modification time (Unix seconds)


class CaptureDirectory:
    def __init__(
        self,
        directory: str | Path,
        file_prefix: str,
        *,
        min_interval: float = SCAN_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.directory = Path(directory)
        self.pattern = re.compile(re.escape(file_prefix) + r"_[0-9]+\.pt")
        self.min_interval = min_interval
        self.clock = clock
        self.totals = CaptureTotals()
        self._read: dict[str, tuple[tuple[int, int], tuple[int, int] | None]] = {}  # name -> (size, mtime), counts
        self._scanned_at: float | None = None
        self._scan: asyncio.Future | None = None

    async def current(self) -> CaptureTotals:
        """The totals, scanned again when the last scan started min_interval ago or more."""
        now = self.clock()
        if self._scan is None and (self._scanned_at is None or now - self._scanned_at >= self.min_interval):
            self._scanned_at = now
            self._scan = asyncio.ensure_future(asyncio.to_thread(self.scan))
            self._scan.add_done_callback(self._scanned)
        if self._scan is not None:
            await asyncio.shield(self._scan)
        return self.totals

    def _scanned(self, scan: asyncio.Future) -> None:
        self._scan = None
        if not scan.cancelled():
            self.totals = scan.result()

    def scan(self) -> CaptureTotals:
        files = size = requests = tokens = unreadable = 0
        newest: int | None = None
        read: dict[str, tuple[tuple[int, int], tuple[int, int] | None]] = {}
        try:
            entries = list(os.scandir(self.directory))
        except FileNotFoundError:
            entries = []  # TensorRT-LLM creates it when it starts
        except OSError as error:
            log.warning("cannot list the capture directory %s: %s", self.directory, error)
            return self.totals
        for entry in entries:
            if not self.pattern.fullmatch(entry.name) or not entry.is_file(follow_symlinks=False):
                continue
            try:
                stat = entry.stat(follow_symlinks=False)
            except OSError:
                continue  # moved away meanwhile
            key = (stat.st_size, stat.st_mtime_ns)
            known = self._read.get(entry.name)
            counts = known[1] if known and known[0] == key else self._counts(Path(entry.path))
            read[entry.name] = (key, counts)
            files += 1
            size += stat.st_size
            newest = max(newest or 0, stat.st_mtime_ns)
            if counts is None:
                unreadable += 1
            else:
                requests, tokens = requests + counts[0], tokens + counts[1]
        self._read = read
        return CaptureTotals(files, size, requests, tokens, unreadable, newest / 1e9 if newest is not None else None)

    @staticmethod
    def _counts(path: Path) -> tuple[int, int] | None:
        try:
            return captured_tokens(path)
        except UnreadableCapture as error:
            log.warning("capture file not counted in tokens: %s", error)
            return None
