"""The samples files' reader and writer: round trip, and bad lines skipped and counted, never fatal."""

from __future__ import annotations

from pathlib import Path

import pytest

from specdec.drafter.samples import Sample, dump, parse, read_samples, write_sample, write_samples


def test_samples_round_trip_through_files(tmp_path: Path) -> None:
    written = [Sample("<s>user: hi\n", "hello ü", "a", 1.5), Sample("p", "c", None, 2.0)]
    size = write_samples(tmp_path / "one.jsonl", written[:1])
    (tmp_path / "sub").mkdir()
    with (tmp_path / "sub" / "two.jsonl").open("w", encoding="utf-8") as stream:
        size += write_sample(stream, written[1])
    assert size == sum(p.stat().st_size for p in tmp_path.rglob("*.jsonl"))
    assert read_samples(tmp_path) == (written, 0)
    assert read_samples(tmp_path, "a") == (written[:1], 0)
    assert written[0].text == "<s>user: hi\nhello ü"


def test_bad_lines_are_skipped_and_counted(tmp_path: Path) -> None:
    good = dump(Sample("p", "c", "b", 3.0))
    lines = [
        good,
        "not json\n",
        "[1, 2]\n",
        '{"prompt": "p"}\n',
        '{"prompt": 1, "completion": "c"}\n',
        '{"prompt": "p", "completion": "c", "trafficClass": 7}\n',
        '{"prompt": "p", "completion": "c", "capturedAt": "now"}\n',
        "\n",
        '{"prompt": "p", "completion": "c"',  # a line cut short by a restart
    ]
    (tmp_path / "s.jsonl").write_text("".join(lines), encoding="utf-8")
    (tmp_path / "ignored.txt").write_text(good, encoding="utf-8")
    samples, skipped = read_samples(tmp_path)
    assert samples == [Sample("p", "c", "b", 3.0)]
    assert skipped == 7
    assert parse('{"prompt": "p", "completion": ""}') == Sample("p", "", None, 0.0)


def test_a_missing_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_samples(tmp_path / "absent")
