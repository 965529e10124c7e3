"""Local stand-ins for the two backends, on their HTTP contracts (specdec_dev.backend_contracts), with
knobs a test turns: readiness, failures, delays, broken streams; and what they received.

Run as a script (`python -m tests.runtime.standins openai --port N`), it is the server process that
specdec-runtime supervises in the end-to-end tests.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from specdec_dev.backend_contracts import (
    Completion,
    Generation,
    InferenceError,
    OpenAIError,
    TritonContract,
    TrtllmServeContract,
)


@dataclass
class TritonState(TritonContract):
    declared_inputs: set[str]
    completion: str = " and then some"
    ready: bool = True
    fail_with: str | None = None  # an inference error message (HTTP 400, as Triton answers)
    delay: float = 0.0
    drafts: tuple[int, int] = (3, 4)  # accepted, drafted
    compute_us: dict[str, float] = field(default_factory=dict)  # Triton's compute time by model (µs)
    requests: list[dict[str, Any]] = field(default_factory=list)
    cancelled: int = 0

    async def generate(self, body: dict[str, Any]) -> Generation:
        self.requests.append(body)
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        if self.fail_with:
            raise InferenceError(self.fail_with)
        accepted, drafted = self.drafts
        return Generation(self.completion, drafted, accepted)

    def counters(self) -> dict[str, dict[str, float]]:
        """Triton's compute-time counter (served by the contract's metrics_app); a test sets and resets it."""
        return {"nv_inference_compute_infer_duration_us": self.compute_us}


@dataclass
class OpenAIState(TrtllmServeContract):
    served_as: str = "engine-dir-name"  # trtllm-serve names the model after its directory
    pieces: tuple[str, ...] = ("Hello", ",", " world")
    chunk_delay: float = 0.0
    ready: bool = True
    fail_status: int | None = None  # answer every generation request with this status
    break_stream: bool = False  # drop the connection after the first chunk
    usage: tuple[int, int] = (5, 3)
    stats: list[Any] = field(default_factory=list)  # iteration statistics, handed out on the next read
    requests: list[dict[str, Any]] = field(default_factory=list)
    chunks_sent: int = 0
    cancelled: int = 0
    stats_reads: int = 0

    async def complete(self, body: dict[str, Any], chat: bool) -> Completion:
        self.requests.append(body)
        if self.fail_status:
            raise OpenAIError(self.fail_status, "engine failure", "InternalServerError")
        return Completion(self.pieces, *self.usage)

    def iteration_stats(self) -> list[Any]:
        self.stats_reads += 1
        stats, self.stats = self.stats, []
        return stats

    async def chunk_sent(self, request: web.Request) -> bool:
        self.chunks_sent += 1
        if self.break_stream:
            request.transport.close()
            return False
        try:
            await asyncio.sleep(self.chunk_delay)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return True


async def _main(args: argparse.Namespace) -> int:
    """The stand-in as a server process: serves until SIGTERM (recorded in --marker) or --exit-after."""
    state = OpenAIState(
        chunk_delay=args.chunk_delay,
        stats=[
            {
                "iter": 1,
                "specDecodingStats": {
                    "numDraftTokens": 8,
                    "numAcceptedTokens": 6,
                    "numRequestsWithDraftTokens": 2,
                    "acceptanceLength": 4.0,
                },
            }
        ],
    )
    runner = web.AppRunner(state.app(), handler_cancellation=True, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", args.port).start()
    print(f"stand-in listening on {args.port} (pid {os.getpid()})", flush=True)
    stop = asyncio.Event()
    received = []

    def on_signal(sig: int) -> None:
        received.append(sig)
        stop.set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        await asyncio.wait_for(stop.wait(), args.exit_after) if args.exit_after else await stop.wait()
    except TimeoutError:
        await runner.cleanup()
        return args.exit_code
    if args.marker:
        with open(args.marker, "w") as f:
            f.write(signal.Signals(received[0]).name)
    await runner.cleanup()
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=["openai"])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--marker")
    parser.add_argument("--exit-after", type=float, default=0.0)
    parser.add_argument("--exit-code", type=int, default=3)
    parser.add_argument("--chunk-delay", type=float, default=0.0)
    sys.exit(asyncio.run(_main(parser.parse_args())))
