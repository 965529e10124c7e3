"""The learning loop's round directories on the claim (drafter-rounds/<deployment>/<round>): which go once a new
round starts. Standard library only: the replay Job, which deletes them, needs no torch."""

from __future__ import annotations

import shutil
from pathlib import Path


def to_delete(names: list[str], current: int, keep: int, served: int | None) -> list[int]:
    """The rounds among `names` (a rounds directory's entries) to delete: every round the loop numbered (a decimal
    name) below the `keep` newest up to `current`, except the `served` head's. Other names are not the loop's."""
    rounds = sorted(int(n) for n in names if n.isdecimal() and str(int(n)) == n)
    kept = {r for r in rounds if current - keep < r <= current}
    return [r for r in rounds if r < current and r not in kept and r != served]


def prune(directory: Path, current: int, keep: int, served: int | None) -> list[int]:
    """Delete the older rounds' directories under `directory`; the rounds deleted. A missing directory has none."""
    if not directory.is_dir():
        return []
    names = [p.name for p in directory.iterdir() if p.is_dir() and not p.is_symlink()]
    deleted = to_delete(names, current, keep, served)
    for number in deleted:
        shutil.rmtree(directory / str(number))
    return deleted
