"""GPU-seconds that build pods hold while no GPU step runs, and per deployment.

    PYTHONPATH=operator:. .venv/bin/python bench/gpu_seconds.py --kubeconfig KUBECONFIG \
        [--before-tree /tmp/wt-before] [--step-seconds fetch=20,convert=10,quantize=10,build=30]

On a local cluster (`specdec dev up --cluster-only`), each operator tree (this one, "after", and with
--before-tree another checkout, "before", e.g. the commit before ModelCache) runs in turn: its CRDs
are applied, its operator runs as a process on namespaces of its own, the examples are deployed, each
in its namespace, with their Job pods' simulated step seconds set by annotations, until every
deployment is Ready. GPU time is then read from the Job pods (bench/gpu_time.py). Writes
bench/results/gpu-seconds-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import yaml
from bench.gpu_time import pod_gpu_time
from kubernetes import client, config
from tests.conftest import free_port
from tests.operator_runner import OperatorProcess

from specdec.api.models import GROUP, VERSION
from specdec_dev import simulated_steps, toolchain

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ("llama-2-13b-draft-7b-logits.yaml", "llama-3.1-70b-fp8-draft-1b.yaml")
OPERATOR_ENV = {"SPECDEC_RESYNC_SECONDS": "5", "SPECDEC_RUNTIME_IMAGE": "registry.invalid/specdec-runtime:bench"}
SD_CRD = "speculativedeployments.specdec.io"


def commit(tree: Path) -> str:
    return subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True, text=True
    ).stdout.strip()


def install_crds(kubeconfig: Path, tree: Path) -> None:
    kubectl = str(toolchain.bin_dir() / "kubectl")
    base = [kubectl, "--kubeconfig", str(kubeconfig)]
    subprocess.run(
        [*base, "apply", "--server-side", "--force-conflicts", "-f", str(tree / "crds")],
        check=True,
        capture_output=True,
    )
    names = [yaml.safe_load(p.read_text())["metadata"]["name"] for p in sorted((tree / "crds").glob("*.yaml"))]
    subprocess.run(
        [*base, "wait", "--for=condition=Established", "--timeout=60s", *(f"crd/{n}" for n in names)],
        check=True,
        capture_output=True,
    )


def has_fetch_placement(api: client.ApiClient) -> bool:
    """Whether the installed SpeculativeDeployment CRD has spec.cache.fetch (fetch Jobs of their own)."""
    crd = client.ApiextensionsV1Api(api).read_custom_resource_definition(SD_CRD)
    spec = crd.spec.versions[0].schema.open_apiv3_schema.properties["spec"]
    cache = (spec.properties or {}).get("cache")
    return bool(cache and "fetch" in (cache.properties or {}))


def ready(custom: client.CustomObjectsApi, namespace: str, name: str) -> bool:
    obj = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "speculativedeployments", name)
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def job_pods(api: client.ApiClient, namespace: str) -> list[dict]:
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace).items
    return [
        api.sanitize_for_serialization(p)
        for p in pods
        if any(o.kind == "Job" for o in p.metadata.owner_references or [])
    ]


def run_tree(
    api: client.ApiClient,
    kubeconfig: Path,
    label: str,
    tree: Path,
    step_seconds: dict[str, float],
    logs: Path,
    timeout: float,
) -> list[dict]:
    """Deploy the examples with the operator of `tree`; the GPU time of each deployment's Job pods."""
    install_crds(kubeconfig, tree)
    fetch_placement = has_fetch_placement(api)
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    namespaces = {name: f"gpu-{label}-{uuid.uuid4().hex[:6]}" for name in EXAMPLES}
    for namespace in namespaces.values():
        core.create_namespace({"metadata": {"name": namespace}})
    port = free_port()
    operator = OperatorProcess(
        kubeconfig,
        logs / f"operator-{label}.log",
        port,
        [
            "operator",
            *(a for n in namespaces.values() for a in ("--namespace", n)),
            "--liveness",
            f"http://127.0.0.1:{port}/healthz",
        ],
        {**OPERATOR_ENV, "PYTHONPATH": str(tree / "operator")},
        isolated=True,
    )
    operator.start()
    try:
        applied = {}
        for example, namespace in namespaces.items():
            body = simulated_steps.deployment_with_step_seconds(
                yaml.safe_load((tree / "examples" / example).read_text()), step_seconds, fetch_placement
            )
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "speculativedeployments", body)
            applied[example] = (time.time(), body["metadata"]["name"])
        waiting, ready_after = dict(applied), {}
        deadline = time.monotonic() + timeout
        while waiting and time.monotonic() < deadline:
            for example, (start, name) in list(waiting.items()):
                if ready(custom, namespaces[example], name):
                    ready_after[example] = round(time.time() - start, 1)
                    del waiting[example]
            time.sleep(0.5)
        if waiting:
            raise SystemExit(
                f"{label}: not Ready after {timeout:.0f}s: {', '.join(waiting)} (operator log {operator.log_path})"
            )
        now = time.time()
        results = []
        for example, namespace in namespaces.items():
            pods = [pod_gpu_time(p, now) for p in job_pods(api, namespace)]
            results.append(
                {
                    "example": example,
                    "namespace": namespace,
                    "readySeconds": ready_after[example],
                    "buildGpuSeconds": sum(p.gpu_seconds for p in pods),
                    "idleGpuSeconds": sum(p.idle_gpu_seconds for p in pods),
                    "pods": [
                        {
                            "pod": p.pod,
                            "gpus": p.gpus,
                            "heldSeconds": p.held_seconds,
                            "gpuStepSeconds": p.gpu_step_seconds,
                        }
                        for p in pods
                    ],
                }
            )
        return results
    finally:
        operator.stop()
        for namespace in namespaces.values():
            core.delete_namespace(namespace, propagation_policy="Background")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kubeconfig", type=Path, required=True, help="a local cluster (`specdec dev up`)")
    parser.add_argument("--before-tree", type=Path, help="a checkout of the operator to compare with")
    parser.add_argument("--step-seconds", default="fetch=20,convert=10,quantize=10,build=30")
    parser.add_argument("--timeout", type=float, default=600, help="per tree, until every deployment is Ready")
    args = parser.parse_args(argv)
    step_seconds = simulated_steps.parse(args.step_seconds)
    api = config.new_client_from_config(config_file=str(args.kubeconfig))
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H%M%S%z")
    logs = Path(tempfile.mkdtemp(prefix="gpu-seconds-"))  # the operators' logs
    trees = ([("before", args.before_tree.resolve())] if args.before_tree else []) + [("after", ROOT)]
    runs = {
        label: {
            "commit": commit(tree),
            "deployments": run_tree(api, args.kubeconfig, label, tree, step_seconds, logs, args.timeout),
        }
        for label, tree in trees
    }
    result = {
        "bench": "gpu-seconds",
        "commit": commit(ROOT),
        "stepSeconds": step_seconds,
        "examples": list(EXAMPLES),
        "runs": runs,
    }
    out = ROOT / "bench" / "results" / f"gpu-seconds-{stamp}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'run':<7} {'commit':<9} {'example':<36} {'ready s':>8} {'build GPU-s':>12} {'idle GPU-s':>11}")
    for label, run in runs.items():
        for d in run["deployments"]:
            print(
                f"{label:<7} {run['commit']:<9} {d['example']:<36} {d['readySeconds']:>8} "
                f"{d['buildGpuSeconds']:>12.0f} {d['idleGpuSeconds']:>11.0f}"
            )
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
