"""What a first write costs the API server: a create (POST) against a server-side apply of the same object.

    PYTHONPATH=operator:. .venv/bin/python bench/apply_cost.py --kubeconfig KUBECONFIG [--count 300] [--rounds 2]

The objects are the operator's own runtime children for `examples/llama-2-13b-draft-7b-logits.yaml` (its
ConfigMap, Deployment and Service, written by specdec.kube.client.Kube: the operator's requests), renamed per copy
and without ownerReferences (their owner does not exist: the garbage collector would delete them meanwhile).
Each round writes `--count` copies of each kind one after another, once by create and once by apply, each
into a fresh namespace, and measures the CPU seconds kube-apiserver and etcd spent (/proc) and the wall time.
Run it on an otherwise idle local cluster (`specdec dev up --cluster-only`); figures are per write, medians
over rounds, and the apply / create ratio.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
import uuid
from pathlib import Path

import yaml
from bench.processes import cluster_cpu
from kubernetes import client, config

from specdec.builders.serving import build_config_map, build_deployment, build_service
from specdec.kube.client import Kube
from specdec.plan import Plan, plan
from specdec.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "llama-2-13b-draft-7b-logits.yaml"


def server_cpu(cluster: Path) -> float:
    """CPU seconds so far of the kube-apiserver and etcd of the cluster in directory `cluster`."""
    seconds = cluster_cpu(cluster)
    return seconds.get("kube-apiserver", 0.0) + seconds.get("etcd", 0.0)


def children(namespace: str) -> list[dict]:
    body = yaml.safe_load(EXAMPLE.read_text())
    body["metadata"] = {"name": "cost", "namespace": namespace, "uid": str(uuid.uuid4())}
    p = plan(body, Settings())
    assert isinstance(p, Plan), p
    objs = [build_config_map(p, "uid", None), build_deployment(p, "uid", Settings()), build_service(p, "uid")]
    for obj in objs:
        obj["metadata"].pop("ownerReferences", None)
    return objs


def run(kube: Kube, core: client.CoreV1Api, cluster: Path, how: str, count: int) -> dict[str, dict[str, float]]:
    namespace = f"cost-{how}-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": namespace}})
    out = {}
    try:
        for template in children(namespace):
            copies = []
            for i in range(count):
                obj = copy.deepcopy(template)
                obj["metadata"]["name"] = f"{template['metadata']['name']}-{i}"
                copies.append(obj)
            cpu, start = server_cpu(cluster), time.monotonic()
            for obj in copies:
                kube.create(obj) if how == "create" else kube.server_side_apply(obj)
            out[template["kind"]] = {
                "cpu_ms": (server_cpu(cluster) - cpu) / count * 1000,
                "wall_ms": (time.monotonic() - start) / count * 1000,
            }
    finally:
        core.delete_namespace(namespace)
    return out


def cost_parser(doc: str, rounds: int) -> argparse.ArgumentParser:
    """The arguments every write-cost script takes: --kubeconfig (a local cluster's, in its directory, whose
    processes' CPU is measured), --count, --rounds."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kubeconfig", required=True, type=Path)
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=rounds)
    return parser


def cost_clients(args: argparse.Namespace) -> tuple[client.ApiClient, Kube, client.CoreV1Api]:
    configuration = client.Configuration()
    config.load_kube_config(str(args.kubeconfig), client_configuration=configuration)
    api = client.ApiClient(configuration)
    return api, Kube(api), client.CoreV1Api(api)


def main() -> int:
    args = cost_parser(__doc__, rounds=2).parse_args()
    _, kube, core = cost_clients(args)
    rounds: dict[str, list[dict[str, dict[str, float]]]] = {"create": [], "apply": []}
    for _ in range(args.rounds):
        for how in rounds:
            rounds[how].append(run(kube, core, args.kubeconfig.parent, how, args.count))
    result = {}
    for kind in rounds["create"][0]:
        row = {
            how: {k: statistics.median(r[kind][k] for r in rounds[how]) for k in ("cpu_ms", "wall_ms")}
            for how in rounds
        }
        row["apply/create cpu"] = row["apply"]["cpu_ms"] / row["create"]["cpu_ms"]
        result[kind] = row
        print(
            f"{kind:12} create {row['create']['cpu_ms']:.2f} ms CPU ({row['create']['wall_ms']:.1f} ms wall)  "
            f"apply {row['apply']['cpu_ms']:.2f} ms CPU ({row['apply']['wall_ms']:.1f} ms wall)  "
            f"apply/create {row['apply/create cpu']:.2f}"
        )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
