"""The capture directory's counter (specdec.runtime.capture) and the torch-free reader of TensorRT-LLM's capture
files (specdec.runtime.capture_file), on files laid out as torch.save lays them out, and its gauges on /metrics."""

from __future__ import annotations

import asyncio
import io
import os
import pickle
import subprocess
import sys
import types
import zipfile
from collections import OrderedDict
from pathlib import Path

import pytest

from specdec.runtime import capture as capture_module
from specdec.runtime.capture import CaptureDirectory, CaptureTotals
from specdec.runtime.capture_file import UnreadableCapture, captured_tokens
from specdec.runtime.metrics import RuntimeMetrics
from specdec_dev.hidden_state_writer import HiddenStateCapture, torch_save
from tests.runtime.helpers import parse_prometheus


def pickled_by_python(records: list[dict], torch_module: types.ModuleType) -> bytes:
    """What torch.save's PyTorchPickler makes: Python's own Pickler (protocol 2) with a persistent_id for
    storages and tensors reduced to torch._utils._rebuild_tensor_v2 (torch/_tensor.py), here with stand-in
    torch globals so that the Pickler writes the same opcodes (memo puts, TUPLE1-3) as it does for torch."""

    class Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            if isinstance(obj, torch_module.LongStorage):
                return ("storage", torch_module.LongStorage, obj.key, "cpu", obj.numel)
            return None

    data = io.BytesIO()
    Pickler(data, protocol=2).dump(records)
    return data.getvalue()


@pytest.fixture
def fake_torch(monkeypatch):
    torch = types.ModuleType("torch")
    utils = types.ModuleType("torch._utils")

    class LongStorage:
        def __init__(self, key: str, numel: int):
            self.key, self.numel = key, numel

    def _rebuild_tensor_v2(*args):
        raise AssertionError("never called")

    class Tensor:
        def __init__(self, key: str, size: tuple[int, ...]):
            self.storage, self.size = LongStorage(key, size[0]), size

        def __reduce_ex__(self, proto):
            return (_rebuild_tensor_v2, (self.storage, 0, self.size, (1,), False, OrderedDict()))

    LongStorage.__module__, LongStorage.__qualname__ = "torch", "LongStorage"
    _rebuild_tensor_v2.__module__, _rebuild_tensor_v2.__qualname__ = "torch._utils", "_rebuild_tensor_v2"
    torch.LongStorage, torch._utils, utils._rebuild_tensor_v2, torch.Tensor = (
        LongStorage,
        utils,
        _rebuild_tensor_v2,
        Tensor,
    )
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch._utils", utils)
    return torch


def test_reads_the_pickle_pythons_pickler_makes_for_torch(fake_torch, tmp_path):
    records = [
        {"id": i, "input_ids": fake_torch.Tensor(str(i), (n,)), "hidden_state": fake_torch.Tensor(f"h{i}", (n,))}
        for i, n in ((1, 7), (2, 11), (3, 5))
    ]
    path = tmp_path / "data_3.pt"
    with zipfile.ZipFile(path, "w") as out:
        out.writestr("data_3/data.pkl", pickled_by_python(records, fake_torch))
        out.writestr("data_3/byteorder", "little")
        out.writestr("data_3/version", "3\n")
    assert captured_tokens(path) == (3, 23)


TORCH_WRITTEN = sorted((Path(__file__).parent / "data" / "capture").glob("torch-*/cap_3.pt"))


@pytest.mark.parametrize("path", TORCH_WRITTEN, ids=lambda p: p.parent.name)
def test_reads_a_file_real_torch_wrote_as_tensorrt_llm_does(path):
    """A capture file made by torch.save itself (data/capture/make_capture_file.py: TensorRT-LLM's records of
    three requests of 5, 7 and 3 tokens, bfloat16 states of three layers): counted by the directory scan."""
    assert captured_tokens(path) == (3, 15)
    totals = CaptureDirectory(path.parent, "cap").scan()
    assert (totals.files, totals.bytes, totals.requests, totals.tokens, totals.unreadable) == (
        1,
        path.stat().st_size,
        3,
        15,
        0,
    )


def test_a_file_real_torch_wrote_is_kept_for_the_reader():
    assert TORCH_WRITTEN, "tests/runtime/data/capture/torch-*/cap_3.pt: see make_capture_file.py"


def test_the_stand_in_writes_what_tensorrt_llm_does(tmp_path):
    """A file every write_interval requests, named after the request that completed it, holding those requests."""
    capture = HiddenStateCapture.from_config(
        {
            "decoding_type": "SaveState",
            "output_directory": str(tmp_path / "out"),
            "write_interval": 3,
            "file_prefix": "cap",
        }
    )
    written = [capture.request(n) for n in (4, 5, 6, 7, 8, 9, 10)]
    assert written[:2] == [None, None] and written[3:5] == [None, None] and written[6] is None
    assert [p.name for p in (written[2], written[5])] == ["cap_3.pt", "cap_6.pt"]
    assert captured_tokens(written[2]) == (3, 15) and captured_tokens(written[5]) == (3, 24)
    with zipfile.ZipFile(written[2]) as archive:
        assert {"cap_3/data.pkl", "cap_3/byteorder", "cap_3/version"} <= set(archive.namelist())
        assert archive.read("cap_3/data/0") == b"".join(i.to_bytes(8, "little") for i in range(4))  # input_ids


@pytest.mark.parametrize("content", [b"", b"not a zip", b"PK\x03\x04 cut short"])
def test_a_partial_or_foreign_file_is_unreadable(tmp_path, content):
    path = tmp_path / "data_20.pt"
    path.write_bytes(content)
    with pytest.raises(UnreadableCapture):
        captured_tokens(path)


def test_a_pickle_naming_anything_else_is_refused_without_running_it(tmp_path):
    path = tmp_path / "data_20.pt"
    with zipfile.ZipFile(path, "w") as out:
        out.writestr("data_20/data.pkl", b"\x80\x02cos\nsystem\nX\x04\x00\x00\x00trueR.")
    with pytest.raises(UnreadableCapture, match="os.system is not part of a hidden-state capture file"):
        captured_tokens(path)


def test_records_without_input_ids_are_unreadable(tmp_path):
    path = tmp_path / "data_1.pt"
    torch_save([{"id": 1}], path)
    with pytest.raises(UnreadableCapture, match="without 1-D input_ids"):
        captured_tokens(path)


def test_the_directory_counts_its_files_and_reads_each_once(tmp_path, monkeypatch):
    capture = HiddenStateCapture.from_config({"output_directory": str(tmp_path), "write_interval": 2})
    for n in (3, 4, 5, 6):
        capture.request(n)
    (tmp_path / "notes.txt").write_text("not counted")
    (tmp_path / "data_x.pt").write_text("not counted either")
    (tmp_path / "data_6.pt").write_bytes(b"being written")
    reads = []
    monkeypatch.setattr(
        capture_module, "captured_tokens", lambda path: reads.append(path.name) or captured_tokens(path)
    )
    directory = CaptureDirectory(tmp_path, "data")
    totals = directory.scan()
    sizes = sum((tmp_path / n).stat().st_size for n in ("data_2.pt", "data_4.pt", "data_6.pt"))
    assert (totals.files, totals.bytes, totals.requests, totals.tokens, totals.unreadable) == (3, sizes, 4, 18, 1)
    assert totals.last_write == pytest.approx(
        max((tmp_path / n).stat().st_mtime for n in ("data_2.pt", "data_4.pt", "data_6.pt"))
    )
    assert sorted(reads) == ["data_2.pt", "data_4.pt", "data_6.pt"]
    reads.clear()
    assert directory.scan() == totals and reads == []  # unchanged files (the unreadable one too) are not opened again
    for n in (7, 8):
        capture.request(n)  # data_6.pt is now complete: a new size and time
    (tmp_path / "data_2.pt").unlink()  # copied away by a person
    totals = directory.scan()
    assert reads == ["data_6.pt"] and (totals.files, totals.requests, totals.tokens, totals.unreadable) == (2, 4, 26, 0)


def test_no_directory_yet_counts_nothing(tmp_path):
    assert CaptureDirectory(tmp_path / "missing", "data").scan() == CaptureTotals()


def test_scans_are_at_most_one_per_interval(tmp_path):
    clock = [0.0]
    directory = CaptureDirectory(tmp_path, "data", min_interval=15, clock=lambda: clock[0])
    capture = HiddenStateCapture.from_config({"output_directory": str(tmp_path), "write_interval": 1})

    async def scrape() -> int:
        return (await directory.current()).files

    capture.request(3)
    assert asyncio.run(scrape()) == 1
    capture.request(3)
    clock[0] = 14.0
    assert asyncio.run(scrape()) == 1  # the last scan's
    clock[0] = 15.0
    assert asyncio.run(scrape()) == 2


def test_the_gauges_exist_in_mode_save_state_only():
    metrics = RuntimeMetrics(mode="saveState", backend="pytorch", model="m", route="trtllm-serve-pytorch")
    assert "specdec_capture" not in metrics.render().decode()
    metrics.capture(CaptureTotals(files=2, bytes=4096, requests=40, tokens=900, unreadable=1, last_write=1.7e9))
    values = parse_prometheus(metrics.render().decode())
    assert {k: v for k, v in values.items() if k.startswith("specdec_capture")} == {
        "specdec_capture_files": 2,
        "specdec_capture_bytes": 4096,
        "specdec_capture_requests": 40,
        "specdec_capture_tokens": 900,
        "specdec_capture_unreadable_files": 1,
        "specdec_capture_last_write_timestamp_seconds": 1.7e9,
    }
    metrics.capture(CaptureTotals())  # everything moved away
    assert parse_prometheus(metrics.render().decode())["specdec_capture_files"] == 0


def test_reading_a_file_never_needs_torch(tmp_path):
    """The front's image need not have torch: the reader works with `import torch` impossible."""
    path = tmp_path / "data_1.pt"
    HiddenStateCapture.from_config({"output_directory": str(tmp_path), "write_interval": 1}).request(9)
    code = (
        "import sys; sys.modules['torch'] = None; from pathlib import Path; "
        "from specdec.runtime.capture_file import captured_tokens; print(captured_tokens(Path(sys.argv[1])))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert result.returncode == 0 and result.stdout.strip() == "(1, 9)", result


def test_a_directory_that_cannot_be_listed_keeps_the_last_totals(tmp_path, monkeypatch):
    HiddenStateCapture.from_config({"output_directory": str(tmp_path), "write_interval": 1}).request(4)
    directory = CaptureDirectory(tmp_path, "data", min_interval=0)
    first = asyncio.run(directory.current())
    assert first.files == 1

    def refused(path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(capture_module.os, "scandir", refused)
    assert asyncio.run(directory.current()) == first


def test_a_scrape_that_gives_up_does_not_lose_the_scan(tmp_path):
    HiddenStateCapture.from_config({"output_directory": str(tmp_path), "write_interval": 1}).request(4)
    directory = CaptureDirectory(tmp_path, "data")

    async def scrapes() -> CaptureTotals:
        impatient = asyncio.ensure_future(directory.current())
        await asyncio.sleep(0)
        impatient.cancel()  # the scraper's timeout
        return await directory.current()  # the next scrape, within min_interval: the same scan's result

    assert asyncio.run(scrapes()).tokens == 4
