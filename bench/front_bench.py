"""What the runtime's front (specdec.runtime.front) costs on the token path, beside a reference reverse proxy
(nginx, proxy_buffering off) and the backend reached directly.

    PYTHONPATH=operator:. .venv/bin/python bench/front_bench.py                 # both routes, 1..256 streams
    PYTHONPATH=operator:. .venv/bin/python bench/front_bench.py --quick         # 1 and 16 streams, 32 tokens
    PYTHONPATH=operator:. .venv/bin/python bench/front_bench.py --streams 64,256 --routes openai

Backends are the project's stand-ins (specdec_dev.standin_servers, the real servers' HTTP contracts):
- openai: the trtllm-serve stand-in with SPECDEC_STANDIN_PACED=1, streaming one token per step of
  --token-ms (acceptance 0: one token a step; the first token after one step, the prefill's stand-in),
  slower for the N streams that would ask more than --max-rate tokens/s at that pace (256 streams at 4 ms a
  token would ask 64 000 tokens/s of the one core the backend and the load generator share);
- triton: the tritonserver stand-in (its generate endpoint of the BLS model), answering after tokens x
  --token-ms. The front calls generate without streaming (the BLS does not stream while speculating), so
  "direct" and "nginx" on this route are that generate request; a streamed front request is the front's
  translation of it into one SSE chunk.
Each cell (route, path direct|front|nginx, streamed or not, N streams) runs N clients that each send
--rounds requests of --tokens tokens back to back (more rounds when that is under --min-tokens in all, so
that the CPU figures, counted in clock ticks, rest on enough ticks), on keep-alive connections. Client i
starts i/N of one request's paced time (tokens x --token-ms) after the first, so that the N streams are in
the steady state of N users, each at its own point of its answer; with --together they all start at once,
and since every answer has the same length, each round of requests then arrives as one burst of N (a
thundering herd: TTFT p50 is then the queueing of that burst in every server on the path). Output tokens
are counted in what the client received (the stand-in's token " sim"); tokens/s is each client's over its
own time, summed; TTFT is the time to the first received token (the whole answer when not streamed);
tokens/s and TTFT p50 are reported as ratios to direct. The front's "own TTFT" is the mean of its
time-to-first-token histogram over the cell (streamed cells: from the request's arrival to the first token it
relays), the part of the client's TTFT spent inside the front. CPU per 1000 tokens is the utime+stime
(/proc/<pid>/stat) the front process, or nginx's master and worker, spent during the cell, over the tokens the
clients received.

Pinning (when the machine has 2 cores or more): the front and nginx (one worker) on CPU 0, the backends
and this load generator on CPU 1, so the proxy measured does not compete with the load it is measured
under. Results: bench/results/front-<timestamp>.json, and a table on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import yaml

from specdec.runtime.upstream import Upstream

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
TOKEN = b" sim"  # what the stand-ins generate, one token each (specdec_dev.simulator.TOKEN)
EXAMPLES = {"openai": "llama-3.1-8b-draft-1b-pytorch.yaml", "triton": "llama-2-13b-draft-7b-logits.yaml"}
PROMPT = "Tell me a story"
PROXY_CPU, LOAD_CPU = 0, 1
CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pin(pid: int, cpu: int) -> None:
    if (os.cpu_count() or 1) >= 2:
        os.sched_setaffinity(pid, {cpu})


def cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of proc(5))
    return total / CLK_TCK


def runtime_config(route: str):
    """The runtime configuration the operator writes for the route's example."""
    from specdec.plan import plan
    from specdec.settings import Settings

    doc = next(d for d in yaml.safe_load_all((ROOT / "operator/specdec/examples" / EXAMPLES[route]).read_text()) if d)
    return plan(doc, Settings()).runtime


# --- the processes -------------------------------------------------------------------------------------------


def serve_front(route: str, port: int, backend_url: str, metrics_url: str) -> None:
    """The front as specdec-runtime builds it, on a backend already running (the --serve-front mode)."""
    from specdec.runtime import event_loop
    from specdec.runtime.front import Front
    from specdec.runtime.front_server import FrontServer
    from specdec.runtime.launch import Backend

    config = runtime_config(route)
    if route == "triton":
        dt = config.draft_target
        backend = Backend(
            "triton",
            backend_url,
            "/v2/health/ready",
            draft_len=dt.draft_len,
            use_draft_logits=dt.use_logits,
            metrics_url=metrics_url,
        )
    else:
        backend = Backend("openai", backend_url, "/health")
    front = Front(config, backend, route=route)

    async def serve() -> None:
        server = FrontServer(front)
        await server.start("127.0.0.1", port)
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
        await stop.wait()
        await server.stop()

    event_loop.run(serve())  # as specdec-runtime's: uvloop's when installed


def triton_repository(where: Path) -> Path:
    """The models the tritonserver stand-in wants to see (config.pbtxt and version 1 each)."""
    from specdec.runtime import triton

    for model in triton.MODELS:
        (where / model / "1").mkdir(parents=True, exist_ok=True)
        (where / model / "config.pbtxt").write_text(f'name: "{model}"\n')
    return where


def nginx_conf(where: Path, port: int, upstream: str) -> Path:
    conf = where / "nginx.conf"
    conf.write_text(f"""worker_processes 1;
pid {where}/nginx.pid;
error_log {where}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {where}/body; proxy_temp_path {where}/proxy;
  upstream backend {{ server {upstream.removeprefix("http://")}; keepalive 512; }}
  server {{
    listen 127.0.0.1:{port} backlog=2048;
    location / {{
      proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection "";
      proxy_buffering off; proxy_request_buffering off; proxy_read_timeout 600s;
    }}
  }}
}}
""")
    return conf


async def wait_up(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as s:
        while True:
            with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
                async with s.get(url, timeout=aiohttp.ClientTimeout(total=2)) as r:
                    if r.status == 200:
                        return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not come up")
            await asyncio.sleep(0.1)


class Stack:
    """The backend, the front and nginx of one route, as processes."""

    def __init__(self, route: str, token_ms: float, tmp: Path):
        self.route, self.tmp, self.procs = route, tmp, []
        self.ports = {k: free_port() for k in ("direct", "front", "nginx", "metrics")}
        self.token_ms = token_ms

    def _start(self, argv: list[str], env: dict[str, str] | None = None, cpu: int = LOAD_CPU) -> subprocess.Popen:
        proc = subprocess.Popen(
            argv,
            env={**os.environ, **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=open(self.tmp / "stderr.log", "ab"),
        )
        pin(proc.pid, cpu)
        self.procs.append(proc)
        return proc

    async def start(self) -> None:
        py, d = sys.executable, self.ports["direct"]
        # One token per step, every step --token-ms whatever the batch (stepSecondsPerToken 0): the pace is fixed.
        profile = json.dumps(
            {"acceptance": 0, "costRatio": 0, "targetStepSeconds": self.token_ms / 1000, "stepSecondsPerToken": 0}
        )
        env = {"SPECDEC_SIMULATION_PROFILE": profile, "SPECDEC_STANDIN_PACED": "1"}
        if self.route == "openai":
            argv = ["trtllm-serve", str(self.tmp), "--host", "127.0.0.1", "--port", str(d)]
            health = "/health"
        else:
            argv = [
                "tritonserver",
                f"--model-repository={triton_repository(self.tmp / 'repo')}",
                "--http-address=127.0.0.1",
                f"--http-port={d}",
                f"--metrics-port={self.ports['metrics']}",
            ]
            health = "/v2/health/ready"
        self._start([py, "-m", "specdec_dev.standin_servers", *argv], env)
        self.direct = f"http://127.0.0.1:{d}"
        await wait_up(self.direct + health)
        self.front_proc = self._start(
            [
                py,
                __file__,
                "--serve-front",
                self.route,
                str(self.ports["front"]),
                self.direct,
                f"http://127.0.0.1:{self.ports['metrics']}/metrics",
            ],
            cpu=PROXY_CPU,
        )
        self.nginx_proc = self._start(
            [
                shutil.which("nginx") or "/usr/sbin/nginx",
                "-e",
                str(self.tmp / "error.log"),
                "-c",
                str(nginx_conf(self.tmp, self.ports["nginx"], self.direct)),
                "-g",
                "daemon off;",
            ],
            cpu=PROXY_CPU,
        )
        await wait_up(f"http://127.0.0.1:{self.ports['front']}/health")
        await wait_up(f"http://127.0.0.1:{self.ports['nginx']}{health}")
        children = Path(f"/proc/{self.nginx_proc.pid}/task/{self.nginx_proc.pid}/children").read_text().split()
        for child in children:  # workers inherit the master's affinity; say it anyway
            pin(int(child), PROXY_CPU)
        self.nginx_pids = [self.nginx_proc.pid, *map(int, children)]

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.ports[path]}"

    def pids(self, path: str) -> list[int]:
        return {"front": [self.front_proc.pid], "nginx": self.nginx_pids}.get(path, [])

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.send_signal(signal.SIGTERM if proc is not self.nginx_proc else signal.SIGQUIT)
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


# --- the load ----------------------------------------------------------------------------------------------------


def request(route: str, path: str, stream: bool, tokens: int, served: str) -> tuple[str, dict]:
    """What the client sends: an OpenAI completion to the front and on the OpenAI route, Triton's generate
    request (the one the front makes) to Triton directly or through nginx."""
    if route == "openai" or path == "front":
        return "/v1/completions", {"model": served, "prompt": PROMPT, "max_tokens": tokens, "stream": stream}
    config = runtime_config("triton")
    return "/v2/models/tensorrt_llm_bls/generate", {
        "text_input": PROMPT,
        "max_tokens": tokens,
        "stream": False,
        "return_perf_metrics": True,
        "num_draft_tokens": config.draft_target.draft_len,
        "use_draft_logits": config.draft_target.use_logits,
    }


async def one(pool: Upstream, path: str, body: bytes) -> tuple[float, int]:
    """(seconds to the first token, tokens received) of one request."""
    started, first, received, tail = time.monotonic(), None, 0, b""
    done = asyncio.get_running_loop().create_future()
    response = await pool.request("POST", path, body, {"Content-Type": "application/json"})

    def on_data(piece: bytes) -> None:
        nonlocal first, received, tail
        seen = tail + piece  # with the end of the last piece, less than a token: one split over two is seen
        count, tail = seen.count(TOKEN), seen[1 - len(TOKEN) :]
        if count and first is None:
            first = time.monotonic() - started
        received += count

    def on_end(error: Exception | None) -> None:
        done.set_exception(error) if error else done.set_result(None)

    if response.status != 200:
        raise RuntimeError(f"{pool.url}{path}: HTTP {response.status}: {(await response.read())[:300]!r}")
    response.stream(on_data, on_end)
    await done
    return (first if first is not None else time.monotonic() - started), received


async def cell(url: str, path: str, body: bytes, streams: int, rounds: int, stagger: float) -> dict:
    """N clients, each sending `rounds` requests back to back; client i starts i x stagger / N seconds in."""
    # The runtime's own HTTP/1.1 client (asyncio protocols, keep-alive): the load generator shares a core with
    # the backend, and aiohttp's client spent about twice its CPU a token there, taken from the backend.
    pool = Upstream(url, max_idle=streams + 1)
    try:

        async def client(i: int) -> tuple[float, list[tuple[float, int]]]:
            await asyncio.sleep(i * stagger / streams)
            began = time.monotonic()
            results = [await one(pool, path, body) for _ in range(rounds)]
            return time.monotonic() - began, results

        await one(pool, path, body)  # a connection and a warm path before the clock starts
        clients = await asyncio.gather(*(client(i) for i in range(streams)))
    finally:
        pool.close()
    results = [r for _, rs in clients for r in rs]
    tokens = sum(n for _, n in results)
    # Each client's rate over its own time, summed: the ramp of staggered starts is no one's time.
    return {
        "tokens": tokens,
        "tokens_per_s": sum(sum(n for _, n in rs) / seconds for seconds, rs in clients),
        "ttft_p50": statistics.median(t for t, _ in results),
    }


async def front_ttft(url: str) -> tuple[float, float]:
    """The front's own time-to-first-token histogram (sum, count), from its request's arrival to the first
    token it relays: beside the client's TTFT, what of it the front's event loop holds."""
    async with aiohttp.ClientSession() as session, session.get(url + "/metrics") as resp:
        text = await resp.text()
    found = dict.fromkeys(("_sum", "_count"), 0.0)
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        for suffix in found:
            if name == "specdec_time_to_first_token_seconds" + suffix:
                found[suffix] = float(value)
    return found["_sum"], found["_count"]


def token_ms(args, streams: int) -> float:
    """The stand-ins' time per token for N streams: --token-ms, slower when N streams at that pace would ask
    more than --max-rate tokens/s of the backend and the load generator's core."""
    return max(args.token_ms, streams * 1000 / args.max_rate) if args.max_rate else args.token_ms


async def run_route(route: str, args, tmp: Path) -> list[dict]:
    stack: Stack | None = None
    rows = []
    try:
        served = runtime_config(route).served_model_name
        for stream in args.stream:
            for streams in args.streams:
                pace = token_ms(args, streams)
                if stack is None or stack.token_ms != pace:  # the stand-ins take their pace when they start
                    if stack is not None:
                        stack.stop()
                    stack = Stack(route, pace, tmp)
                    await stack.start()
                row = {"route": route, "stream": stream, "streams": streams, "token_ms": pace}
                rounds = max(args.rounds, math.ceil(args.min_tokens / (args.tokens * streams)))
                for path in ("direct", "front", "nginx"):
                    suffix, body = request(route, path, stream, args.tokens, served)
                    pids = stack.pids(path)
                    ttft_before = await front_ttft(stack.url(path)) if path == "front" else None
                    before = cpu_seconds(pids)
                    result = await cell(
                        stack.url(path),
                        suffix,
                        json.dumps(body).encode(),
                        streams,
                        rounds,
                        0.0 if args.together else args.tokens * pace / 1000,
                    )
                    expected = args.tokens * streams * rounds
                    if result["tokens"] != expected:
                        raise RuntimeError(f"{route} {path}: {result['tokens']} tokens received, {expected} asked")
                    if pids:
                        result["cpu_ms_per_1000_tokens"] = (cpu_seconds(pids) - before) * 1e6 / result["tokens"]
                    if ttft_before is not None:
                        ttft_after = await front_ttft(stack.url(path))
                        seconds, count = (a - b for a, b in zip(ttft_after, ttft_before, strict=True))
                        result["own_ttft_mean"] = seconds / count if count else None
                    row[path] = result
                # Below 80 % of what the pacing allows, the backend and this load generator (one core) are the
                # limit: ratios there say as much about them as about the proxy.
                row["direct_saturated"] = row["direct"]["tokens_per_s"] < 0.8 * streams * 1000 / pace
                for path in ("front", "nginx"):
                    row[path]["tokens_per_s_ratio"] = row[path]["tokens_per_s"] / row["direct"]["tokens_per_s"]
                    row[path]["ttft_p50_ratio"] = row[path]["ttft_p50"] / row["direct"]["ttft_p50"]
                print(line(row), flush=True)
                rows.append(row)
    finally:
        if stack is not None:
            stack.stop()
    return rows


HEADER = (
    "route   stream  N    ms/tok  direct tok/s  TTFT ms | front tok/s×  TTFT×  own TTFT ms  CPU ms/1k | "
    "nginx tok/s×  TTFT×  CPU ms/1k"
)


def line(row: dict) -> str:
    f, n, d = row["front"], row["nginx"], row["direct"]
    own = "-" if f.get("own_ttft_mean") is None else f"{f['own_ttft_mean'] * 1000:.1f}"
    return (
        f"{row['route']:<7} {'yes' if row['stream'] else 'no':<6} {row['streams']:<4} {row['token_ms']:>6g} "
        f"{'*' if row['direct_saturated'] else ' '}{d['tokens_per_s']:>11.0f} "
        f"{d['ttft_p50'] * 1000:>8.1f} | {f['tokens_per_s_ratio']:>11.2f} {f['ttft_p50_ratio']:>6.2f} "
        f"{own:>12} {f['cpu_ms_per_1000_tokens']:>10.1f} | {n['tokens_per_s_ratio']:>11.2f} "
        f"{n['ttft_p50_ratio']:>6.2f} {n['cpu_ms_per_1000_tokens']:>10.1f}"
    )


def commit() -> str:
    out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip()


async def main(args) -> None:
    if not shutil.which("nginx") and not Path("/usr/sbin/nginx").exists():
        sys.exit("nginx is not installed (Debian: apt-get install -y nginx-light)")
    pin(os.getpid(), LOAD_CPU)
    print(HEADER, flush=True)
    rows = []
    for route in args.routes:
        with tempfile.TemporaryDirectory(prefix=f"front-bench-{route}-") as tmp:
            rows += await run_route(route, args, Path(tmp))
    stamp = time.strftime("%Y-%m-%dT%H%M%S%z")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"front-{stamp}.json"
    settings = {k: v for k, v in vars(args).items() if k != "serve_front"}
    from specdec.runtime import event_loop

    loop = "uvloop" if event_loop.loop_factory() else "asyncio"
    out.write_text(
        json.dumps(
            {
                "commit": commit(),
                "date": stamp,
                "cpus": os.cpu_count(),
                "front_loop": loop,
                "python": platform.python_version(),
                "settings": settings,
                "rows": rows,
            },
            indent=1,
        )
        + "\n"
    )
    print("* direct below 80 % of the paced rate: the backend and the load generator's core are the limit")
    print(f"Python {platform.python_version()}, front event loop: {loop}; results: {out.relative_to(ROOT)}")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", type=lambda s: [int(x) for x in s.split(",")], default=[1, 16, 64, 256])
    p.add_argument("--routes", type=lambda s: s.split(","), default=["openai", "triton"])
    p.add_argument(
        "--stream",
        type=lambda s: [{"yes": True, "no": False}[x] for x in s.split(",")],
        default=[True, False],
        help="streamed requests, plain ones, or both (yes,no)",
    )
    p.add_argument("--tokens", type=int, default=128, help="output tokens per request")
    p.add_argument("--token-ms", type=float, default=4.0, help="the stand-in backends' time per token")
    p.add_argument(
        "--max-rate",
        type=float,
        default=10000,
        help="tokens/s the N streams may ask at most (the pace slows past it; 0: no limit). The "
        "backend stand-in and the load generator share one core, which serves about 20 000 "
        "streamed tokens/s here: at half of that, what a proxy changes in that core's work "
        "(a wake-up per token rather than turns) does not turn into queueing there",
    )
    p.add_argument("--rounds", type=int, default=3, help="requests each stream sends, one after another")
    p.add_argument("--min-tokens", type=int, default=1024, help="tokens per cell, at least")
    p.add_argument(
        "--together",
        action="store_true",
        help="every client starts at once (each round of requests then arrives as one burst) rather "
        "than spread over one request's time",
    )
    p.add_argument("--quick", action="store_true", help="1 and 16 streams, 32 tokens, 2 rounds, 256 tokens a cell")
    p.add_argument(
        "--serve-front", nargs=4, metavar=("ROUTE", "PORT", "BACKEND_URL", "METRICS_URL"), help=argparse.SUPPRESS
    )
    args = p.parse_args(argv)
    if args.quick:
        args.streams, args.tokens, args.rounds, args.min_tokens = [1, 16], 32, 2, 256
    return args


if __name__ == "__main__":
    ARGS = parse_args()
    if ARGS.serve_front:
        route, port, url, metrics = ARGS.serve_front
        serve_front(route, int(port), url, metrics)
    else:
        from specdec.runtime import event_loop  # the load generator on uvloop too, so it spends less of its core

        event_loop.run(main(ARGS))
