"""A key of the operator's runtime ConfigMap, as the pod sees it: a file in the mounted volume, which the
kubelet replaces when the operator writes the key. The front polls it; what changed is applied once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


class ConfigMapKey:
    """`apply` gets the key's text, stripped (None: the key is absent), each time it differs from the text
    last seen. It starts as absent: a key that is not there at start is not applied."""

    def __init__(self, path: Path, apply: Callable[[str | None], None]):
        self.path, self.apply = path, apply
        self._text: str | None = None

    def poll(self) -> None:
        try:
            text: str | None = self.path.read_text().strip()
        except OSError:
            text = None
        if text != self._text:
            self._text = text
            self.apply(text)
