"""specdec.kube.kopf_patches: checked against one kopf release, the one the images pin, and refused beside any other."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from specdec.kube import kopf_patches

ROOT = Path(__file__).resolve().parents[2]


def test_the_patched_kopf_is_the_pinned_one():
    pins = dict(
        line.split("==")
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert kopf_patches.KOPF_VERSION == pins["kopf"]


def test_another_kopf_release_is_refused_at_import_with_what_to_do():
    script = (
        "import importlib.metadata as m; real = m.version; "
        "m.version = lambda name: '1.99.0' if name == 'kopf' else real(name); "
        "import specdec.kube.kopf_patches"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "ImportError" in result.stderr and "kopf 1.99.0 is installed" in result.stderr
    assert "--constraint constraints.txt" in result.stderr


def test_a_watch_failure_client_go_s_reflector_recovers_from_does_not_end_the_operator():
    from kopf._cogs.clients import errors

    assert kopf_patches._recoverable(errors.APIError(None, status=410, headers={}))
    assert kopf_patches._recoverable(errors.APIError(None, status=503, headers={}))
    assert kopf_patches._recoverable(TimeoutError())
    assert not kopf_patches._recoverable(errors.APIError(None, status=403, headers={}))
    kopf_patches.install_watch_resilience()
    from kopf._cogs.clients import watching

    assert watching.continuous_watch is kopf_patches._continuous_watch
