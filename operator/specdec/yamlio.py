"""YAML output for people: no anchors (shared sub-objects are written out in full), keys in order."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml


class _NoAliasDumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    """Multi-line strings (scripts, embedded JSON) as literal blocks, readable as written."""
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_NoAliasDumper.add_representer(str, _str)


def dump(obj: Any) -> str:
    return yaml.dump(obj, Dumper=_NoAliasDumper, sort_keys=False, width=120)


def dump_all(objs: Iterable[Any]) -> str:
    return yaml.dump_all(list(objs), Dumper=_NoAliasDumper, sort_keys=False, width=120)
