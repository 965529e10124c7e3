"""Train: an EAGLE-3 head from replayed hidden states with ModelOpt, exported for TensorRT-LLM, checked against
the target, and evaluated offline against the running draft on held-out conversations.

    python -m specdec.drafter.train --hidden-states DIR --target MODEL_DIR --out HEAD_DIR
        [--baseline HEAD_DIR] --eval-samples DIR --margin 0.10 --result FILE.json
        [--epochs 12] [--batch-size 16] [--learning-rate 3e-3] [--draft-len 3] [--draft-vocab-size N]
        [--eval-limit 200] [--seed 0] [--work DIR]

Steps: the capture files under --hidden-states become ModelOpt's offline records (specdec.drafter.offline_data);
the head is trained on them (specdec.drafter.eagle_head) and exported to --out (config.json, model.safetensors:
TensorRT-LLM's speculative_model_dir for Eagle3); its config.json is checked against the target's; the new head
and the --baseline head (the running draft, when there is one) are each evaluated on the --eval-samples
conversations (specdec.drafter.acceptance). The result, written to --result:

    {"samples": n, "acceptanceLength": {"baseline": x | null, "candidate": y}, "better": bool, "margin": m,
     "seconds": {"convert", "train", "export", "evaluate"}, "reason": "...", "trainingConversations": k,
     "draftVocabSize": v, "draftLen": d}

better: the candidate's acceptance length is at least (1 + margin) times the baseline's (with no baseline, any
head that accepts drafts at all, a length above 1). Exit status 0 whether better or not; 1 for a failure (no
hidden states, a head that does not fit the target, a baseline that cannot be read), with the reason on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from specdec.drafter.samples import Sample, read_samples


class TrainingFailed(Exception):
    """A step that cannot go on; its message is the reason."""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m specdec.drafter.train", description=__doc__.split("\n\n")[0])
    p.add_argument("--hidden-states", type=Path, required=True, help="the replay's capture files (*.pt)")
    p.add_argument("--target", type=Path, required=True, help="the target model's directory (config, tokenizer)")
    p.add_argument("--out", type=Path, required=True, help="where the new head is exported")
    p.add_argument("--baseline", type=Path, help="the running draft's head directory, to compare with")
    p.add_argument("--eval-samples", type=Path, required=True, help="held-out conversations (*.jsonl)")
    p.add_argument("--margin", type=float, default=0.10, help="how much longer the acceptance must be (0.10: 10%%)")
    p.add_argument("--result", type=Path, required=True, help="the result's JSON file")
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--learning-rate", type=float, default=3e-3)
    p.add_argument("--draft-len", type=int, default=3, help="tokens drafted per step in the evaluation")
    p.add_argument("--draft-vocab-size", type=int, help="the head's vocabulary (default: the target's)")
    p.add_argument("--eval-limit", type=int, default=200, help="evaluate on at most this many conversations")
    p.add_argument("--seed", type=int, default=0, help="decides the head's initialisation and the batches' order")
    p.add_argument("--work", type=Path, help="a scratch directory (default: a temporary one)")
    return p


def decide(candidate: float, baseline: float | None, margin: float) -> tuple[bool, str]:
    """Whether the candidate head is better by the margin, and why."""
    if baseline is None:
        better = candidate > 1.0
        return better, (
            f"no running draft to compare with; the new head's acceptance length is {candidate:.3f}"
            + ("" if better else ", no draft accepted")
        )
    needed = baseline * (1 + margin)
    if candidate >= needed:
        return True, (
            f"acceptance length {baseline:.3f} -> {candidate:.3f} (+{candidate / baseline - 1:.1%}), "
            f"at least the {margin:.0%} margin"
        )
    return False, (
        f"acceptance length {baseline:.3f} -> {candidate:.3f} ({candidate / baseline - 1:+.1%}), under the "
        f"{margin:.0%} margin ({needed:.3f} needed)"
    )


@contextmanager
def _timed(seconds: dict[str, float], step: str) -> Iterator[None]:
    started = time.monotonic()
    yield
    seconds[step] = round(time.monotonic() - started, 3)


def _conversations(target: Path, samples: list[Sample], limit: int) -> list[Any]:
    """The held-out samples as token ids, tokenized as the target's server does (no special tokens added: the
    prompt has its template); a sample whose answer does not start a new token is left out."""
    from transformers import AutoTokenizer

    from specdec.drafter.acceptance import Conversation

    tokenizer = AutoTokenizer.from_pretrained(str(target))
    conversations = []
    for sample in samples:
        prompt = tokenizer(sample.prompt, add_special_tokens=False).input_ids
        full = tokenizer(sample.text, add_special_tokens=False).input_ids
        if full[: len(prompt)] == prompt and len(full) > len(prompt):
            conversations.append(Conversation(full, len(prompt)))
        if len(conversations) == limit:
            break
    return conversations


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from specdec.drafter import acceptance, eagle_head, offline_data

    seconds: dict[str, float] = {}
    target = eagle_head.TargetShape.read(args.target)
    held_out, _ = read_samples(args.eval_samples)
    conversations = _conversations(args.target, held_out, args.eval_limit)
    if not conversations:
        raise TrainingFailed(f"no held-out conversation to evaluate on under {args.eval_samples}")
    draft_vocab = args.draft_vocab_size or target.vocab_size
    if not 0 < draft_vocab <= target.vocab_size:
        raise TrainingFailed(f"--draft-vocab-size {draft_vocab} is not within the target's {target.vocab_size}")
    if args.baseline is not None:
        problems = eagle_head.check_config(args.baseline, target)
        if problems:
            raise TrainingFailed(f"the baseline head {args.baseline} does not fit the target: {'; '.join(problems)}")

    with _timed(seconds, "convert"):
        layers = len(target.capture_layers())
        try:
            data = offline_data.convert(args.hidden_states, work / "offline", target.hidden_size, layers)
        except offline_data.CaptureError as error:
            raise TrainingFailed(f"the hidden states do not fit the target: {error}") from None
    if not data.files:
        raise TrainingFailed(
            f"no hidden states under {args.hidden_states} ({data.capture_files} files, {data.unreadable} unreadable)"
        )
    with _timed(seconds, "train"):
        eagle_head.seed(args.seed)
        model = eagle_head.build(args.target, offline=True, draft_vocab_size=draft_vocab)
        if draft_vocab < target.vocab_size:
            d2t = eagle_head.draft_vocabulary(data.token_counts, target.vocab_size, draft_vocab)
            model.eagle_module.d2t.copy_(d2t)
        training = eagle_head.Training(args.epochs, args.batch_size, args.learning_rate)

        def progress(epoch: int, loss: float) -> None:
            print(f"train: epoch {epoch + 1}/{training.epochs}, loss {loss:.4f}", file=sys.stderr, flush=True)

        eagle_head.train(model, data.files, training, progress)
    with _timed(seconds, "export"):
        eagle_head.export(model, args.out)
        problems = eagle_head.check_config(args.out, target)
        if problems:
            raise TrainingFailed(f"the exported head does not fit the target: {'; '.join(problems)}")
    del model

    def evaluate(head: Path) -> float:
        evaluated = eagle_head.build(args.target, offline=False, draft_vocab_size=eagle_head.draft_vocab_size(head))
        eagle_head.load(evaluated, head)
        return acceptance.acceptance_length(evaluated, conversations, args.draft_len)

    with _timed(seconds, "evaluate"):
        candidate = evaluate(args.out)
        try:
            baseline = evaluate(args.baseline) if args.baseline is not None else None
        except (OSError, ValueError) as error:
            raise TrainingFailed(f"the baseline head {args.baseline} cannot be loaded: {error}") from None
    better, reason = decide(candidate, baseline, args.margin)
    return {
        "samples": len(conversations),
        "acceptanceLength": {
            "baseline": None if baseline is None else round(baseline, 4),
            "candidate": round(candidate, 4),
        },
        "better": better,
        "margin": args.margin,
        "seconds": seconds,
        "reason": reason,
        "trainingConversations": len(data.files),
        "draftVocabSize": draft_vocab,
        "draftLen": args.draft_len,
    }


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.margin < 0:
        p.error("--margin must not be negative")
    for name in ("epochs", "batch_size", "draft_len", "eval_limit"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    for name in ("hidden_states", "target", "eval_samples"):
        if not getattr(args, name).is_dir():
            p.error(f"--{name.replace('_', '-')} {getattr(args, name)} is not a directory")
    try:
        if args.work is not None:
            result = run(args, args.work)
        else:
            with tempfile.TemporaryDirectory(prefix="specdec-train-") as work:
                result = run(args, Path(work))
    except (TrainingFailed, OSError, ValueError) as error:
        print(f"train: {error}", file=sys.stderr)
        return 1
    args.result.parent.mkdir(parents=True, exist_ok=True)
    args.result.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
