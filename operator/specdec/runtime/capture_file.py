"""What a TensorRT-LLM hidden-state capture file holds, read without torch (the runtime front has none).

TensorRT-LLM's SaveHiddenStatesDrafter (tensorrt_llm/_torch/speculative/save_hidden_state.py) writes, every
write_interval requests, `<file_prefix>_<n>.pt` with torch.save: a list of one dict per request, {"id": int,
"input_ids": a 1-D LongTensor of its token ids, "hidden_state": [tokens, hidden], and with more than one captured
layer "hidden_state_features"}. torch.save's file (torch/serialization.py, `_save`) is a zip archive whose
`<archive>/data.pkl` pickles that object (protocol 2), each tensor as
`torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, OrderedDict()[, metadata])`
(torch/_tensor.py, `_reduce_ex_internal`) and each storage as the persistent id `("storage",
torch.<Type>Storage, key, location, numel)`; the storages themselves are `<archive>/data/<key>`.

Only data.pkl is read (a few KiB, whatever the hidden states weigh), by an unpickler that builds tensor
shapes and nothing else: any other global refuses the file, so reading a capture file never runs code it names.
tests/runtime/data/capture holds a file torch itself wrote so (and the script that wrote it).
"""

from __future__ import annotations

import collections
import pickle
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REBUILD_TENSOR = ("torch._utils", "_rebuild_tensor_v2")
MAX_PICKLE_BYTES = 16 << 20  # the pickle of a few hundred requests' shapes is KiBs


class UnreadableCapture(Exception):
    """Not a complete capture file of the layout above (one being written, or another format)."""


@dataclass(frozen=True)
class TensorShape:
    size: tuple[int, ...]


def _rebuild_tensor(_storage: Any, _offset: Any, size: Any, *_rest: Any) -> TensorShape:
    return TensorShape(tuple(int(n) for n in size))


class _Storage:
    """torch.<Type>Storage as named in a persistent id; its data is never read."""


class _ShapesOnly(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == REBUILD_TENSOR:
            return _rebuild_tensor
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if module == "torch" and name.endswith("Storage"):
            return _Storage
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a hidden-state capture file")

    def persistent_load(self, pid: Any) -> None:
        return None


def _records(path: Path) -> list[Any]:
    try:
        with zipfile.ZipFile(path) as archive:
            pickles = [i for i in archive.infolist() if i.filename.rsplit("/", 1)[-1] == "data.pkl"]
            if len(pickles) != 1 or pickles[0].file_size > MAX_PICKLE_BYTES:
                raise UnreadableCapture(f"{path.name}: not one data.pkl of a torch.save archive")
            with archive.open(pickles[0]) as data:
                records = _ShapesOnly(data).load()
    except (
        OSError,
        zipfile.BadZipFile,
        pickle.UnpicklingError,
        EOFError,
        ValueError,
        TypeError,
        AttributeError,
        IndexError,
        KeyError,
    ) as error:
        raise UnreadableCapture(f"{path.name}: {type(error).__name__}: {error}") from None
    if not isinstance(records, list):
        raise UnreadableCapture(f"{path.name}: holds a {type(records).__name__}, not a list of requests")
    return records


def captured_tokens(path: Path) -> tuple[int, int]:
    """(requests, token ids) in one capture file; raises UnreadableCapture."""
    tokens = 0
    records = _records(path)
    for record in records:
        ids = record.get("input_ids") if isinstance(record, dict) else None
        if not isinstance(ids, TensorShape) or len(ids.size) != 1:
            raise UnreadableCapture(f"{path.name}: a request without 1-D input_ids")
        tokens += ids.size[0]
    return len(records), tokens
