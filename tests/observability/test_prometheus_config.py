"""The local Prometheus' configuration: the PodMonitor-like runtime job and the operator's, valid for promtool."""

from __future__ import annotations

import subprocess
from pathlib import Path

from specdec_dev.prometheus import OPERATOR_JOB, RUNTIME_JOB, Prometheus, scrape_config


def test_runtime_pods_are_found_like_a_pod_monitor_finds_them(tmp_path: Path):
    config = scrape_config(tmp_path / "kubeconfig.yaml", ["127.0.0.1:18081"], namespaces=["a"])
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs[OPERATOR_JOB]["static_configs"] == [{"targets": ["127.0.0.1:18081"]}]
    runtime = jobs[RUNTIME_JOB]
    assert runtime["kubernetes_sd_configs"] == [
        {"role": "pod", "kubeconfig_file": str(tmp_path / "kubeconfig.yaml"), "namespaces": {"names": ["a"]}}
    ]
    keeps = {r["source_labels"][0]: r["regex"] for r in runtime["relabel_configs"] if r.get("action") == "keep"}
    assert keeps == {
        "__meta_kubernetes_pod_label_app_kubernetes_io_component": "runtime|runtime-canary",
        "__meta_kubernetes_pod_container_port_name": "http",
    }
    targets = {r["target_label"]: r["source_labels"][0] for r in runtime["relabel_configs"] if "target_label" in r}
    assert targets["deployment"] == "__meta_kubernetes_pod_label_app_kubernetes_io_instance"


def test_promtool_accepts_the_configuration(promtool: Path, tmp_path: Path):
    kubeconfig = tmp_path / "kubeconfig.yaml"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    server = Prometheus(tmp_path / "prometheus", 19999)
    server.write(kubeconfig, ["127.0.0.1:18081"], interval="1s")
    result = subprocess.run(
        [str(promtool), "check", "config", str(server.directory / "prometheus.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
