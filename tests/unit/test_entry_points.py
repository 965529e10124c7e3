"""The operator's start-up path (`specdec operator`: specdec.cli, then specdec.handlers and all they import)
loads no development code (specdec_dev, the local Prometheus included); `specdec dev` hands over to it, and
says how to install it where it is missing."""

from __future__ import annotations

import subprocess
import sys

import pytest

from specdec import cli

OPERATOR_IMPORTS = """
import sys
import specdec.cli
import specdec.handlers
loaded = sorted(m for m in sys.modules if m.startswith("specdec_dev"))
assert not loaded, loaded
assert "specdec.handlers" in sys.modules and "specdec.kube.client" in sys.modules
"""


def test_the_operator_s_import_path_loads_no_development_code():
    result = subprocess.run([sys.executable, "-c", OPERATOR_IMPORTS], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_specdec_dev_is_handed_to_its_own_parser_and_listed_in_specdec_s_help(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["dev", "--help"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith("usage: specdec dev [-h] {up,down,status,env,tools,simulate,learn}")
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "dev                 a local cluster with simulated GPU nodes" in capsys.readouterr().out


def test_specdec_dev_says_how_to_install_the_development_tools_where_they_are_missing(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "specdec_dev", None)  # an import of it fails as if it were not installed
    monkeypatch.delitem(sys.modules, "specdec_dev.cli", raising=False)
    assert cli.main(["dev", "up"]) == 2
    assert capsys.readouterr().err == f"specdec dev: {cli.DEV_MISSING}\n"
    assert "pip install -e ./dev" in cli.DEV_MISSING
