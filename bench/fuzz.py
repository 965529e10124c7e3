"""Long-form spec fuzzing: N mutants dry-run through the API server, M of the accepted ones created
with the operator running; prints counts by category and every deployment that did not settle.

    PYTHONPATH=operator:. .venv/bin/python bench/fuzz.py --mutants 2000 --create 100 --seed 7 \
        [--kubeconfig PATH] [--timeout 300] [--keep]

The cluster is --kubeconfig, else $SPECDEC_TEST_KUBECONFIG, else the local dev cluster (`specdec dev up`),
with the CRDs installed. Works in a fresh namespace (deleted afterwards unless --keep) with the
operator as a child process watching only it. The same library as tests/cluster/test_fuzz.py.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.faults import fuzz  # noqa: E402 - once sys.path has the checkout
from tests.kube_helpers import Kube  # noqa: E402 - once sys.path has the checkout
from tests.operator_runner import OperatorProcess  # noqa: E402 - once sys.path has the checkout

from specdec.api.models import GROUP  # noqa: E402 - once sys.path has the checkout


def default_kubeconfig() -> Path:
    if os.environ.get("SPECDEC_TEST_KUBECONFIG"):
        return Path(os.environ["SPECDEC_TEST_KUBECONFIG"])
    from specdec_dev.cluster import LocalCluster

    return LocalCluster().kubeconfig


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutants", type=int, default=1000)
    parser.add_argument("--create", type=int, default=50, help="accepted mutants to really create")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--timeout", type=float, default=300, help="seconds for the created ones to settle")
    parser.add_argument("--kubeconfig", type=Path, default=None)
    parser.add_argument("--refusals", type=int, default=10, help="refusals to print as examples")
    parser.add_argument("--keep", action="store_true", help="keep the namespace to look at")
    args = parser.parse_args()
    kubeconfig = args.kubeconfig or default_kubeconfig()
    kube = Kube.from_kubeconfig(kubeconfig)
    crds = {c.metadata.name for c in kube.apiext.list_custom_resource_definition().items}
    if f"{fuzz.PLURAL}.{GROUP}" not in crds:
        print(
            f"the CRDs are not installed in {kubeconfig}: `specdec crds` writes them, kubectl apply them",
            file=sys.stderr,
        )
        return 2
    namespace = f"fuzz-{args.seed % 100000}-{uuid.uuid4().hex[:5]}"
    kube.core.create_namespace({"metadata": {"name": namespace, "labels": {"specdec.io/test": "true"}}})
    log = Path(tempfile.gettempdir()) / f"{namespace}-operator.log"
    operator = OperatorProcess.watching(
        namespace,
        kubeconfig,
        log,
        free_port(),
        {"SPECDEC_RESYNC_SECONDS": "5", "SPECDEC_RUNTIME_IMAGE": "registry.invalid/specdec-runtime:fuzz"},
    )
    print(f"seed {args.seed}, namespace {namespace}, operator log {log}", flush=True)
    try:
        operator.start()
        result = fuzz.run(kube, namespace, args.mutants, args.create, args.seed, args.timeout)
        print(result.report(refused_examples=args.refusals))
        alive = operator.process.poll() is None
        print(f"operator still running: {alive}")
        return 1 if result.violations or not alive else 0
    finally:
        operator.stop()
        if not args.keep:
            kube.core.delete_namespace(namespace, propagation_policy="Background")


if __name__ == "__main__":
    sys.exit(main())
