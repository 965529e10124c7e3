"""The Grafana dashboard of specdec (charts/specdec-operator/files/dashboards/specdec.json), generated here.

Plain dicts in Grafana's dashboard JSON model (schemaVersion 39): per deployment the speculation figures the
runtime fronts export (acceptance, estimated speedup, draft length, tokens per step, tokens/s, TTFT, TPOT,
requests in flight), and the operator's own (EngineBuilds, ModelCaches and SpeculativeDeployments by phase,
reconciles). The estimated speedup is the alert rules' expression (specdec.observability.alerts.speedup).
"""

from __future__ import annotations

from typing import Any

from specdec.speculation.payoff import COUNTERS

UID = "specdec-overview"
TITLE = "specdec: speculative decoding"
SEL = 'namespace=~"$namespace", deployment=~"$deployment"'
BY = "namespace, deployment"
RATE = "$__rate_interval"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def _rate(metric: str, by: str = BY, extra: str = "") -> str:
    selector = SEL + (f", {extra}" if extra else "")
    return f"sum by ({by}) (rate({metric}{{{selector}}}[{RATE}]))"


def _quantile(q: float, histogram: str) -> str:
    return f"histogram_quantile({q}, {_rate(histogram + '_bucket', by=BY + ', le')})"


def _speedup() -> str:
    accepted, steps = _rate(COUNTERS["accepted"]), _rate(COUNTERS["steps"])
    draft_s, target_s = _rate(COUNTERS["draft_seconds"]), _rate(COUNTERS["target_seconds"])
    return f"(({accepted} + {steps}) / {steps}) / (1 + {draft_s} / ({target_s} > 0))"


DEPLOYMENT = "{{namespace}}/{{deployment}}"

# (title, unit, [(expr, legend)], description)
SPECULATION = [
    (
        "Acceptance rate",
        "percentunit",
        [(f"{_rate(COUNTERS['accepted'])} / ({_rate(COUNTERS['draft'])} > 0)", DEPLOYMENT)],
        "Accepted draft tokens per proposed draft token.",
    ),
    (
        "Estimated speedup",
        "x",
        [(_speedup(), DEPLOYMENT)],
        "Tokens per target step over the step's cost with drafting (1 + draft seconds / target seconds); "
        "below 1 the target alone would be faster.",
    ),
    (
        "Draft length",
        "none",
        [(f"max by ({BY}) (specdec_draft_len{{{SEL}}})", DEPLOYMENT)],
        "The draft length each deployment's pods use (the highest when pods differ).",
    ),
    (
        "Tokens per target step",
        "none",
        [
            (
                f"({_rate(COUNTERS['accepted'])} + {_rate(COUNTERS['steps'])}) / ({_rate(COUNTERS['steps'])} > 0)",
                DEPLOYMENT,
            )
        ],
        "Mean tokens one verifying target step produces, its own token included.",
    ),
]
SERVING = [
    (
        "Generated tokens/s",
        "short",
        [(_rate("specdec_completion_tokens_total"), DEPLOYMENT)],
        "Output tokens per second.",
    ),
    (
        "Requests/s by status",
        "reqps",
        [(_rate("specdec_requests_total", by=BY + ", status"), DEPLOYMENT + " {{status}}")],
        "Requests to the OpenAI endpoints.",
    ),
    (
        "Time to first token",
        "s",
        [
            (_quantile(0.5, "specdec_time_to_first_token_seconds"), "p50 " + DEPLOYMENT),
            (_quantile(0.95, "specdec_time_to_first_token_seconds"), "p95 " + DEPLOYMENT),
        ],
        "Streamed responses only.",
    ),
    (
        "Time per output token",
        "s",
        [
            (_quantile(0.5, "specdec_time_per_output_token_seconds"), "p50 " + DEPLOYMENT),
            (_quantile(0.95, "specdec_time_per_output_token_seconds"), "p95 " + DEPLOYMENT),
        ],
        "After the first token when streamed, else over the whole answer.",
    ),
    (
        "Requests in flight",
        "short",
        [(f"sum by ({BY}) (specdec_requests_in_flight{{{SEL}}})", DEPLOYMENT)],
        "Requests being served.",
    ),
]
OPERATOR = [
    (
        "EngineBuilds by phase",
        "short",
        [("max by (phase) (specdec_engine_builds)", "{{phase}}")],
        "EngineBuilds the operator sees, by status.phase (Failed ones fire SpecdecEngineBuildFailing).",
    ),
    (
        "ModelCaches by phase",
        "short",
        [("max by (phase) (specdec_model_caches)", "{{phase}}")],
        "Checkpoint fetches by status.phase (Failed ones fire SpecdecModelFetchFailing).",
    ),
    (
        "SpeculativeDeployments by phase",
        "short",
        [("max by (phase) (specdec_speculative_deployments)", "{{phase}}")],
        "By status.phase.",
    ),
    (
        "Reconciles/s",
        "ops",
        [(f"sum by (kind, result) (rate(specdec_reconcile_total[{RATE}]))", "{{kind}} {{result}}")],
        "Reconciles by kind and result.",
    ),
]


def _panel(
    panel_id: int, title: str, unit: str, targets: list[tuple[str, str]], description: str, x: int, y: int
) -> dict[str, Any]:
    return {
        "id": panel_id,
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "gridPos": {"h": 8, "w": 8, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
        "targets": [
            {"refId": chr(ord("A") + i), "datasource": DATASOURCE, "expr": expr, "legendFormat": legend}
            for i, (expr, legend) in enumerate(targets)
        ],
    }


def _variable(name: str, query: str) -> dict[str, Any]:
    return {
        "name": name,
        "label": name,
        "type": "query",
        "datasource": DATASOURCE,
        "query": {"query": query, "refId": f"{name}-var"},
        "definition": query,
        "refresh": 2,
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "current": {},
        "sort": 1,
    }


def dashboard() -> dict[str, Any]:
    panels: list[dict[str, Any]] = []
    y = 0
    for row_title, group in (("Speculation", SPECULATION), ("Serving", SERVING), ("Operator", OPERATOR)):
        panels.append(
            {
                "id": len(panels) + 1,
                "type": "row",
                "title": row_title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                "panels": [],
            }
        )
        y += 1
        for i, (title, unit, targets, description) in enumerate(group):
            panels.append(_panel(len(panels) + 1, title, unit, targets, description, (i % 3) * 8, y + (i // 3) * 8))
        y += ((len(group) + 2) // 3) * 8
    return {
        "uid": UID,
        "title": TITLE,
        "tags": ["specdec"],
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "timezone": "browser",
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                },
                _variable("namespace", "label_values(specdec_runtime_info, namespace)"),
                _variable("deployment", 'label_values(specdec_runtime_info{namespace=~"$namespace"}, deployment)'),
            ]
        },
        "annotations": {"list": []},
        "panels": panels,
    }


def queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every panel target."""
    return [(p["title"], t["expr"]) for p in dashboard()["panels"] for t in p.get("targets", [])]
