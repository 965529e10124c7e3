"""Captured conversations, the drafter's training data: JSON Lines files `*.jsonl` under a directory.

One object a line: {"prompt": the prompt as the model saw it (chat template applied), "completion": the
target's answer, "trafficClass": the class the request named or null, "capturedAt": unix seconds}. The front
appends them (write_sample), the replay and the trainer read them (read_samples). A line that is not JSON or
lacks a string prompt/completion is skipped and counted, never fatal: a capture cut short by a restart loses
one line, not the file. Pure standard library, so the runtime front (no torch) imports it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any


@dataclass(frozen=True)
class Sample:
    prompt: str
    completion: str
    traffic_class: str | None = None
    captured_at: float = 0.0

    @property
    def text(self) -> str:
        """The conversation as one prompt: what the replay sends to the capture server."""
        return self.prompt + self.completion


def dump(sample: Sample) -> str:
    """One line of a samples file (with its newline)."""
    record = {
        "prompt": sample.prompt,
        "completion": sample.completion,
        "trafficClass": sample.traffic_class,
        "capturedAt": sample.captured_at,
    }
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"


def write_sample(stream: IO[str], sample: Sample) -> int:
    """Appends one sample to an open text stream; returns the bytes written (UTF-8), for a byte budget."""
    line = dump(sample)
    stream.write(line)
    return len(line.encode())


def write_samples(path: Path, samples: Iterable[Sample]) -> int:
    """Writes samples to a new file at path; returns the bytes written."""
    with path.open("w", encoding="utf-8") as stream:
        return sum(write_sample(stream, s) for s in samples)


def parse(line: str) -> Sample | None:
    """The sample a line holds, or None for a line that is not one (bad JSON, missing or mistyped fields)."""
    try:
        record: Any = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    prompt, completion = record.get("prompt"), record.get("completion")
    if not isinstance(prompt, str) or not isinstance(completion, str):
        return None
    traffic_class = record.get("trafficClass")
    captured_at = record.get("capturedAt", 0.0)
    if traffic_class is not None and not isinstance(traffic_class, str):
        return None
    if isinstance(captured_at, bool) or not isinstance(captured_at, int | float) or not math.isfinite(captured_at):
        return None
    return Sample(prompt, completion, traffic_class, float(captured_at))


def read_samples(directory: Path | str, traffic_class: str | None = None) -> tuple[list[Sample], int]:
    """Every sample of the `*.jsonl` files under directory (recursively, in path order) and how many lines
    were skipped; with traffic_class, only that class's samples (the others are not counted as skipped).
    Blank lines are neither samples nor skipped. A directory that does not exist is an error."""
    root = Path(directory)
    if not root.is_dir():
        raise FileNotFoundError(f"samples directory {root} does not exist")
    samples: list[Sample] = []
    skipped = 0
    for path in sorted(root.rglob("*.jsonl")):
        with path.open(encoding="utf-8", errors="replace") as stream:
            for line in stream:
                if not line.strip():
                    continue
                sample = parse(line)
                if sample is None:
                    skipped += 1
                elif traffic_class is None or sample.traffic_class == traffic_class:
                    samples.append(sample)
    return samples, skipped
