from __future__ import annotations

import os
from pathlib import Path

import pytest

from specdec_dev import prometheus


def _pinned(name: str) -> Path:
    path = prometheus.binary(name)
    if not path.is_file():
        if os.environ.get("CI", "").lower() == "true":
            try:
                prometheus.ensure()
            except prometheus.PrometheusError as error:
                pytest.fail(str(error), pytrace=False)
        else:
            pytest.skip(
                f"{path} is missing (`specdec dev up --prometheus` or "
                "`python -c 'from specdec.observability import prometheus; prometheus.ensure()'` builds it)"
            )
    return path


@pytest.fixture(scope="session")
def promtool() -> Path:
    return _pinned("promtool")


@pytest.fixture(scope="session")
def prometheus_binary() -> Path:
    return _pinned("prometheus")
