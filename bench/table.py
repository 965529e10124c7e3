"""The bench's results as the table it prints."""

from __future__ import annotations

from bench.floor import FANOUT_WRITERS
from bench.metrics import mean_timings


def _ms(value: float) -> str:
    return f"{value:.3f}"


def render_table(results: dict) -> str:
    lines = [
        f"specdec-operator bench, {results['date']}, commit {results['commit']}, {results['machine']}",
        "",
        "| stage (one deployment) | p50 (s) | p95 (s) | floor p50 (s) | operator/floor |",
        "|---|---|---|---|---|",
    ]
    for stage, row in results["latency"].items():
        lines.append(
            f"| {stage} | {row['p50']:.3f} | {row['p95']:.3f} | {row['floor_p50']:.3f} | {row['ratio_p50']:.1f} |"
        )
    lines += [
        "",
        "| N | all Ready (s) | applied in (s) | apply→Job p50/p95 (s) | floor | ratio | "
        "Jobs done→Deployment p50/p95 (s) | floor | ratio | peak RSS (MiB) | CPU (s) | API requests |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in results["scales"]:
        job, dep = s["apply_to_job"], s["jobs_done_to_deployment"]
        requests = ", ".join(f"{k.split()[1]} {v:.0f}" for k, v in s["requests"].items() if k.startswith("requests"))
        lines.append(
            f"| {s['ready']}/{s['deployments']} | {s['all_ready_seconds']:.1f} | {s['apply_seconds']:.1f} | "
            f"{_ms(job['p50'])}/{_ms(job['p95'])} | {_ms(job['floor_p50'])} | {job['ratio_p50']:.1f} | "
            f"{_ms(dep['p50'])}/{_ms(dep['p95'])} | {_ms(dep['floor_p50'])} | {dep['ratio_p50']:.1f} | "
            f"{s['operator_peak_rss_mib']:.0f} | {s['operator_cpu_seconds']:.1f} | {requests} |"
        )
    for s in results["scales"]:
        dep, fanout = s["jobs_done_to_deployment"], s["floor"]["fanout"]
        lines.append(
            f"N={s['deployments']}: fan-out floor ({s['deployments']} released at once, {FANOUT_WRITERS} "
            f"writers): Jobs done→Deployment p50/p95 {_ms(fanout['p50'])}/{_ms(fanout['p95'])}, all in "
            f"{fanout['all_seconds']:.1f}s; operator/fan-out floor p50 {dep['fanout_ratio_p50']:.2f}"
        )
    for s in results["scales"]:
        job, dep, loaded = s["apply_to_job"], s["jobs_done_to_deployment"], s["loaded_floor"]
        lines.append(
            f"N={s['deployments']}: loaded floor (the same stage's writes made directly during the fleet, "
            f"{s['probes']['apply_to_job']}+{s['probes']['jobs_done_to_deployment']} probes): apply→Job "
            f"p50/p95 {_ms(loaded['apply_to_job']['p50'])}/{_ms(loaded['apply_to_job']['p95'])}, "
            f"operator/loaded floor p50 {job['loaded_ratio_p50']:.2f}, p95 {job['loaded_ratio_p95']:.2f}; "
            f"Jobs done→Deployment p50/p95 {_ms(loaded['jobs_done_to_deployment']['p50'])}/"
            f"{_ms(loaded['jobs_done_to_deployment']['p95'])}, "
            f"operator/loaded floor p50 {dep['loaded_ratio_p50']:.2f}, p95 {dep['loaded_ratio_p95']:.2f}"
        )
    for s in results["scales"]:  # a Job done releases every deployment that waited for it at once: a fan-out
        lines.append(
            f"N={s['deployments']}: Jobs done→Deployment by what released it, n p50/p95: "
            + "; ".join(
                f"{cause} {row['n']} {_ms(row['p50'])}/{_ms(row['p95'])}"
                for cause, row in s["jobs_done_to_deployment_by_release"].items()
            )
        )
    for s in results["scales"]:
        if "release_chain" in s:
            lines.append(
                f"N={s['deployments']}: released by a Job's end, on the API server's clock (audit log), p50/p95: "
                + "; ".join(f"{part} {_ms(row['p50'])}/{_ms(row['p95'])}" for part, row in s["release_chain"].items())
            )
    for s in results["scales"]:
        lines.append(
            f"N={s['deployments']}: apply→Job on the API server's clock (audit log), p50/p95: "
            + "; ".join(f"{part} {_ms(row['p50'])}/{_ms(row['p95'])}" for part, row in s["apply_chain"].items())
        )
    for s in results["scales"]:
        lines.append(
            f"N={s['deployments']}: EngineBuilds {s['engine_builds']}, Jobs {s['jobs']}, distinct recipes "
            f"{s['distinct_recipes']} (expected {s['expected_recipes']}); reconciles "
            + ", ".join(f"{k.split()[1]} {v:.0f}" for k, v in s["requests"].items() if k.startswith("reconciles"))
            + f"; resync passes ended in it {s['requests'].get('resync_duration_seconds_count', 0):.0f}"
            + "; mean seconds: "
            + ", ".join(f"{k} {v:.3f}" for k, v in mean_timings(s["requests"]).items())
            + f"; writes {dict(sorted(s['writes'].items(), key=lambda kv: -kv[1]))}"
            + f"; all clients' writes {s.get('writes_by_client')}"
            + f"; CPU seconds by process {s.get('cpu_seconds_by_process')}"
        )
    idle_row = results.get("idle")
    if idle_row:
        r = idle_row["resync"]
        lines += [
            f"resync pass at N={results['scales'][-1]['deployments']}: {r['seconds']:.1f}s, "
            f"writes {r['writes'] or 0} (after all Ready, before the pass: {r.get('writes_before_it') or 0})",
            f"idle {idle_row['seconds']:.0f}s (between resyncs): {idle_row['operator_writes']} operator writes "
            f"{idle_row['writes_by_kind']}, {idle_row['cpu_seconds']:.2f} CPU s "
            f"({idle_row['cpu_percent_of_a_core']:.1f} % of a core), RSS {idle_row['rss_mib']:.0f} MiB",
        ]
    return "\n".join(lines)
