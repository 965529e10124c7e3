"""A fault-injecting HTTP proxy in front of a real kube-apiserver, for tests.

    with FaultProxy(upstream_kubeconfig, tmp_path / "proxy.kubeconfig", seed=1) as proxy:
        proxy.set_faults(FaultPlan(0.1))            # 10 % of requests faulted, kinds drawn evenly
        ...run something with KUBECONFIG=proxy.kubeconfig...
        proxy.outage(5)                              # "kube-apiserver down" for 5 s
        proxy.injected()                             # {"throttle": 12, "watch_expired": 3, ...}

The proxy runs an asyncio loop (aiohttp server + aiohttp client) in a thread of the test process,
listens on plain HTTP on 127.0.0.1 and forwards to the API server with the upstream kubeconfig's
TLS credentials. Responses are streamed: a watch is forwarded chunk by chunk, never buffered.
The faults are what a real API server (or the network in front of it) does to a client: 429 with
Retry-After (API Priority and Fairness), 500/503, a connection dropped before the answer, a watch
stream that ends or is cut, an in-stream `ERROR` 410 ("resource version too old") and a watch
request answered with HTTP 410.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import random
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import parse_qs

import aiohttp
import yaml
from aiohttp import web
from kubernetes import client, config

# Faults on any request, answered instead of forwarding.
REQUEST_FAULTS = ("throttle", "error500", "unavailable503", "reset")
# Faults only a watch request can get.
WATCH_FAULTS = ("watch_close", "watch_abort", "watch_expired", "watch_gone")
KINDS = REQUEST_FAULTS + WATCH_FAULTS

HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailers",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
    "content-encoding",
    "accept-encoding",
}


@dataclasses.dataclass(frozen=True)
class RequestInfo:
    """What a fault predicate sees of a request."""

    method: str
    path: str
    query: dict[str, list[str]]
    verb: str  # get, list, watch, create, update, patch, delete, deletecollection
    resource: str | None  # plural, e.g. "pods"
    namespace: str | None
    name: str | None
    subresource: str | None

    @property
    def is_watch(self) -> bool:
        return self.verb == "watch"


def describe(method: str, path: str, query: dict[str, list[str]]) -> RequestInfo:
    """Kubernetes request attributes from a URL, as the API server's request-info resolver does."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"]:
        parts = parts[2:]
    elif parts[:1] == ["apis"]:
        parts = parts[3:]
    else:  # /version, /healthz, discovery: no resource
        parts = []
    namespace = None
    if len(parts) >= 2 and parts[0] == "namespaces" and len(parts) != 2:
        namespace, parts = parts[1], parts[2:]
    resource = parts[0] if parts else None
    name = parts[1] if len(parts) > 1 else None
    subresource = parts[2] if len(parts) > 2 else None
    watching = query.get("watch", [""])[0].lower() in ("true", "1")
    verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method)
    if verb is None:
        if method == "DELETE":
            verb = "delete" if name else "deletecollection"
        else:
            verb = "watch" if watching else ("get" if name else "list")
    return RequestInfo(method, path, query, verb, resource, namespace, name, subresource)


def status_body(code: int, reason: str, message: str, **extra) -> dict:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
        **extra,
    }


@dataclasses.dataclass(frozen=True)
class FaultPlan:
    """Which requests get a fault: each request is faulted with probability `rate` (`watch_rate` for
    watch requests, default `rate`), with a kind drawn evenly from those of `kinds` that apply to it
    (the watch kinds only to watch requests; `watch_kinds` replaces `kinds` for them).
    `only` limits faults to the requests it accepts.

        FaultPlan(0.1)                         # 10 % of all requests, every kind
        FaultPlan(1.0, kinds=("throttle",))    # every request answered 429
    """

    rate: float = 0.0
    kinds: tuple[str, ...] = KINDS
    watch_rate: float | None = None
    watch_kinds: tuple[str, ...] | None = None  # kinds a watch request draws from (default: `kinds`)
    only: Callable[[RequestInfo], bool] | None = None
    stream_seconds: tuple[float, float] = (0.5, 4.0)  # when an in-stream watch fault strikes

    def __post_init__(self):
        unknown = (set(self.kinds) | set(self.watch_kinds or ())) - set(KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}; known: {KINDS}")

    def draw(self, info: RequestInfo, rng: random.Random) -> str | None:
        if self.only is not None and not self.only(info):
            return None
        if info.is_watch:
            kinds = list(self.watch_kinds if self.watch_kinds is not None else self.kinds)
        else:
            kinds = [k for k in self.kinds if k in REQUEST_FAULTS]
        rate = self.watch_rate if info.is_watch and self.watch_rate is not None else self.rate
        if not kinds or rng.random() >= rate:
            return None
        return rng.choice(kinds)


PASS_THROUGH = FaultPlan()


class FaultProxy:
    """A fault-injecting proxy to the API server of `upstream_kubeconfig`; see the module docstring."""

    def __init__(
        self, upstream_kubeconfig: Path, kubeconfig_out: Path, seed: int = 0, faults: FaultPlan = PASS_THROUGH
    ):
        self.upstream_kubeconfig = Path(upstream_kubeconfig)
        self.kubeconfig = Path(kubeconfig_out)
        self.faults = faults
        self.rng = random.Random(seed)
        self._counts: collections.Counter[str] = collections.Counter()  # injected faults by kind
        self._forwarded: collections.Counter[str] = collections.Counter()  # forwarded requests by verb
        self._lock = threading.Lock()  # counters are read from the test's thread
        self.port: int | None = None
        self._down_until = 0.0  # monotonic time until which the "API server" is down
        self._streams: dict[int, web.Request] = {}  # open watch streams, cut by an outage
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None

    # -- control, from the test's thread ----------------------------------------------------------

    def set_faults(self, faults: FaultPlan) -> None:
        self.faults = faults  # one attribute swap: the loop reads it per request

    def outage(self, seconds: float) -> None:
        """Act as a dead API server for `seconds`: open streams are cut, every request is reset."""
        self._down_until = time.monotonic() + seconds
        self.cut_streams()

    def cut_streams(self) -> None:
        """Cut every open watch stream (TCP RST), so clients reconnect with new watch requests."""
        if self._loop:
            asyncio.run_coroutine_threadsafe(self._cut_streams(), self._loop).result(10)

    @property
    def down(self) -> bool:
        return time.monotonic() < self._down_until

    def injected(self) -> dict[str, int]:
        """Faults injected so far, by kind ("outage" for requests refused during an outage)."""
        with self._lock:
            return dict(self._counts)

    @property
    def forwarded(self) -> dict[str, int]:
        """Requests passed on to the API server, by verb."""
        with self._lock:
            return dict(self._forwarded)

    def _count(self, counter: collections.Counter, key: str) -> None:
        with self._lock:
            counter[key] += 1

    def start(self) -> FaultProxy:
        self._thread = threading.Thread(target=self._run, name="fault-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("fault proxy did not start in 30s")
        if self._startup_error:
            raise RuntimeError(f"fault proxy failed to start: {self._startup_error}") from self._startup_error
        self.kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "fault-proxy",
                    "clusters": [{"name": "fault-proxy", "cluster": {"server": self.url}}],
                    "users": [{"name": "fault-proxy", "user": {}}],  # the proxy authenticates upstream
                    "contexts": [{"name": "fault-proxy", "context": {"cluster": "fault-proxy", "user": "fault-proxy"}}],
                }
            )
        )
        return self

    def stop(self) -> None:
        if self._loop and self._thread and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stopping.set)
            self._thread.join(15)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- the loop thread --------------------------------------------------------------------------

    def _upstream(self) -> tuple[str, ssl.SSLContext | bool, dict[str, str]]:
        """URL, TLS context and auth headers of the upstream API server (the kubernetes client parses
        the kubeconfig, so inline *-data, files, tokens and exec plugins all work)."""
        cfg = client.Configuration()
        config.load_kube_config(config_file=str(self.upstream_kubeconfig), client_configuration=cfg)
        headers = {}
        if cfg.api_key.get("authorization"):
            headers["Authorization"] = cfg.api_key["authorization"]
        if cfg.username:
            headers["Authorization"] = aiohttp.BasicAuth(cfg.username, cfg.password or "").encode()
        if not cfg.host.startswith("https"):
            return cfg.host, False, headers
        context = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
        if not cfg.verify_ssl:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if cfg.cert_file:
            context.load_cert_chain(cfg.cert_file, cfg.key_file)
        return cfg.host.rstrip("/"), context, headers

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        try:
            self._loop.run_until_complete(self._serve())
        except BaseException as error:  # noqa: BLE001 - reported to start()
            self._startup_error = error
            self._ready.set()
        finally:
            self._loop.close()

    async def _serve(self) -> None:
        self._stopping = asyncio.Event()
        self._base, tls, self._auth = self._upstream()
        # A watch idles for minutes: no read timeout. Big read buffer: a line can be a large object.
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=tls, limit=0),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            auto_decompress=True,
            read_bufsize=2**20,
        )
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # Cancel a handler when its client goes away, so an abandoned watch does not hold an upstream.
        runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await runner.setup()
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        site = web.SockSite(runner, sock)
        await site.start()
        self._ready.set()
        try:
            await self._stopping.wait()
        finally:
            await self._cut_streams()
            await runner.cleanup()
            await self._session.close()

    async def _cut_streams(self) -> None:
        for request in list(self._streams.values()):
            _reset(request)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        info = describe(request.method, request.path, parse_qs(request.query_string))
        if self.down:
            self._count(self._counts, "outage")
            return _reset(request)
        fault = self.faults.draw(info, self.rng)
        if fault:
            self._count(self._counts, fault)
        if fault == "reset":
            return _reset(request)
        if fault == "throttle":
            return web.json_response(
                status_body(
                    429, "TooManyRequests", "injected: the API server is throttling", details={"retryAfterSeconds": 1}
                ),
                status=429,
                headers={"Retry-After": "1"},
            )
        if fault == "error500":
            return web.json_response(status_body(500, "InternalError", "injected: internal error"), status=500)
        if fault == "unavailable503":
            return web.json_response(
                status_body(503, "ServiceUnavailable", "injected: the server is unavailable"), status=503
            )
        if fault == "watch_gone":
            return web.json_response(status_body(410, "Expired", "injected: too old resource version"), status=410)
        self._count(self._forwarded, info.verb)
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        headers.update(self._auth)
        try:
            upstream = await self._session.request(
                request.method,
                self._base + request.path_qs,
                headers=headers,
                data=body or None,
                allow_redirects=False,
                # no Content-Type means JSON to the API server; to
                # aiohttp, octet-stream: add none the client did not send
                skip_auto_headers=("Content-Type", "User-Agent"),
            )
        except aiohttp.ClientError:  # the real API server is unreachable: as good as a reset
            return _reset(request)
        async with upstream:
            out_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP}
            if not info.is_watch or upstream.status != 200:
                return web.Response(status=upstream.status, body=await upstream.read(), headers=out_headers)
            return await self._stream(request, upstream, out_headers, fault)

    async def _stream(
        self, request: web.Request, upstream: aiohttp.ClientResponse, headers: dict, fault: str | None
    ) -> web.StreamResponse:
        response = web.StreamResponse(status=upstream.status, headers=headers)
        await response.prepare(request)
        self._streams[id(request)] = request
        deadline = None
        if fault:
            deadline = time.monotonic() + self.rng.uniform(*self.faults.stream_seconds)
        pending = b""  # forward whole lines only, so an injected event never splits a real one
        try:
            while True:
                timeout = None if deadline is None else max(deadline - time.monotonic(), 0)
                try:
                    chunk = await asyncio.wait_for(upstream.content.readany(), timeout)
                except TimeoutError:
                    break
                except (aiohttp.ClientError, ConnectionError):
                    return _reset(request)  # upstream cut: cut the client too
                if not chunk:
                    break
                pending += chunk
                if b"\n" in pending:
                    lines, _, pending = pending.rpartition(b"\n")
                    await response.write(lines + b"\n")
            if fault == "watch_abort":
                return _reset(request)
            if fault == "watch_expired":
                event = {
                    "type": "ERROR",
                    "object": status_body(410, "Expired", "injected: too old resource version: watch expired"),
                }
                await response.write(json.dumps(event).encode() + b"\n")
            await response.write_eof()
            return response
        except (ConnectionError, RuntimeError):  # the client went away
            return response
        finally:
            self._streams.pop(id(request), None)


def _reset(request: web.Request) -> web.Response:
    """Drop the client's connection with a TCP RST (SO_LINGER 0), as a crashed server would."""
    transport = request.transport
    if transport is not None and not transport.is_closing():
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
        transport.abort()
    return web.Response(status=599)  # never sent: the connection is gone
