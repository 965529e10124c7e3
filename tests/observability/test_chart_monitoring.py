"""The chart's optional monitoring objects: off by default; the PrometheusRule's spec is the generated rule
file, the dashboard ConfigMap carries the generated dashboard, the PodMonitor selects the runtime pods' port."""

from __future__ import annotations

import json

from specdec.observability import alerts, dashboard
from tests.chart.tools import only, render

ON = {
    "metrics": {
        "prometheusRule": {"enabled": True, "labels": {"release": "kps"}},
        "podMonitor": {"enabled": True},
        "grafanaDashboard": {"enabled": True},
    }
}


def test_off_by_default():
    kinds = {d["kind"] for d in render()}
    assert not kinds & {"PrometheusRule", "PodMonitor"}
    assert not [d for d in render() if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-dashboard")]


def test_prometheus_rule_is_the_generated_rule_file():
    rule = only(render(ON), "PrometheusRule")
    assert rule["spec"] == alerts.rule_file()
    assert rule["metadata"]["labels"]["release"] == "kps"


def test_dashboard_configmap():
    docs = render(ON)
    config_map = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-dashboard"))
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(config_map["data"]["specdec.json"]) == dashboard.dashboard()


def test_pod_monitor_scrapes_the_runtime_pods():
    monitor = only(render(ON), "PodMonitor")
    assert monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "runtime"
    assert monitor["spec"]["namespaceSelector"] == {"any": True}
    endpoint = monitor["spec"]["podMetricsEndpoints"][0]
    assert endpoint["port"] == "http"
    assert endpoint["relabelings"][0]["targetLabel"] == "deployment"
    scoped = only(render({"metrics": {"podMonitor": {"enabled": True, "namespaces": ["a", "b"]}}}), "PodMonitor")
    assert scoped["spec"]["namespaceSelector"] == {"matchNames": ["a", "b"]}
