"""The Prometheus UI graphing the acceptance rate per deployment, as headless Chromium renders it: the sample
deployment with simulated traffic whose acceptance drops from 0.8 to 0.35 midway. With
SPECDEC_UPDATE_SCREENSHOT=1 it is written to docs/images/prometheus-acceptance.png (docs/operations.md
shows it); otherwise to the test's own directory, so a test run leaves the checkout as it was."""

from __future__ import annotations

import os
import struct
import subprocess
import time
import urllib.parse
from pathlib import Path

import pytest

from specdec.observability import alerts
from specdec_dev import prometheus, simulation_profile, toolchain
from tests.observability.test_prometheus_cluster import monitored

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
DOCS_SCREENSHOT = ROOT / "docs" / "images" / "prometheus-acceptance.png"
WIDTH, HEIGHT = 1400, 1000  # the legend (one line per deployment) below the graph
PHASE_SECONDS = 45


@pytest.fixture
def chromium() -> str:
    path = toolchain.which("chromium")
    if path is None:
        pytest.skip("no Chromium (Debian: apt-get install chromium; `make test` installs it as root)")
    if not (prometheus.ui_assets_dir() / "mantine-ui" / "index.html").is_file():
        pytest.skip(
            f"Prometheus' web UI is not built in {prometheus.ui_assets_dir()} "
            "(`specdec dev tools --screenshot` builds it; `make test` does)"
        )
    return path


def headless(chromium: str, url: str, *args: str) -> str:
    """Chromium's stdout after it loaded `url` and ran its scripts for 10 s of virtual time."""
    result = subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--window-size={WIDTH},{HEIGHT}",
            "--virtual-time-budget=10000",
            *args,
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


def test_prometheus_ui_graphs_acceptance_per_deployment(
    kube, kubeconfig, namespace, crds, operator_env, tmp_path, request, chromium
):
    with monitored(kube, kubeconfig, namespace, operator_env, tmp_path, request, acceptance=0.8) as (
        server,
        profiles,
        name,
    ):
        expr = alerts.acceptance("30s")

        def acceptance() -> float:  # what the graph draws: this deployment's line
            (series,) = server.query(expr)
            assert series["metric"]["deployment"] == name
            return float(series["value"][1])

        time.sleep(PHASE_SECONDS)
        high = acceptance()
        simulation_profile.update(profiles, f"{namespace}/{name}", {"acceptance": 0.35})
        time.sleep(PHASE_SECONDS)
        assert 0 < acceptance() < high / 2, high
        url = f"{server.url}/query?" + urllib.parse.urlencode(
            {"g0.expr": expr, "g0.tab": "graph", "g0.range_input": "2m", "g0.show_tree": "0"}
        )

        # The virtual-time budget does not wait for the query's answer over the network: on a loaded machine the
        # page can be dumped before the graph is drawn, so it is loaded again (a fresh Chromium) a few times.
        def drawn(page: str) -> bool:
            return "uplot" in page and f'deployment="{name}"' in page

        for _ in range(3):
            page = headless(chromium, url, "--dump-dom")
            if drawn(page):
                break
        assert drawn(page), "the graph with the deployment's series"
        screenshot = (
            DOCS_SCREENSHOT if os.environ.get("SPECDEC_UPDATE_SCREENSHOT") == "1" else tmp_path / "acceptance.png"
        )
        screenshot.parent.mkdir(exist_ok=True)
        headless(chromium, url, f"--screenshot={screenshot}")
    assert png_size(screenshot) == (WIDTH, HEIGHT)
