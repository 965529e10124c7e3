"""The alert rules: one source (specdec.observability.alerts) for the chart's PrometheusRule and the rule
files, valid for promtool, and a firing and a quiet `promtool test rules` case for every alert."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from specdec.observability import __main__ as generate
from specdec.observability import alerts
from tests.observability.rule_cases import cases


def test_the_charts_generated_files_are_current():
    stale = [str(path) for path, text in generate.rendered().items() if path.read_text() != text]
    assert not stale, f"regenerate with `python -m specdec.observability`: {stale}"
    assert yaml.safe_load(generate.RULES_FILE.read_text()) == alerts.rule_file()


def test_every_alert_has_a_firing_and_a_quiet_case():
    assert set(cases()) == set(alerts.alert_names())
    for alert, (firing, *quiet) in cases().items():
        assert firing["alert_rule_test"][0]["exp_alerts"], alert
        assert quiet and all(not q["alert_rule_test"][0]["exp_alerts"] for q in quiet), alert


def test_every_alert_fires_and_resolves_in_a_cluster_test():
    from tests.observability.test_operator_alerts import OPERATOR_ALERTS
    from tests.observability.test_prometheus_cluster import RUNTIME_ALERTS

    assert sorted(alerts.alert_names()) == sorted(RUNTIME_ALERTS + OPERATOR_ALERTS)


def test_alert_expressions_use_only_exported_metric_names():
    """No made-up names: every specdec_* name in a rule is one the operator or the front registers."""
    import re

    from specdec import metrics
    from specdec.runtime.metrics import RuntimeMetrics

    exported = {m.name for m in RuntimeMetrics(mode="m", backend="b", model="x", route="r").registry.collect()}
    exported |= {m.name for m in metrics.REGISTRY.collect()}
    exported |= {"specdec_speculative_deployments", "specdec_engine_builds", "specdec_model_caches"}  # PhaseCollector
    names = set()
    for group in alerts.rules():
        for rule in group["rules"]:
            names |= set(re.findall(r"\b(specdec_[a-z_]+)", rule["expr"]))
    # prometheus_client names a counter family without _total, and Info without _info
    known = exported | {n + "_total" for n in exported} | {n + "_info" for n in exported}
    assert names and names <= known, names - known


def _check(args: list[str], cwd: Path) -> str:
    result = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_promtool_accepts_the_rules(promtool: Path, tmp_path: Path):
    _check([str(promtool), "check", "rules", str(generate.RULES_FILE)], tmp_path)
    (tmp_path / "short.yaml").write_text(yaml.safe_dump(alerts.rule_file(SHORT)))
    _check([str(promtool), "check", "rules", "short.yaml"], tmp_path)


SHORT = alerts.Windows(
    rate="20s",
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


def test_promtool_unit_tests_of_every_alert(promtool: Path, tmp_path: Path):
    (tmp_path / "rules.yaml").write_text(generate.RULES_FILE.read_text())
    tests = [case for group in cases().values() for case in group]
    (tmp_path / "tests.yaml").write_text(
        yaml.safe_dump({"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests}, sort_keys=False)
    )
    out = _check([str(promtool), "test", "rules", "tests.yaml"], tmp_path)
    assert "SUCCESS" in out
