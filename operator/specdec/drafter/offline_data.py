"""TensorRT-LLM's hidden-state capture files as ModelOpt's offline training data.

SaveHiddenStatesDrafter writes `<prefix>_<n>.pt`: a list of one record per request, {"id", "input_ids",
"hidden_state": the final post-norm state [tokens, hidden], and the captured layers side by side
[tokens, layers * hidden] under "hidden_state_features" (renamed "aux_hidden_states" by later releases; both
are read)}. ModelOpt's OfflineSupervisedDataset (modelopt.torch.speculative.eagle.utils) reads one dict per file,
{"input_ids", "hidden_states", "aux_hidden_states"}: `convert` writes each record so, in a directory of its
own. When the capture kept the last layer's output both as hidden_state and in the features (no post-norm
state captured), the features are cut to the head's layers.
"""

from __future__ import annotations

import pickle
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

FEATURE_KEYS = ("aux_hidden_states", "hidden_state_features")
STATE_KEYS = ("hidden_state", "hidden_states")


class CaptureError(ValueError):
    """A capture record that does not fit the head (its hidden size or its layers)."""


@dataclass(frozen=True)
class Converted:
    files: list[Path]  # ModelOpt's offline files, one per request
    capture_files: int
    unreadable: int  # capture files that could not be loaded (one being written, another format)
    tokens: int
    token_counts: dict[int, int]  # token id -> occurrences, for the draft vocabulary


def _first(record: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        if key in record:
            return record[key]
    return None


def offline_record(record: dict[str, Any], hidden_size: int, aux_layers: int) -> dict[str, torch.Tensor]:
    """One capture record as ModelOpt's offline dict; raises CaptureError for one that does not fit."""
    input_ids, state, features = record.get("input_ids"), _first(record, STATE_KEYS), _first(record, FEATURE_KEYS)
    if not isinstance(input_ids, torch.Tensor) or not isinstance(state, torch.Tensor):
        raise CaptureError("a record without input_ids and hidden_state")
    if not isinstance(features, torch.Tensor):
        raise CaptureError(f"a record without the captured layers' features ({' or '.join(FEATURE_KEYS)})")
    tokens = input_ids.shape[0]
    if state.shape != (tokens, hidden_size):
        raise CaptureError(f"hidden_state is {tuple(state.shape)}, not ({tokens}, {hidden_size}): another target?")
    width = aux_layers * hidden_size
    if features.shape[0] != tokens or features.shape[1] not in (width, width + hidden_size):
        raise CaptureError(
            f"the captured features are {tuple(features.shape)}: {aux_layers} layers of {hidden_size} expected "
            "(the capture's eagle3_layers_to_capture must be the head's layers)"
        )
    return {
        "input_ids": input_ids.long(),
        "hidden_states": state.float(),
        "aux_hidden_states": features[:, :width].float(),
    }


def load(path: Path) -> list[dict[str, Any]]:
    """The records of one capture file (a list of records, or one record); raises OSError for a file that
    cannot be loaded. weights_only: a capture file holds tensors, ints and strings only."""
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except (  # what torch.load raises for a file cut short or of another format
        RuntimeError,
        pickle.UnpicklingError,
        zipfile.BadZipFile,
        EOFError,
        ValueError,
        IndexError,
        KeyError,
        AttributeError,
        TypeError,
    ) as error:
        raise OSError(f"{path.name}: {error}") from None
    records = data if isinstance(data, list) else [data]
    if not all(isinstance(r, dict) for r in records):
        raise OSError(f"{path.name}: not a list of capture records")
    return records


def convert(capture_dir: Path, out_dir: Path, hidden_size: int, aux_layers: int) -> Converted:
    """Every record of the `*.pt` files under capture_dir, written to out_dir for ModelOpt."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files: list[Path] = []
    counts: dict[int, int] = {}
    paths = sorted(capture_dir.rglob("*.pt"))
    unreadable = tokens = 0
    for path in paths:
        try:
            records = load(path)
        except OSError:
            unreadable += 1
            continue
        for record in records:
            offline = offline_record(record, hidden_size, aux_layers)
            target = out_dir / f"{len(files):08d}.pt"
            torch.save(offline, target)
            files.append(target)
            ids = offline["input_ids"].tolist()
            tokens += len(ids)
            for token in ids:
                counts[token] = counts.get(token, 0) + 1
    return Converted(files, len(paths), unreadable, tokens, counts)
