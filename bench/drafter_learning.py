"""The drafter's learning pipeline on CPU through its stand-ins (specdec_dev.learning_chain): acceptance lengths
old -> new, conversation counts and each step's seconds.

    OMP_NUM_THREADS=1 PYTHONPATH=operator:.:dev .venv/bin/python bench/drafter_learning.py [--conversations 2000]
        [--epochs 12] [--keep DIR] [--json]

Serves 1.1 x N conversations of each traffic class from the tiny target, replays N of each through a SaveState
stand-in, trains the running draft (a small mixed sample) and a head per class with ModelOpt, and evaluates them
on held-out class-A conversations. Every process runs torch on one thread; the times are this machine's, which
other work shares: say how busy it was beside them.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from specdec_dev.learning_chain import Chain


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--conversations", type=int, default=2000, help="replayed per class")
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--keep", type=Path, help="run in this directory and keep it (default: a temporary one)")
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = p.parse_args()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="drafter-learning-") as scratch:
        chain = Chain(args.keep or Path(scratch), conversations=args.conversations, epochs=args.epochs)
        figures = chain.all()
    figures["seconds"]["total"] = round(time.monotonic() - started, 1)
    if args.json:
        print(json.dumps(figures))
        return 0
    running = figures["runningDraft"]["acceptanceLength"]["candidate"]
    print(
        f"conversations per class: {chain.conversations} replayed, held out: "
        + ", ".join(f"{c} {r['heldOut']}" for c, r in figures["replays"].items())
    )
    print(
        f"running draft (mixed sample, {figures['runningDraft']['trainingConversations']} conversations): "
        f"acceptance length {running:.3f} on class a"
    )
    for traffic_class, result in figures["heads"].items():
        new = result["acceptanceLength"]["candidate"]
        verdict = "promoted" if result["better"] else "refused"
        print(
            f"head trained on class {traffic_class} ({result['trainingConversations']} conversations): "
            f"{running:.3f} -> {new:.3f} ({new / running - 1:+.1%}) on class a: {verdict}"
        )
    for step, seconds in figures["seconds"].items():
        print(f"  {step}: {seconds:.1f} s")
    for traffic_class, result in figures["heads"].items():
        print(f"  trainer class {traffic_class}: " + ", ".join(f"{k} {v:.1f} s" for k, v in result["seconds"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
