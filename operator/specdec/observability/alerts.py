"""Prometheus alert rules for specdec, in one place: the chart's PrometheusRule
(charts/specdec-operator/files/prometheus-rules.yaml) and the local Prometheus' rule file are rendered from
here, the latter with shorter windows in tests (`Windows`).

Every name below is one the operator (specdec.metrics) or the runtime front (specdec.runtime.metrics) exports;
prometheus_client adds `_total` to counters. Runtime series carry `namespace` and `deployment` (the pod's
app.kubernetes.io/instance label, as the chart's PodMonitor and the dev Prometheus relabel it).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from specdec.speculation.payoff import COUNTERS

OPERATOR_JOB = 'job=~".*specdec-operator.*"'  # the ServiceMonitor's job is the metrics Service's name
BY_DEPLOYMENT = "namespace, deployment"

REQUESTS = "specdec_requests_total"
RECONCILES = "specdec_reconcile_total"
ENGINE_BUILDS = "specdec_engine_builds"
MODEL_CACHES = "specdec_model_caches"
SPECULATIVE_DEPLOYMENTS = "specdec_speculative_deployments"
OK = 'status=~"2.."'
ERROR = 'result="error"'


@dataclasses.dataclass(frozen=True)
class Windows:
    """Rate windows and `for:` durations (Prometheus durations); the defaults are the production ones."""

    rate: str = "5m"  # the recent window of every rate
    baseline: str = "1h"  # what acceptance is compared with
    leading: str = "15m"  # a leader reconciles everything at least every resync (300 s by default)
    not_paying: str = "10m"
    collapsed: str = "10m"
    not_drafting: str = "15m"
    failing: str = "15m"
    operator_down: str = "5m"
    not_leading: str = "10m"
    reconcile_errors: str = "15m"


def _rate(metric: str, window: str, by: str = BY_DEPLOYMENT, selector: str = "") -> str:
    return (
        f"sum by ({by}) (rate({metric}{{{selector}}}[{window}]))"
        if selector
        else f"sum by ({by}) (rate({metric}[{window}]))"
    )


def speedup(window: str) -> str:
    """The estimated speedup over the target alone, as specdec.speculation.payoff.measure computes it with measured
    compute time: tokens per step E = (accepted + steps) / steps over 1 + k*c, where k*c = draft seconds /
    target seconds. Only where the route measures both times (target seconds > 0)."""
    accepted, steps = _rate(COUNTERS["accepted"], window), _rate(COUNTERS["steps"], window)
    draft_s, target_s = _rate(COUNTERS["draft_seconds"], window), _rate(COUNTERS["target_seconds"], window)
    return f"(({accepted} + {steps}) / {steps}) / (1 + {draft_s} / ({target_s} > 0))"


def acceptance(window: str) -> str:
    """Accepted draft tokens per draft token."""
    return f"{_rate(COUNTERS['accepted'], window)} / ({_rate(COUNTERS['draft'], window)} > 0)"


def rules(w: Windows = Windows()) -> list[dict[str, Any]]:
    """The rule groups, in the shape of a rule file's (and a PrometheusRule's spec) `groups`."""
    per = "{{ $labels.namespace }}/{{ $labels.deployment }}"
    runtime = [
        {
            "alert": "SpecdecSpeculationNotPayingOff",
            "expr": f"{speedup(w.rate)} < 1",
            "for": w.not_paying,
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": f"Speculation on {per} is slower than the target alone",
                "description": 'Estimated speedup {{ $value | printf "%.2f" }}x over '
                + w.rate
                + ": the draft tokens cost more than the accepted ones save. Lower draftLen, pick a "
                "better-matched draft model, or turn speculation off (mode none).",
            },
        },
        {
            "alert": "SpecdecAcceptanceCollapsed",
            "expr": f"({acceptance(w.rate)}) < 0.5 * ({acceptance(w.baseline)})",
            "for": w.collapsed,
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": f"Draft acceptance on {per} fell to less than half its {w.baseline} average",
                "description": 'Acceptance rate {{ $value | printf "%.3f" }} over ' + w.rate + ". The traffic "
                "changed (a domain the draft was not trained on) or the draft and target no longer "
                "match (a changed checkpoint or tokenizer).",
            },
        },
        {
            "alert": "SpecdecSpeculationNotDrafting",
            "expr": (
                f"({_rate(REQUESTS, w.rate, selector=OK)} > 0) "
                f"unless on ({BY_DEPLOYMENT}) ({_rate(COUNTERS['draft'], w.rate)} > 0) "
                f'unless on ({BY_DEPLOYMENT}) (max by ({BY_DEPLOYMENT}) (specdec_runtime_info{{mode="none"}}))'
            ),
            "for": w.not_drafting,
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": f"{per} serves requests but drafts no tokens",
                "description": "Speculation is configured but the backend proposed no draft tokens over "
                + w.rate
                + ": check the runtime's backend configuration (speculative_config, the draft "
                "engine) and its logs.",
            },
        },
    ]
    operator = [
        {
            "alert": "SpecdecEngineBuildFailing",
            "expr": f'max by (namespace) ({ENGINE_BUILDS}{{phase="Failed"}}) > 0',
            "for": w.failing,
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "EngineBuilds are Failed",
                "description": "{{ $value }} EngineBuild(s) in phase Failed: `kubectl get enginebuilds -A` and "
                "their status.conditions say why.",
            },
        },
        {
            "alert": "SpecdecModelFetchFailing",
            "expr": f'max by (namespace) ({MODEL_CACHES}{{phase="Failed"}}) > 0',
            "for": w.failing,
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "ModelCaches are Failed (checkpoint fetch)",
                "description": "{{ $value }} ModelCache(s) in phase Failed: `kubectl get modelcaches -A` and "
                "their status.conditions say why (credentials, a missing revision, disk).",
            },
        },
        {
            "alert": "SpecdecOperatorDown",
            "expr": f"absent(up{{{OPERATOR_JOB}}} == 1)",
            "for": w.operator_down,
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": "No specdec operator is scraped",
                "description": "No operator replica answered Prometheus for " + w.operator_down + ": nothing "
                "reconciles SpeculativeDeployments, EngineBuilds or ModelCaches.",
            },
        },
        {
            "alert": "SpecdecOperatorNotLeading",
            "expr": (f"(max({SPECULATIVE_DEPLOYMENTS}) > 0) unless (sum(rate({RECONCILES}[{w.leading}])) > 0)"),
            "for": w.not_leading,
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": "No specdec operator replica is leading",
                "description": "Operators run and see SpeculativeDeployments, but none reconciled anything in "
                + w.leading
                + " (a leader reconciles everything every resync; standbys count no "
                "reconciles): check the leader-election Lease and the operators' logs.",
            },
        },
        {
            "alert": "SpecdecReconcileErrors",
            "expr": (
                f"{_rate(RECONCILES, w.rate, by='kind', selector=ERROR)} / {_rate(RECONCILES, w.rate, by='kind')} > 0.1"
            ),
            "for": w.reconcile_errors,
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "{{ $labels.kind }} reconciles fail",
                "description": "{{ $value | humanizePercentage }} of {{ $labels.kind }} reconciles over "
                + w.rate
                + " raised an error: the operator's log has the tracebacks.",
            },
        },
    ]
    return [{"name": "specdec-runtime", "rules": runtime}, {"name": "specdec-operator", "rules": operator}]


def alert_names() -> list[str]:
    return [r["alert"] for group in rules() for r in group["rules"]]


def rule_file(w: Windows = Windows()) -> dict[str, Any]:
    """A Prometheus rule file (also the `spec` of a prometheus-operator PrometheusRule)."""
    return {"groups": rules(w)}
