"""`promtool test rules` cases for every alert of specdec.observability.alerts: one where it fires and one
where it does not, on synthetic series at the production windows (1 sample a minute)."""

from __future__ import annotations

from typing import Any

from specdec.observability import alerts

RT = 'namespace="ns", deployment="llama", job="specdec-runtime", pod="llama-0"'
OP = 'namespace="specdec-system", job="specdec-operator", instance="10.0.0.1:9090"'
WHO = {"namespace": "ns", "deployment": "llama"}


def _series(metric: str, labels: str, values: str) -> dict[str, str]:
    return {"series": f"{metric}{{{labels}}}", "values": values}


def _speculation(accepted: int, steps: int, draft: int, draft_s: int, target_s: int) -> list[dict[str, str]]:
    return [
        _series("specdec_accepted_draft_tokens_total", RT, f"0+{accepted}x60"),
        _series("specdec_speculative_steps_total", RT, f"0+{steps}x60"),
        _series("specdec_draft_tokens_total", RT, f"0+{draft}x60"),
        _series("specdec_draft_seconds_total", RT, f"0+{draft_s}x60"),
        _series("specdec_target_seconds_total", RT, f"0+{target_s}x60"),
    ]


PER = "{{ $labels.namespace }}/{{ $labels.deployment }}"


def annotations(alert: str, values: dict[str, str]) -> dict[str, str]:
    """The alert's annotations with each template in `values` replaced by what it must render to: the
    figures it states (the speedup, the acceptance) are checked, not only that it fires."""
    rule = next(r for g in alerts.rules() for r in g["rules"] if r["alert"] == alert)
    out = {}
    for key, text in rule["annotations"].items():
        for template, value in values.items():
            text = text.replace(template, value)
        assert "{{" not in text, f"{alert}.{key}: no expected value for a template in {text!r}"
        out[key] = text
    return out


def _case(
    alert: str,
    series: list[dict[str, str]],
    eval_time: str,
    fires: list[dict[str, str]],
    values: dict[str, str] | None = None,
) -> dict[str, Any]:
    expected = [{"exp_labels": labels, "exp_annotations": annotations(alert, values or {})} for labels in fires]
    return {
        "interval": "1m",
        "input_series": series,
        "alert_rule_test": [{"eval_time": eval_time, "alertname": alert, "exp_alerts": expected}],
    }


def cases() -> dict[str, list[dict[str, Any]]]:
    """Alert name -> [the firing case, the quiet case(s)]."""
    warning, critical = {"severity": "warning"}, {"severity": "critical"}
    requests = [
        _series("specdec_requests_total", RT + ', endpoint="/v1/completions", status="200"', "0+10x60"),
        _series(
            "specdec_runtime_info", RT + ', mode="draft_target", backend="triton", model="m", route="triton"', "1x60"
        ),
    ]
    none_mode = [
        requests[0],
        _series("specdec_runtime_info", RT + ', mode="none", backend="triton", model="m", route="triton"', "1x60"),
        _series("specdec_draft_tokens_total", RT, "0x60"),
    ]
    return {
        "SpecdecSpeculationNotPayingOff": [
            # E = 1.1 tokens per step at twice the cost of a step: 0.55x
            _case(
                "SpecdecSpeculationNotPayingOff",
                _speculation(1, 10, 40, 5, 5),
                "30m",
                [{**warning, **WHO}],
                {PER: "ns/llama", '{{ $value | printf "%.2f" }}': "0.55"},
            ),
            # E = 4 at 1.1 times the cost: 3.6x
            _case("SpecdecSpeculationNotPayingOff", _speculation(30, 10, 40, 1, 10), "30m", []),
        ],
        "SpecdecAcceptanceCollapsed": [
            # 0.6 for 40 minutes, then 0.01
            _case(
                "SpecdecAcceptanceCollapsed",
                [
                    _series("specdec_accepted_draft_tokens_total", RT, "0+60x40 2400+1x30"),
                    _series("specdec_draft_tokens_total", RT, "0+100x70"),
                ],
                "60m",
                [{**warning, **WHO}],
                {PER: "ns/llama", '{{ $value | printf "%.3f" }}': "0.010"},
            ),
            _case(
                "SpecdecAcceptanceCollapsed",
                [
                    _series("specdec_accepted_draft_tokens_total", RT, "0+60x70"),
                    _series("specdec_draft_tokens_total", RT, "0+100x70"),
                ],
                "60m",
                [],
            ),
        ],
        "SpecdecSpeculationNotDrafting": [
            _case(
                "SpecdecSpeculationNotDrafting",
                requests + [_series("specdec_draft_tokens_total", RT, "0x60")],
                "30m",
                [{**warning, **WHO}],
                {PER: "ns/llama"},
            ),
            _case(
                "SpecdecSpeculationNotDrafting",
                requests + [_series("specdec_draft_tokens_total", RT, "0+50x60")],
                "30m",
                [],
            ),
            _case("SpecdecSpeculationNotDrafting", none_mode, "30m", []),
        ],  # mode none drafts nothing by design
        "SpecdecEngineBuildFailing": [
            _case(
                "SpecdecEngineBuildFailing",
                [_series("specdec_engine_builds", OP + ', phase="Failed"', "1x40")],
                "30m",
                [{**warning, "namespace": "specdec-system"}],
                {"{{ $value }}": "1"},
            ),
            _case(
                "SpecdecEngineBuildFailing",
                [
                    _series("specdec_engine_builds", OP + ', phase="Failed"', "0x40"),
                    _series("specdec_engine_builds", OP + ', phase="Succeeded"', "2x40"),
                ],
                "30m",
                [],
            ),
        ],
        "SpecdecModelFetchFailing": [
            _case(
                "SpecdecModelFetchFailing",
                [_series("specdec_model_caches", OP + ', phase="Failed"', "1x40")],
                "30m",
                [{**warning, "namespace": "specdec-system"}],
                {"{{ $value }}": "1"},
            ),
            _case(
                "SpecdecModelFetchFailing",
                [_series("specdec_model_caches", OP + ', phase="Fetched"', "1x40")],
                "30m",
                [],
            ),
        ],
        "SpecdecOperatorDown": [
            _case("SpecdecOperatorDown", [_series("up", OP, "1x5 0x20")], "20m", [critical]),
            _case("SpecdecOperatorDown", [_series("up", OP, "1x20")], "20m", []),
        ],
        "SpecdecOperatorNotLeading": [
            _case(
                "SpecdecOperatorNotLeading",
                [
                    _series("specdec_speculative_deployments", OP + ', phase="Ready"', "3x60"),
                    _series(
                        "specdec_reconcile_total", OP + ', kind="SpeculativeDeployment", result="ok"', "0+5x10 50x50"
                    ),
                ],
                "40m",
                [critical],
            ),
            _case(
                "SpecdecOperatorNotLeading",
                [
                    _series("specdec_speculative_deployments", OP + ', phase="Ready"', "3x60"),
                    _series("specdec_reconcile_total", OP + ', kind="SpeculativeDeployment", result="ok"', "0+1x60"),
                ],
                "40m",
                [],
            ),
        ],
        "SpecdecReconcileErrors": [
            _case(
                "SpecdecReconcileErrors",
                [
                    _series("specdec_reconcile_total", OP + ', kind="EngineBuild", result="error"', "0+5x40"),
                    _series("specdec_reconcile_total", OP + ', kind="EngineBuild", result="ok"', "0+5x40"),
                ],
                "30m",
                [{**warning, "kind": "EngineBuild"}],
                {"{{ $labels.kind }}": "EngineBuild", "{{ $value | humanizePercentage }}": "50%"},
            ),
            _case(
                "SpecdecReconcileErrors",
                [
                    _series("specdec_reconcile_total", OP + ', kind="EngineBuild", result="error"', "0x40"),
                    _series("specdec_reconcile_total", OP + ', kind="EngineBuild", result="ok"', "0+5x40"),
                ],
                "30m",
                [],
            ),
        ],
    }
