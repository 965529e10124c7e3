"""Stand-in for TensorRT-LLM's hidden-state capture (decoding_type SaveState), for the trtllm-serve stand-in
(specdec_dev.standin_servers): files named, numbered and laid out as the real ones, with zeros for the states.

As SaveHiddenStatesDrafter (tensorrt_llm/_torch/speculative/save_hidden_state.py): it creates output_directory,
numbers requests from 1 on every start, keeps one record per request ({"id", "input_ids", "hidden_state", and
"hidden_state_features" when more than one layer is captured}) and, when the request number is a multiple of
write_interval, writes the records kept to `<file_prefix>_<number>.pt` in place and forgets them. The file is
torch.save's zip layout (torch/serialization.py, `_save`: `<archive>/data.pkl`, `byteorder`, `data/<key>`,
`version`), written here without torch: the pickle below is the one torch.save makes of that list
(specdec.runtime.capture_file describes it and reads it back). The stand-in's hidden size is small.
"""

from __future__ import annotations

import os
import pickle
import struct
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specdec.api.runtime_config import RuntimeConfig
from specdec.modes.save_state import DECODING_TYPE

HIDDEN_SIZE = 64  # the stand-in target's; a real one's is thousands
DEFAULT_LAYERS = 4  # EAGLE-3's three layers and the post-norm state (eagle3_layers_to_capture None)
LONG, BFLOAT16 = ("LongStorage", 8), ("BFloat16Storage", 2)


@dataclass(frozen=True)
class _Tensor:
    storage: tuple[str, int]  # (torch storage class, bytes per element)
    size: tuple[int, ...]


def _text(value: str) -> bytes:
    data = value.encode()
    return pickle.BINUNICODE + struct.pack("<I", len(data)) + data


def _int(value: int) -> bytes:
    return pickle.BININT + struct.pack("<i", value)


def _global(module: str, name: str) -> bytes:
    return pickle.GLOBAL + f"{module}\n{name}\n".encode()


class _TorchPickle:
    """torch.save's pickle of a list of dicts of str keys, ints and dense CPU tensors (protocol 2)."""

    def __init__(self) -> None:
        self.storages: list[_Tensor] = []

    def dumps(self, records: list[dict[str, Any]]) -> bytes:
        return pickle.PROTO + b"\x02" + self._value(records) + pickle.STOP

    def _value(self, value: Any) -> bytes:
        if isinstance(value, list):
            return pickle.EMPTY_LIST + pickle.MARK + b"".join(map(self._value, value)) + pickle.APPENDS
        if isinstance(value, dict):
            items = b"".join(_text(k) + self._value(v) for k, v in value.items())
            return pickle.EMPTY_DICT + pickle.MARK + items + pickle.SETITEMS
        if isinstance(value, int):
            return _int(value)
        return self._tensor(value)

    def _tensor(self, tensor: _Tensor) -> bytes:
        key = str(len(self.storages))
        self.storages.append(tensor)
        numel = 1
        for n in tensor.size:
            numel *= n
        strides = [1] * len(tensor.size)
        for i in range(len(tensor.size) - 2, -1, -1):
            strides[i] = strides[i + 1] * tensor.size[i + 1]
        storage = (
            pickle.MARK
            + _text("storage")
            + _global("torch", tensor.storage[0])
            + _text(key)
            + _text("cpu")
            + _int(numel)
            + pickle.TUPLE
            + pickle.BINPERSID
        )
        args = (
            pickle.MARK
            + storage
            + _int(0)
            + pickle.MARK
            + b"".join(map(_int, tensor.size))
            + pickle.TUPLE
            + pickle.MARK
            + b"".join(map(_int, strides))
            + pickle.TUPLE
            + pickle.NEWFALSE
            + _global("collections", "OrderedDict")
            + pickle.EMPTY_TUPLE
            + pickle.REDUCE
            + pickle.TUPLE
        )
        return _global("torch._utils", "_rebuild_tensor_v2") + args + pickle.REDUCE


def torch_save(records: list[dict[str, Any]], path: Path) -> None:
    """Write `records` at `path` as torch.save would (the state storages hold zeros)."""
    pickler = _TorchPickle()
    data = pickler.dumps(records)
    archive = path.stem
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as out:
        out.writestr(f"{archive}/data.pkl", data)
        out.writestr(f"{archive}/byteorder", "little")
        for key, tensor in enumerate(pickler.storages):
            numel = 1
            for n in tensor.size:
                numel *= n
            if tensor.storage == LONG:
                out.writestr(f"{archive}/data/{key}", struct.pack(f"<{numel}q", *range(numel)))
            else:
                out.writestr(f"{archive}/data/{key}", bytes(numel * tensor.storage[1]))
        out.writestr(f"{archive}/version", "3\n")


@dataclass
class HiddenStateCapture:
    """SaveHiddenStatesDrafter's bookkeeping: `request(tokens)` for each request's prefill."""

    output_directory: Path
    write_interval: int = 20
    file_prefix: str = "data"
    layers: int = DEFAULT_LAYERS
    _iter: int = 1
    _saved: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_config(cls, speculative: dict[str, Any]) -> HiddenStateCapture:
        """From a SaveState speculative_config (SaveHiddenStatesDecodingConfig's fields and defaults)."""
        layers = speculative.get("eagle3_layers_to_capture")
        capture = cls(
            Path(speculative["output_directory"]),
            int(speculative.get("write_interval", 20)),
            str(speculative.get("file_prefix", "data")),
            len(layers) if layers else DEFAULT_LAYERS,
        )
        os.makedirs(capture.output_directory, exist_ok=True)
        return capture

    def request(self, tokens: int) -> Path | None:
        """Keep one request of `tokens` token ids (zeros for its states); the file written, when this request
        completes one."""
        tokens = max(tokens, 1)
        states: dict[str, Any] = {
            "input_ids": _Tensor(LONG, (tokens,)),
            "hidden_state": _Tensor(BFLOAT16, (tokens, HIDDEN_SIZE)),
        }
        if self.layers > 1:
            states["hidden_state_features"] = _Tensor(BFLOAT16, (tokens, HIDDEN_SIZE * (self.layers - 1)))
        return self.keep(states, torch_save)

    def keep(self, states: dict[str, Any], save: Callable[[list[dict[str, Any]], Path], None]) -> Path | None:
        """Keep one request's record (its input_ids and states, numbered here), written with `save` (torch.save's
        signature) when this request completes a file; the file written, if any."""
        self._saved.append({"id": self._iter, **states})
        written = None
        if self._iter % self.write_interval == 0:
            written = self.output_directory / f"{self.file_prefix}_{self._iter}.pt"
            save(self._saved, written)
            self._saved = []
        self._iter += 1
        return written


def capture_hook(speculative: dict[str, Any]) -> Callable[[int], Path | None] | None:
    """A simulated trtllm-serve's capture of each request's prefill, for a SaveState speculative_config (None
    for any other)."""
    if speculative.get("decoding_type") != DECODING_TYPE:
        return None
    return HiddenStateCapture.from_config(speculative).request


def captured_into(config: RuntimeConfig, directory: Path) -> RuntimeConfig:
    """`config` with its SaveState output_directory at `directory`: where a machine without the pod's mount of
    the claim keeps the capture."""
    speculative = {**(config.speculative_config or {}), "output_directory": str(directory)}
    return config.model_copy(
        update={"speculation": config.speculation.model_copy(update={"speculative_config": speculative})}  # type: ignore[attr-defined]  # the registry's models are untyped
    )
