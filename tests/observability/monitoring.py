"""The real operator and the pinned Prometheus scraping it every second, with the alert rules rendered at short
windows, for the cluster tests of tests/observability."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from specdec.observability import alerts
from specdec_dev.prometheus import OPERATOR_JOB, Prometheus
from tests.conftest import free_port, stop_and_report
from tests.kube_helpers import wait_for
from tests.operator_runner import OperatorProcess

# The shipped rules with windows a test can wait for; rates still need two scrapes inside the window.
SHORT = alerts.Windows(
    rate="15s",
    baseline="2m",
    leading="1m",
    not_paying="5s",
    collapsed="5s",
    not_drafting="5s",
    failing="5s",
    operator_down="5s",
    not_leading="5s",
    reconcile_errors="5s",
)


@contextlib.contextmanager
def scraped_operator(
    kubeconfig: Path,
    namespace: str,
    operator_env: dict,
    tmp_path: Path,
    request,
    operator_kubeconfig: Path | None = None,
) -> Iterator[tuple[OperatorProcess, Prometheus]]:
    """`specdec operator --metrics-port` watching `namespace` (through `operator_kubeconfig`, default the
    cluster's), and Prometheus scraping it and the namespace's runtime pods. Yields both once the operator is
    scraped; the operator's log and Prometheus' are printed when the test fails."""
    metrics_port, health_port = free_port(), free_port()
    operator = OperatorProcess(
        operator_kubeconfig or kubeconfig,
        tmp_path / "operator.log",
        health_port,
        [
            "operator",
            "--namespace",
            namespace,
            "--liveness",
            f"http://127.0.0.1:{health_port}/healthz",
            "--metrics-port",
            str(metrics_port),
        ],
        operator_env,
    )
    server = Prometheus(tmp_path / "prometheus", free_port())
    process: subprocess.Popen | None = None
    try:
        operator.start()
        server.write(kubeconfig, [f"127.0.0.1:{metrics_port}"], namespaces=[namespace], interval="1s", windows=SHORT)
        process = server.start()
        wait_for(lambda: OPERATOR_JOB in up_jobs(server), "Prometheus to scrape the operator", timeout=60, interval=1)
        # Rules are evaluated from the start, targets scraped only once discovery has reloaded (up to 5 s): the
        # operator may count as down for that long.
        wait_for(lambda: not server.firing(), "the alerts of Prometheus' start-up to resolve", timeout=30, interval=1)
        yield operator, server
    finally:
        if process is not None:
            process.terminate()
            process.wait(20)
        stop_and_report(
            operator,
            request,
            f"--- prometheus log ({server.log}) ---",
            server.log.read_text() if server.log.is_file() else "",
        )


def up_jobs(server: Prometheus) -> set[str]:
    return {t["labels"]["job"] for t in server.targets() if t["health"] == "up"}


def firing(server: Prometheus, names: Iterable[str]) -> set[str]:
    """Which of these alerts fire."""
    return set(server.firing()) & set(names)


def fires_then_resolves(
    firing: Callable[[], set[str]],
    expected: set[str],
    cause: Callable[[], object],
    cure: Callable[[], object],
    timeout: float = 90,
) -> None:
    """No alert fires (of those `firing()` watches); after `cause()` exactly `expected` do; after `cure()` none."""
    assert (before := firing()) == set(), f"firing before the cause: {sorted(before)}"
    cause()
    wait_for(lambda: firing() == expected, f"exactly {sorted(expected)} to fire", timeout=timeout, interval=1)
    cure()
    wait_for(lambda: firing() == set(), f"{sorted(expected)} to resolve", timeout=timeout, interval=1)
