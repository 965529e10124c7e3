"""What the API server's CEL validation of a SpeculativeDeployment write costs, by CRD variant.

    PYTHONPATH=operator:. .venv/bin/python bench/cel_cost.py [--repeat 5] [--crds full,one-mode,plus-toy,no-cel]
    PYTHONPATH=operator:. .venv/bin/python bench/cel_cost.py --by-rule   # what each rule the write runs adds

Runs kube-apiserver's own CEL validator (k8s.io/apiextensions-apiserver's schema/cel at the version of the
local cluster's kube-apiserver, pinned in bench/cel_cost/go.mod; built with Go, as the local cluster's
binaries are) on `examples/llama-2-13b-draft-7b-logits.yaml` with its defaults applied, as on a create and as
on a status update (the old object beside it, ratcheting on), under each CRD variant of bench/crd_variants.py.
Per validation: the bytes and allocations (counted: the same on a busy machine) and the time (median over
`--repeat` runs, each variant's runs interleaved; noisy on a shared machine). The end-to-end cost of the
same writes, API server and etcd together, is bench/write_cost.py's.

`--by-rule`: for each rule a create of the example runs under the full CRD, the bytes one validation allocates
less without that rule (the full CRD less that one rule, counted once), most first; a rule the one-mode CRD
lacks is marked: what the other modes cost this deployment's writes.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml
from bench.crd_variants import ROOT, VARIANTS, as_stored, evaluated_rules, openapi_schema, sd_crd

EXAMPLE = ROOT / "examples" / "llama-2-13b-draft-7b-logits.yaml"
TOOL = ROOT / "bench" / "cel_cost"


def measure(crds: dict[str, dict[str, Any]], repeat: int) -> dict[str, dict[str, dict[str, float]]]:
    """variant -> "create"/"update" -> ns (median), bytes, allocs per validation."""
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        binary = directory / "cel_cost"
        subprocess.run(["go", "build", "-o", str(binary), "."], cwd=TOOL, check=True)
        body = yaml.safe_load(EXAMPLE.read_text())
        body["metadata"] = {"name": "cost", "namespace": "cost"}
        (directory / "object.json").write_text(json.dumps(body))
        files = []
        for variant, crd in crds.items():
            files.append(directory / f"{variant}.json")
            files[-1].write_text(json.dumps(crd))
        runs: dict[str, list[dict[str, Any]]] = {variant: [] for variant in crds}
        for _ in range(repeat):
            out = subprocess.run(
                [str(binary), "-object", str(directory / "object.json"), *map(str, files)],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            for line in out.splitlines():
                row = json.loads(line)
                runs[Path(row["crd"]).stem].append(row)
    return {
        variant: {
            write: {
                "ns": statistics.median(r[write]["ns"] for r in rows),
                "bytes": rows[0][write]["bytes"],
                "allocs": rows[0][write]["allocs"],
            }
            for write in ("create", "update")
        }
        for variant, rows in runs.items()
    }


def _without(crd: dict[str, Any], path: str, rule: str) -> dict[str, Any]:
    """The CRD less one rule: `rule` of the schema node at `path` (".spec.speculation", "" the root)."""
    crd = copy.deepcopy(crd)
    node = openapi_schema(crd)
    for part in filter(None, path.split(".")):
        node = node["properties"][part]
    node["x-kubernetes-validations"] = [r for r in node["x-kubernetes-validations"] if r["rule"] != rule]
    return crd


def by_rule() -> list[tuple[int, str, str, bool]]:
    """(bytes the rule adds to a create, path, rule, whether the one-mode CRD has it), most first."""
    full, one_mode = sd_crd("full"), sd_crd("one-mode")
    body = yaml.safe_load(EXAMPLE.read_text())
    stored = as_stored(body)
    rules = evaluated_rules(openapi_schema(full), stored)
    kept = {(path, r["rule"]) for path, r in evaluated_rules(openapi_schema(one_mode), stored)}
    variants = {"full": full} | {f"less-{i}": _without(full, path, r["rule"]) for i, (path, r) in enumerate(rules)}
    result = measure(variants, 1)
    whole = result["full"]["create"]["bytes"]
    rows = [
        (int(whole - result[f"less-{i}"]["create"]["bytes"]), path, r["rule"], (path, r["rule"]) in kept)
        for i, (path, r) in enumerate(rules)
    ]
    return sorted(rows, key=lambda row: -row[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--crds",
        default="full,one-mode,plus-toy,no-cel",
        help=f"CRD variants, comma-separated, of {', '.join(VARIANTS)}",
    )
    parser.add_argument("--by-rule", action="store_true", help="the bytes each rule adds to a create (full CRD)")
    args = parser.parse_args()
    if args.by_rule:
        rows = by_rule()
        for added, path, rule, kept in rows:
            print(f"{added / 1000:6.1f} kB  {'' if kept else 'not in one-mode  '}{path or '(root)'}: {rule[:90]}")
        print(json.dumps([{"bytes": b, "path": p, "rule": r, "in_one_mode": k} for b, p, r, k in rows]))
        return 0
    result = measure({variant: sd_crd(variant) for variant in args.crds.split(",")}, args.repeat)
    for variant, row in result.items():
        parts = []
        for write in ("create", "update"):
            figures = row[write]
            versus = (
                f", {figures['bytes'] / result['full'][write]['bytes']:.2f} x full's bytes"
                if "full" in result and variant != "full" and result["full"][write]["bytes"]
                else ""
            )
            parts.append(
                f"{write} {figures['ns'] / 1000:.0f} µs, {figures['bytes'] / 1000:.0f} kB in "
                f"{figures['allocs']} allocations{versus}"
            )
        print(f"CRD {variant:9} " + "; ".join(parts))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
