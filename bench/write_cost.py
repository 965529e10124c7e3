"""What a SpeculativeDeployment's writes cost the API server, by CRD variant, beside an Event and a ConfigMap.

    specdec dev up --cluster-only --name cost
    PYTHONPATH=operator:. .venv/bin/python bench/write_cost.py \
        --kubeconfig ~/.cache/specdec/kwok/clusters/cost/kubeconfig.yaml [--count 300] [--rounds 3] \
        [--crds full,no-cel,one-mode,plus-toy]

For each CRD variant of `--crds` (bench/crd_variants.py: the CRD of `crds/`, without its CEL rules, with one
mode, with one mode more), in turn within each round: the variant is applied, then `--count`
SpeculativeDeployments of `examples/llama-2-13b-draft-7b-logits.yaml` are created one after another in a fresh
namespace (no operator runs), then each one's status patched as the operator patches it (a new phase), then the
same patch again (nothing changes). Once per round, `--count` Events and small ConfigMaps. The CPU seconds
kube-apiserver and etcd of that cluster spent per write (/proc) and the wall time, medians over `--rounds`, each
in a namespace of its own, deleted (and waited for: its deletion is API server work too) before the next; each
variant's CPU against the full CRD's, as the median of the rounds' ratios. The cluster keeps the full CRD
afterwards. The operator writes an SD's status ~3.4 times per deployment in a fleet (bench/run.py): this says
what each costs the API server.
"""

from __future__ import annotations

import copy
import json
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from bench.apply_cost import EXAMPLE, cost_clients, cost_parser, server_cpu
from bench.crd_variants import VARIANTS, sd_crd
from kubernetes import client
from kubernetes.client.rest import ApiException

from specdec import conditions
from specdec.kube.client import Kube

# After a CRD is Established, the API server swaps its handler for the new schema and rebuilds its OpenAPI
# documents in the background: the next measurement waits until its CPU is quiet.
QUIET_CPU = 0.05  # CPU seconds per second of kube-apiserver + etcd, over QUIET_SECONDS
QUIET_SECONDS = 2.0
Figures = dict[str, dict[str, float]]


def measure(cluster: Path, count: int, write: Callable[[int], object]) -> dict[str, float]:
    cpu, start = server_cpu(cluster), time.monotonic()
    for i in range(count):
        write(i)
    return {"cpu_ms": (server_cpu(cluster) - cpu) / count * 1000, "wall_ms": (time.monotonic() - start) / count * 1000}


def quiet(cluster: Path, timeout: float = 60.0) -> None:
    """Wait until the cluster's API server and etcd are (nearly) idle, for at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        before = server_cpu(cluster)
        time.sleep(QUIET_SECONDS)
        if server_cpu(cluster) - before < QUIET_CPU * QUIET_SECONDS:
            return


def established(crd: client.V1CustomResourceDefinition) -> bool:
    conditions = crd.status.conditions if crd.status else None
    return any(c.type == "Established" and c.status == "True" for c in conditions or [])


def apply_crd(extensions: client.ApiextensionsV1Api, cluster: Path, crd: dict[str, Any]) -> None:
    """Create or replace the CRD, then wait until it is Established and the API server is quiet again."""
    name = crd["metadata"]["name"]
    body = copy.deepcopy(crd)
    try:
        existing = extensions.read_custom_resource_definition(name)
        body["metadata"]["resourceVersion"] = existing.metadata.resource_version if existing.metadata else None
        extensions.replace_custom_resource_definition(name, body)
    except ApiException as error:
        if error.status != 404:
            raise
        body["metadata"].pop("resourceVersion", None)
        extensions.create_custom_resource_definition(body)
    deadline = time.monotonic() + 60
    while not established(extensions.read_custom_resource_definition(name)):
        if time.monotonic() > deadline:
            raise RuntimeError(f"CRD {name} not Established after 60 s")
        time.sleep(0.5)
    quiet(cluster)


def in_namespace(core: client.CoreV1Api, what: Callable[[str], Figures]) -> Figures:
    """`what` run in a fresh namespace, deleted (and waited for) afterwards."""
    namespace = f"cost-sd-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": namespace}})
    try:
        return what(namespace)
    finally:
        core.delete_namespace(namespace)
        while True:
            try:
                core.read_namespace(namespace)
            except ApiException as error:
                if error.status == 404:
                    break
                raise
            time.sleep(1)


def sd_writes(kube: Kube, cluster: Path, count: int, namespace: str) -> Figures:
    example = yaml.safe_load(EXAMPLE.read_text())

    def create_sd(i: int) -> None:
        body = copy.deepcopy(example)
        body["metadata"] = {"name": f"sd-{i}", "namespace": namespace}
        kube.create(body)

    def patch_status(phase: str) -> Callable[[int], object]:
        return lambda i: kube.patch(
            "SpeculativeDeployment",
            namespace,
            f"sd-{i}",
            {"status": {"observedGeneration": 1, "phase": phase}},
            subresource="status",
        )

    return {
        "SD create": measure(cluster, count, create_sd),
        "SD status patch (a new phase)": measure(cluster, count, patch_status("RollingOut")),
        "SD status patch (nothing changes)": measure(cluster, count, patch_status("RollingOut")),
    }


def other_writes(kube: Kube, cluster: Path, count: int, namespace: str) -> Figures:
    owner = kube.create(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner", "namespace": namespace}}
    )[0]
    return {
        "Event create": measure(
            cluster, count, lambda i: kube.events.post(owner, "Ready", "serving", False, conditions.now())
        ),
        "ConfigMap create (1 kB)": measure(
            cluster,
            count,
            lambda i: kube.create(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": f"cm-{i}", "namespace": namespace},
                    "data": {"config.json": "x" * 1024},
                }
            ),
        ),
    }


def medians(rounds: list[Figures]) -> Figures:
    return {
        what: {k: statistics.median(r[what][k] for r in rounds) for k in ("cpu_ms", "wall_ms")} for what in rounds[0]
    }


def paired_ratios(rounds: list[Figures], full: list[Figures]) -> dict[str, float]:
    """Per write, the median over rounds of a variant's CPU over the full CRD's in the same round: a round's
    variants follow each other within a minute, so this cancels the load that moves between rounds."""
    return {
        what: statistics.median(r[what]["cpu_ms"] / f[what]["cpu_ms"] for r, f in zip(rounds, full, strict=True))
        for what in rounds[0]
    }


def main() -> int:
    parser = cost_parser(__doc__, rounds=3)
    parser.add_argument(
        "--crds",
        default=",".join(VARIANTS),
        help=f"CRD variants, comma-separated, of {', '.join(VARIANTS)} (default: all)",
    )
    args = parser.parse_args()
    variants = args.crds.split(",")
    crds = {variant: sd_crd(variant) for variant in variants}
    api, kube, core = cost_clients(args)
    extensions, cluster = client.ApiextensionsV1Api(api), args.kubeconfig.parent
    by_variant: dict[str, list[Figures]] = {variant: [] for variant in variants}
    others: list[Figures] = []
    try:
        for r in range(args.rounds):  # interleaved, in a rotated order: a machine's load changes over minutes
            for variant in variants[r % len(variants) :] + variants[: r % len(variants)]:
                apply_crd(extensions, cluster, crds[variant])
                by_variant[variant].append(in_namespace(core, lambda ns: sd_writes(kube, cluster, args.count, ns)))
                print(
                    f"round {r + 1}, CRD {variant}: SD create {by_variant[variant][-1]['SD create']['cpu_ms']:.2f} "
                    "ms CPU",
                    file=sys.stderr,
                )
            others.append(in_namespace(core, lambda ns: other_writes(kube, cluster, args.count, ns)))
    finally:
        if variants != ["full"]:
            apply_crd(extensions, cluster, sd_crd("full"))
    result: dict[str, Figures] = {variant: medians(rounds) for variant, rounds in by_variant.items()}
    result["other"] = medians(others)
    ratios = {
        variant: paired_ratios(rounds, by_variant["full"])
        for variant, rounds in by_variant.items()
        if "full" in by_variant and variant != "full"
    }
    for variant in variants:
        print(f"CRD {variant}:")
        for what, row in result[variant].items():
            versus = f"  {ratios[variant][what]:.2f} x full (median of the rounds' ratios)" if variant in ratios else ""
            print(f"  {what:36} {row['cpu_ms']:6.2f} ms CPU  ({row['wall_ms']:.1f} ms wall){versus}")
    for what, row in result["other"].items():
        print(f"{what:38} {row['cpu_ms']:6.2f} ms CPU  ({row['wall_ms']:.1f} ms wall)")
    print(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "result": result, "x_full": ratios}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
