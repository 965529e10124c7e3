"""What one of the toolchain's groups costs to build: cold (empty Go build and module caches of its own, as a CI
runner's first run), then warm (the binary removed, Go's caches kept), then cached (the toolchain finds the
binary). Wall and CPU seconds of each, and the load average, since the machine may be shared.

    PYTHONPATH=operator:. .venv/bin/python bench/tool_build.py lws
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

from specdec_dev import toolchain


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(group: toolchain.ToolGroup) -> dict[str, float]:
    wall, cpu, load = time.monotonic(), _cpu_seconds(), os.getloadavg()[0]
    toolchain.build_group(group)
    return {
        "wall_s": round(time.monotonic() - wall, 1),
        "cpu_s": round(_cpu_seconds() - cpu, 1),
        "load_before": round(load, 1),
        "load_after": round(os.getloadavg()[0], 1),
    }


def measure(name: str) -> dict[str, dict[str, float]]:
    group = next((g for g in toolchain.GROUPS + toolchain.NODE_GROUPS if g.name == name), None)
    if group is None:
        raise SystemExit(
            f"no tool group {name!r}: {', '.join(g.name for g in toolchain.GROUPS + toolchain.NODE_GROUPS)}"
        )
    with tempfile.TemporaryDirectory(prefix="tool-build-") as tmp:
        root = Path(tmp)
        os.environ.update(
            SPECDEC_CACHE=str(root / "specdec"), GOCACHE=str(root / "gocache"), GOMODCACHE=str(root / "gomod")
        )
        results = {"cold": _timed(group)}
        shutil.rmtree(toolchain.group_dir(group))
        results["warm"] = _timed(group)
        results["cached"] = _timed(group)
        # Go makes its module cache read-only; the temporary directory could not be removed otherwise.
        for directory, _, _ in os.walk(root / "gomod"):
            os.chmod(directory, 0o755)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("group", help="a tool group of specdec_dev.toolchain, e.g. lws")
    print(json.dumps(measure(parser.parse_args().group), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
