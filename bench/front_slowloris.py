"""What slow clients cost the streams the runtime's front serves: the token gap of N streams through the front
(the trtllm-serve route, its stand-in paced as in bench/front_bench.py) unloaded, then beside S slow clients,
and the front's resident memory.

    PYTHONPATH=operator:. .venv/bin/python bench/front_slowloris.py                  # 64 streams, 200 slow clients
    PYTHONPATH=operator:. .venv/bin/python bench/front_slowloris.py --streams 16 --slow 50 --seconds 10

The slow clients, each on its own connection, reconnecting when the front ends it:
- three in four send a request head a few bytes at a time, --drip seconds apart (slowloris): the front, with
  its default limits, answers 408 once a head has taken 60 s, longer than a phase, so all of them stay open;
- one in four send a head announcing a --body-mib MiB body, then --drip-bytes of it every --drip seconds
  (slow uploads): the front holds bodies being received up to its buffered-body budget (256 MiB) and answers
  503 past it; those clients try again --drip seconds later.
Each stream asks for --tokens tokens at a time, back to back, for --seconds; its token gap is the time between
two reads that brought tokens, at the client. Reported: the gap p50 and p99 unloaded and loaded (and their
ratio), the front's RSS (VmRSS) before, at its highest while loaded and after the slow clients left, and
what the slow clients were answered. The front and nginx pinned to CPU 0, the backend, the streams and the
slow clients to CPU 1 (bench/front_bench.py's Stack). Results: bench/results/front-slowloris-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.front_bench import LOAD_CPU, PROMPT, RESULTS, TOKEN, Stack, commit, pin, runtime_config, token_ms

from specdec.runtime.upstream import Upstream


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


async def stream_gaps(url: str, streams: int, tokens: int, seconds: float, served: str) -> list[float]:
    """The token gaps (seconds) of N streams requesting `tokens` tokens back to back for `seconds`."""
    body = json.dumps({"model": served, "prompt": PROMPT, "max_tokens": tokens, "stream": True}).encode()
    pool = Upstream(url, max_idle=streams + 1)
    gaps: list[float] = []
    deadline = time.monotonic() + seconds

    async def one() -> None:
        last: float | None = None
        done = asyncio.get_running_loop().create_future()
        response = await pool.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {(await response.read())[:300]!r}")

        def on_data(piece: bytes) -> None:
            nonlocal last
            if TOKEN in piece:
                now = time.monotonic()
                if last is not None:
                    gaps.append(now - last)
                last = now

        response.stream(on_data, lambda error: done.set_exception(error) if error else done.set_result(None))
        await done

    async def client(i: int) -> None:
        await asyncio.sleep(i * tokens * 0.004 / streams)  # each at its own point of its answer
        while time.monotonic() < deadline:
            await one()

    try:
        await one()  # connections and a warm path first
        gaps.clear()
        await asyncio.gather(*(client(i) for i in range(streams)))
    finally:
        pool.close()
    return gaps


class SlowClients:
    """S connections sending their requests slowly, each reconnecting when the front ends it."""

    def __init__(self, port: int, count: int, drip: float, drip_bytes: int, body_mib: int):
        self.port, self.count, self.drip, self.drip_bytes, self.body_mib = port, count, drip, drip_bytes, body_mib
        self.answers: collections.Counter[str] = collections.Counter()
        self.open = 0
        self.tasks: list[asyncio.Task] = []

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.tasks = [loop.create_task(self._client(i % 4 == 3)) for i in range(self.count)]

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    async def _client(self, uploads: bool) -> None:
        while True:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                self.answers["connect failed"] += 1
                await asyncio.sleep(self.drip)
                continue
            self.open += 1
            try:
                answer = asyncio.ensure_future(reader.read(64))
                if uploads:
                    writer.write(
                        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        b"Content-Length: %d\r\n\r\n" % (self.body_mib << 20)
                    )
                    pieces = iter(lambda: b"x" * self.drip_bytes, None)
                else:
                    writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
                    pieces = iter(lambda: b"X-Slow: y\r\n", None)
                while not answer.done():
                    writer.write(next(pieces))
                    await asyncio.wait([answer], timeout=self.drip)
                first = answer.result()
                self.answers[first.split(b"\r\n", 1)[0].decode(errors="replace") or "closed"] += 1
            except (ConnectionError, OSError):
                self.answers["reset"] += 1
            finally:
                self.open -= 1
                writer.close()
            await asyncio.sleep(self.drip)


async def measure(args: argparse.Namespace, tmp: Path) -> dict:
    pace = token_ms(args, args.streams)
    stack = Stack("openai", pace, tmp)
    await stack.start()
    pin(0, LOAD_CPU)  # this process: the streams and the slow clients, beside the backend
    served = runtime_config("openai").served_model_name
    front_pid = stack.front_proc.pid
    try:
        url = stack.url("front")
        rss_before = rss_mib(front_pid)
        unloaded = await stream_gaps(url, args.streams, args.tokens, args.seconds, served)
        slow = SlowClients(stack.ports["front"], args.slow, args.drip, args.drip_bytes, args.body_mib)
        slow.start()
        await asyncio.sleep(args.drip * 3)  # all of them connected and dripping
        highest = rss_mib(front_pid)

        async def watch() -> None:
            nonlocal highest
            while True:
                highest = max(highest, rss_mib(front_pid))
                await asyncio.sleep(0.5)

        watcher = asyncio.get_running_loop().create_task(watch())
        open_during = slow.open
        loaded = await stream_gaps(url, args.streams, args.tokens, args.seconds, served)
        watcher.cancel()
        await slow.stop()
        await asyncio.sleep(2)
        rss_after = rss_mib(front_pid)
    finally:
        stack.stop()

    def summary(gaps: list[float]) -> dict:
        cuts = statistics.quantiles(gaps, n=100)
        return {"gaps": len(gaps), "p50_ms": statistics.median(gaps) * 1000, "p99_ms": cuts[98] * 1000}

    return {
        "streams": args.streams,
        "slow": args.slow,
        "token_ms": pace,
        "unloaded": summary(unloaded),
        "loaded": summary(loaded),
        "gap_p50_ratio": statistics.median(loaded) / statistics.median(unloaded),
        "slow_open_while_loaded": open_during,
        "slow_answers": dict(slow.answers),
        "rss_mib": {"before": rss_before, "highest_loaded": highest, "after": rss_after},
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", type=int, default=64)
    p.add_argument("--slow", type=int, default=200, help="slow clients")
    p.add_argument("--seconds", type=float, default=20.0, help="each phase's length")
    p.add_argument("--tokens", type=int, default=256, help="tokens per request of the streams")
    p.add_argument("--token-ms", type=float, default=4.0)
    p.add_argument("--max-rate", type=float, default=10000)
    p.add_argument("--drip", type=float, default=1.0, help="seconds between a slow client's sends")
    p.add_argument("--drip-bytes", type=int, default=64 * 1024, help="body bytes a slow upload sends each time")
    p.add_argument("--body-mib", type=int, default=60, help="the body size slow uploads announce")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        result = asyncio.run(measure(args, Path(tmp)))
    result.update(commit=commit(), python=platform.python_version(), args=vars(args))
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"front-slowloris-{time.strftime('%Y-%m-%dT%H%M%S%z')}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    u, loaded, rss = result["unloaded"], result["loaded"], result["rss_mib"]
    print(
        f"{args.streams} streams, token gap p50 {u['p50_ms']:.2f} ms unloaded, {loaded['p50_ms']:.2f} ms beside "
        f"{args.slow} slow clients ({result['slow_open_while_loaded']} open): x{result['gap_p50_ratio']:.3f}; "
        f"p99 {u['p99_ms']:.2f} -> {loaded['p99_ms']:.2f} ms"
    )
    print(
        f"front RSS {rss['before']:.0f} MiB before, {rss['highest_loaded']:.0f} MiB at most while loaded, "
        f"{rss['after']:.0f} MiB after; slow clients answered {result['slow_answers']}"
    )
    print(f"-> {out.relative_to(RESULTS.parents[1])}", file=sys.stderr)


if __name__ == "__main__":
    main()
