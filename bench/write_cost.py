"""What a SpeculativeDeployment's writes cost the API server, beside an Event and a small ConfigMap.

    specdec dev up --cluster-only --name cost && ~/.cache/specdec/bin/kubectl \
        --kubeconfig ~/.cache/specdec/kwok/clusters/cost/kubeconfig.yaml apply -f crds/
    PYTHONPATH=operator:. .venv/bin/python bench/write_cost.py \
        --kubeconfig ~/.cache/specdec/kwok/clusters/cost/kubeconfig.yaml [--count 300] [--rounds 3]

`--count` SpeculativeDeployments of `examples/llama-2-13b-draft-7b-logits.yaml` created one after another in a
fresh namespace (no operator runs), then each one's status patched as the operator patches it (a new phase),
then the same patch again (nothing changes), then `--count` Events and small ConfigMaps: the CPU seconds
kube-apiserver and etcd spent per write (/proc) and the wall time, medians over `--rounds`, each in a namespace
of its own, deleted (and waited for: its deletion is API server work too) before the next. The operator writes
an SD's status ~3.3 times per deployment in a fleet (bench/run.py): this says what each costs the API server.
"""

from __future__ import annotations

import copy
import json
import statistics
import time
import uuid
from collections.abc import Callable

import yaml
from bench.apply_cost import EXAMPLE, cost_command, server_cpu
from kubernetes import client
from kubernetes.client.rest import ApiException

from specdec import conditions
from specdec.kube.client import Kube


def measure(count: int, write: Callable[[int], object]) -> dict[str, float]:
    cpu, start = server_cpu(), time.monotonic()
    for i in range(count):
        write(i)
    return {"cpu_ms": (server_cpu() - cpu) / count * 1000, "wall_ms": (time.monotonic() - start) / count * 1000}


def one_round(kube: Kube, core: client.CoreV1Api, count: int) -> dict[str, dict[str, float]]:
    namespace = f"cost-sd-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": namespace}})
    example = yaml.safe_load(EXAMPLE.read_text())
    sds: list[dict] = []

    def create_sd(i: int) -> None:
        body = copy.deepcopy(example)
        body["metadata"] = {"name": f"sd-{i}", "namespace": namespace}
        sds.append(kube.create(body)[0])

    def patch_status(phase: str) -> Callable[[int], object]:
        return lambda i: kube.patch(
            "SpeculativeDeployment",
            namespace,
            f"sd-{i}",
            {"status": {"observedGeneration": 1, "phase": phase}},
            subresource="status",
        )

    try:
        return {
            "SD create": measure(count, create_sd),
            "SD status patch (a new phase)": measure(count, patch_status("RollingOut")),
            "SD status patch (nothing changes)": measure(count, patch_status("RollingOut")),
            "Event create": measure(
                count, lambda i: kube.events.post(sds[i], "Ready", "serving", False, conditions.now())
            ),
            "ConfigMap create (1 kB)": measure(
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


def main() -> int:
    args, kube, core = cost_command(__doc__, rounds=3)
    rounds = [one_round(kube, core, args.count) for _ in range(args.rounds)]
    result = {
        what: {k: statistics.median(r[what][k] for r in rounds) for k in ("cpu_ms", "wall_ms")} for what in rounds[0]
    }
    for what, row in result.items():
        print(f"{what:36} {row['cpu_ms']:6.2f} ms CPU  ({row['wall_ms']:.1f} ms wall)")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
