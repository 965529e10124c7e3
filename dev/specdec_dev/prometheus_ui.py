"""The web UI of the pinned Prometheus, built from the same Go module's web/ui (its Mantine UI) with pnpm, as
upstream's `make assets` does, and cached next to the binaries (prometheus.ui_assets_dir). Prometheus.start
serves it when it is there; the screenshot test (tests/observability/test_prometheus_screenshot.py) needs it.

    python -m specdec_dev.prometheus_ui      # build once (a minute or two; needs node, npm and the npm registry)

pnpm comes from the npm registry at a pinned version, into the build's own directory.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

from specdec_dev import toolchain
from specdec_dev.prometheus import GROUP, MODULE, PrometheusError, ui_assets_dir

PNPM = "pnpm@10.34.9"
# The lock file's @mantine/code-highlight 9.7.2 answers 404 on the npm registry; 9.6.2 is the newest it has
# (the UI uses it only to highlight PromQL in its explain view).
OVERRIDES = {"@mantine/code-highlight": "9.6.2"}


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> None:
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise PrometheusError(
            f"`{' '.join(argv)}` failed (exit {result.returncode}):\n{(result.stdout + result.stderr)[-3000:]}"
        )


def ensure() -> Path:
    """The UI's static directory, built first when missing."""
    static = ui_assets_dir()
    if (static / "mantine-ui" / "index.html").is_file():
        return static
    missing = [tool for tool in ("node", "npm") if not toolchain.which(tool)]
    if missing:
        raise PrometheusError(f"building Prometheus' web UI needs {' and '.join(missing)} (Debian: nodejs, npm)")
    try:
        source = toolchain.module_dir(MODULE, GROUP.version) / "web" / "ui"
    except toolchain.ToolchainError as error:
        raise PrometheusError(f"cannot read {MODULE}@{GROUP.version}: {error}") from None
    static.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=static.parent) as work:
        tree = Path(work) / "ui"
        shutil.copytree(source, tree, symlinks=True)
        for path in (tree, *tree.rglob("*")):  # Go's module cache is read-only
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
        package = json.loads((tree / "package.json").read_text())
        package["pnpm"] = {"overrides": OVERRIDES}
        (tree / "package.json").write_text(json.dumps(package, indent=2))
        tools = Path(work) / "pnpm"
        env = {**os.environ, "PATH": f"{tools / 'node_modules' / '.bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
        _run(["npm", "install", "--no-save", "--prefix", str(tools), PNPM], tree, env)
        _run(["pnpm", "install", "--no-frozen-lockfile"], tree, env)  # the lock file, but for OVERRIDES
        _run(["bash", "build_ui.sh", "--mantine-ui"], tree, env)
        os.replace(tree / "static", static)
    return static


if __name__ == "__main__":
    try:
        print(ensure())
    except PrometheusError as error:
        sys.exit(f"error: {error}")
