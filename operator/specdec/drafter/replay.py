"""Replay: captured conversations through a hidden-state capture server, whose files are the training data.

TensorRT-LLM's SaveState deployment answers every request with one token (SaveHiddenStatesDrafter sets each
new request's max new tokens to 1) and writes the hidden states of its prompt. So each conversation goes as one
prompt, the prompt and the target's answer end to end, with max_tokens 1: the states written are those of the
whole conversation, as the target computed them. A share of the conversations is held out (never replayed),
written to --holdout-out for the offline evaluation.

    python -m specdec.drafter.replay --samples DIR --server URL --model NAME [--class A] [--limit N]
        [--holdout-fraction 0.1 --holdout-out DIR] [--timeout 60]
        [--rounds DIR --round N --keep-rounds 3 [--served-round M]]

With --rounds (the deployment's round directories), the rounds older than the --keep-rounds newest up to this
one are deleted first, except the served head's (specdec.drafter.rounds). Prints one JSON line: {"samples",
"skipped", "replayed", "failed", "heldOut", "seconds", "deletedRounds"}. Exit status 0 when
every replayed conversation was answered, 1 when some were not (the summary says how many), 2 for bad
arguments or no samples. Standard library only: the replay Job needs no torch.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from specdec.drafter import rounds
from specdec.drafter.samples import Sample, read_samples, write_samples

HOLDOUT_FILE = "holdout.jsonl"


class ReplayError(Exception):
    """The capture server refused or did not answer a request."""


def _rank(sample: Sample) -> float:
    """Where a sample's text hashes to in [0, 1): the same on every run and for a conversation captured twice."""
    digest = hashlib.sha256(sample.text.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def held_out(sample: Sample, fraction: float) -> bool:
    """Whether a sample belongs to the held-out share: by its text's hash, so the split is the same on every
    run and a conversation captured twice falls on one side."""
    return fraction > 0 and _rank(sample) < fraction


def split(samples: Sequence[Sample], fraction: float) -> tuple[list[Sample], list[Sample]]:
    """(to replay, held out), each in its texts' hash order: the front's writes interleave as requests end, and
    the order of the replay is the order of the training data, so the same samples make the same round."""
    replay: list[Sample] = []
    holdout: list[Sample] = []
    for sample in sorted(samples, key=lambda s: (_rank(s), s.text)):
        (holdout if held_out(sample, fraction) else replay).append(sample)
    return replay, holdout


def send(server: str, model: str, sample: Sample, timeout: float) -> None:
    """One conversation as one prompt, one token answered."""
    body = json.dumps({"model": model, "prompt": sample.text, "max_tokens": 1}).encode()
    request = urllib.request.Request(
        server.rstrip("/") + "/v1/completions", body, {"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            json.load(answer)
    except urllib.error.HTTPError as error:
        raise ReplayError(f"HTTP {error.code}: {error.read(300).decode(errors='replace')}") from None
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise ReplayError(str(getattr(error, "reason", error))) from None


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m specdec.drafter.replay", description=__doc__.split("\n\n")[0])
    p.add_argument("--samples", type=Path, required=True, help="the directory of captured *.jsonl files")
    p.add_argument("--server", required=True, help="the SaveState server's base URL, e.g. http://host:8000")
    p.add_argument("--model", required=True, help="the served model's name")
    p.add_argument("--class", dest="traffic_class", help="replay only this traffic class's conversations")
    p.add_argument("--limit", type=int, help="replay at most this many (after the hold-out)")
    p.add_argument("--holdout-fraction", type=float, default=0.0, help="share kept for the evaluation (0 to 0.9)")
    p.add_argument("--holdout-out", type=Path, help=f"where the held-out conversations go ({HOLDOUT_FILE})")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for one answer")
    p.add_argument("--rounds", type=Path, help="the deployment's round directories, the older ones deleted")
    p.add_argument("--round", type=int, help="this round's number (with --rounds)")
    p.add_argument("--keep-rounds", type=int, default=3, help="the newest rounds kept, this one counted")
    p.add_argument("--served-round", type=int, help="the round whose head serves: never deleted")
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if not 0 <= args.holdout_fraction <= 0.9:
        p.error("--holdout-fraction must be between 0 and 0.9")
    if args.holdout_fraction > 0 and args.holdout_out is None:
        p.error("--holdout-fraction needs --holdout-out")
    if args.limit is not None and args.limit < 1:
        p.error("--limit must be at least 1")
    if args.rounds is not None and (args.round is None or args.round < 1 or args.keep_rounds < 1):
        p.error("--rounds needs --round (at least 1) and --keep-rounds at least 1")
    started = time.monotonic()
    deleted: list[int] = []
    if args.rounds is not None:
        try:
            deleted = rounds.prune(args.rounds, args.round, args.keep_rounds, args.served_round)
        except OSError as error:  # the replay still runs: a round left behind is space, not a wrong result
            print(f"replay: cannot delete older rounds under {args.rounds}: {error}", file=sys.stderr)
    try:
        samples, skipped = read_samples(args.samples, args.traffic_class)
    except OSError as error:
        print(f"replay: cannot read the samples: {error}", file=sys.stderr)
        return 2
    if not samples:
        print(
            f"replay: no samples{f' of class {args.traffic_class}' if args.traffic_class else ''} under "
            f"{args.samples} ({skipped} lines skipped)",
            file=sys.stderr,
        )
        return 2
    replay, holdout = split(samples, args.holdout_fraction)
    replay = replay[: args.limit] if args.limit else replay
    if args.holdout_out is not None:
        args.holdout_out.mkdir(parents=True, exist_ok=True)
        write_samples(args.holdout_out / HOLDOUT_FILE, holdout)
    failed = 0
    for sample in replay:
        try:
            send(args.server, args.model, sample, args.timeout)
        except ReplayError as error:
            failed += 1
            if failed == 1:
                print(f"replay: {args.server}: {error}", file=sys.stderr)
    summary = {
        "samples": len(samples),
        "skipped": skipped,
        "replayed": len(replay) - failed,
        "failed": failed,
        "heldOut": len(holdout),
        "seconds": round(time.monotonic() - started, 3),
        "deletedRounds": deleted,
    }
    print(json.dumps(summary), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
