"""The drafter's learning pipeline end to end on CPU, through stand-ins: the tiny target (specdec_dev.tiny_target)
served by the transformers stand-in of trtllm-serve (specdec_dev.transformers_serve) answers two traffic classes;
their conversations are written as the front captures them (specdec.drafter.samples); the replay
(specdec.drafter.replay) sends them through the stand-in in SaveState mode, one capture directory per class; and
the trainer (specdec.drafter.train) trains heads with ModelOpt and decides on them against the running draft.

The running draft is a head trained on a small sample of the deployment's mixed traffic (both classes, a few
epochs): a generic draft, what a deployment serves before it has learnt from its own traffic. Both pipeline
runs are evaluated on class-A conversations held out of the replay: the class-A head should beat the running
draft by the margin, and the class-B head should not (refused for class-A traffic).

Every step is the entrypoints' own command line, run as a process, as the Jobs run them. bench/drafter_learning.py
prints the figures; tests/drafter/test_learning_pipeline.py checks them.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specdec.drafter.samples import Sample, write_samples
from specdec_dev import tiny_target

MODEL = "tiny-target"
BATCH = 200  # prompts per completions request


@dataclass
class Chain:
    root: Path
    conversations: int = 2000  # per class, replayed for training; a tenth more is captured for the hold-out
    holdout_fraction: float = 0.1
    baseline_conversations: int = 100  # per class, in the running draft's mixed sample
    baseline_epochs: int = 3
    epochs: int = 12
    margin: float = 0.10
    seconds: dict[str, float] = field(default_factory=dict)
    replays: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def target(self) -> Path:
        return self.root / "target"

    def env(self) -> dict[str, str]:
        # One thread for torch in every process: the machines are shared (and a Job gets its CPU limit).
        return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}

    def run(self, *argv: str) -> dict[str, Any]:
        """An entrypoint's process; its last stdout line is its JSON summary."""
        done = subprocess.run([sys.executable, *argv], env=self.env(), capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[:3])} exited {done.returncode}: {done.stderr[-3000:]}")
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return result

    @contextmanager
    def server(self, capture_dir: Path | None = None) -> Iterator[str]:
        """The transformers stand-in of trtllm-serve, in SaveState mode (write_interval 1) with capture_dir."""
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        argv = [
            sys.executable,
            "-m",
            "specdec_dev.transformers_serve",
            str(self.target),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ]
        if capture_dir is not None:
            options = self.root / f"save-state-{capture_dir.name}.yaml"
            speculative = {"decoding_type": "SaveState", "output_directory": str(capture_dir), "write_interval": 1}
            options.write_text(json.dumps({"speculative_config": speculative}))  # YAML is a superset of JSON
            argv += ["--extra_llm_api_options", str(options)]
        process = subprocess.Popen(argv, env=self.env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    urllib.request.urlopen(url + "/health", timeout=2).close()
                    break
                except OSError:
                    if process.poll() is not None or time.monotonic() > deadline:
                        said = process.stderr.read() if process.stderr else ""
                        raise RuntimeError(f"the stand-in did not start: {said}") from None
                    time.sleep(0.2)
            yield url
        finally:
            process.terminate()
            process.wait(timeout=30)

    def serve(self, url: str, traffic_class: str, count: int, seed: int) -> list[Sample]:
        """count conversations of a class: prompts answered greedily by the target, kept as the front keeps them."""
        rng = random.Random(seed)
        samples = []
        for start in range(0, count, BATCH):
            prompts = [tiny_target.prompt(traffic_class, rng) for _ in range(min(BATCH, count - start))]
            body = json.dumps({"model": MODEL, "prompt": prompts, "max_tokens": tiny_target.ANSWER_TOKENS}).encode()
            request = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=600) as answer:
                choices = sorted(json.load(answer)["choices"], key=lambda c: c["index"])
            samples += [Sample(p, c["text"], traffic_class, time.time()) for p, c in zip(prompts, choices, strict=True)]
        return samples

    def capture(self) -> None:
        """Both classes served and their conversations written under samples/."""
        started = time.monotonic()
        tiny_target.build(self.target)
        self.seconds["build target"] = round(time.monotonic() - started, 3)
        started = time.monotonic()
        total = round(self.conversations / (1 - self.holdout_fraction))
        (self.root / "samples").mkdir(parents=True, exist_ok=True)
        with self.server() as url:
            for seed, traffic_class in enumerate(tiny_target.CLASSES):
                samples = self.serve(url, traffic_class, total, seed)
                write_samples(self.root / "samples" / f"{traffic_class}.jsonl", samples)
        self.seconds["serve and capture"] = round(time.monotonic() - started, 3)

    def replay(self, traffic_class: str) -> Path:
        """One class's conversations through a SaveState stand-in of its own; returns its capture directory."""
        captures = self.root / "hidden-states" / traffic_class
        started = time.monotonic()
        with self.server(captures) as url:
            self.replays[traffic_class] = self.run(
                "-m", "specdec.drafter.replay", "--samples", str(self.root / "samples"), "--server", url,
                "--model", MODEL, "--class", traffic_class, "--limit", str(self.conversations),
                "--holdout-fraction", str(self.holdout_fraction),
                "--holdout-out", str(self.root / "holdout" / traffic_class),
            )  # fmt: skip
        self.seconds[f"replay {traffic_class}"] = round(time.monotonic() - started, 3)
        return captures

    def running_draft(self) -> tuple[Path, dict[str, Any]]:
        """The running draft: a head trained on a small mixed sample of both classes' captures."""
        mixed = self.root / "hidden-states" / "mixed"
        mixed.mkdir(parents=True, exist_ok=True)
        for traffic_class in tiny_target.CLASSES:
            files = sorted((self.root / "hidden-states" / traffic_class).glob("*.pt"))
            for path in files[: self.baseline_conversations]:
                shutil.copy(path, mixed / f"{traffic_class}-{path.name}")
        return self.root / "heads" / "running", self.train(mixed, "running", None, self.baseline_epochs)

    def train(self, hidden_states: Path, name: str, baseline: Path | None, epochs: int | None = None) -> dict[str, Any]:
        """The trainer on class-A held-out conversations; its result."""
        started = time.monotonic()
        argv = ["-m", "specdec.drafter.train", "--hidden-states", str(hidden_states), "--target", str(self.target),
                "--out", str(self.root / "heads" / name), "--eval-samples", str(self.root / "holdout" / "a"),
                "--margin", str(self.margin), "--result", str(self.root / f"result-{name}.json"),
                "--epochs", str(epochs or self.epochs)]  # fmt: skip
        if baseline is not None:
            argv += ["--baseline", str(baseline)]
        result = self.run(*argv)
        self.seconds[f"train {name}"] = round(time.monotonic() - started, 3)
        return result

    def all(self) -> dict[str, Any]:
        """Capture, replay both classes, train the running draft and a head per class; every figure."""
        self.capture()
        captures = {c: self.replay(c) for c in tiny_target.CLASSES}
        running, running_result = self.running_draft()
        results = {c: self.train(captures[c], f"class-{c}", running) for c in tiny_target.CLASSES}
        return {"replays": self.replays, "runningDraft": running_result, "heads": results, "seconds": self.seconds}
