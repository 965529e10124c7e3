"""The OpenAI-compatible front on the runtime's port: /v1/completions, /v1/chat/completions, /v1/models,
/health and Prometheus /metrics, over one backend route (specdec.runtime.route):
- triton: Triton's generate endpoint of the tensorrt_llm_bls model, OpenAI requests translated
  (specdec.runtime.triton_route);
- openai: trtllm-serve's own OpenAI API, relayed (specdec.runtime.openai_relay).
specdec.runtime.front_server serves it: the generation requests by the route's exchanges (`exchanges`), the GET
pages by `page`.

Requests are checked before a backend sees them (specdec.runtime.openai_request): an unknown model is 404
model_not_found, a bad parameter 400 naming it, in OpenAI's error shape. Backend failures become clear 5xx
answers (503 not reachable, 504 timed out, 502 anything else) rather than hangs; a client that goes away
cancels its backend request. The front counts requests, their latency and time to first token, and the
route the tokens and speculation figures. Figures the route learns by polling the backend are polled every stats
interval and again before /metrics answers: a scrape reads them up to that moment.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client import CONTENT_TYPE_LATEST

from specdec.api.runtime_config import RuntimeConfig
from specdec.modes.save_state import DECODING_TYPE as SAVE_STATE
from specdec.modes.save_state import FILE_PREFIX
from specdec.runtime.capture import CaptureDirectory
from specdec.runtime.chat import Tokenizer
from specdec.runtime.drafter_capture import DrafterCapture
from specdec.runtime.exchange import Page
from specdec.runtime.launch import Backend
from specdec.runtime.metrics import RuntimeMetrics
from specdec.runtime.openai_relay import OpenAIRelay
from specdec.runtime.openai_request import model_not_found
from specdec.runtime.route import Route
from specdec.runtime.triton_route import TritonRoute

log = logging.getLogger("specdec.runtime")
GENERATION = ("/v1/completions", "/v1/chat/completions")
MODELS_PREFIX = "/v1/models/"
# How long a scrape of /metrics waits for the backend's statistics (Route.scrape_polls) before it answers with the
# counters it has; the poll goes on, and the next scrape counts what it read.
SCRAPE_POLL_SECONDS = 1.0


def make_route(
    config: RuntimeConfig,
    backend: Backend,
    metrics: RuntimeMetrics,
    *,
    request_timeout: float,
    tokenizer: Tokenizer,
    draft_len_file: Path | None,
) -> Route:
    if backend.kind == "triton":
        return TritonRoute(
            config,
            backend,
            metrics,
            request_timeout=request_timeout,
            tokenizer=tokenizer,
            draft_len_file=draft_len_file,
        )
    return OpenAIRelay(config, backend, metrics, request_timeout=request_timeout)


def capture_directory(config: RuntimeConfig) -> CaptureDirectory | None:
    """Mode saveState: where TensorRT-LLM writes the hidden states (speculative_config.output_directory)."""
    speculative = config.speculative_config or {}
    if speculative.get("decoding_type") != SAVE_STATE or not speculative.get("output_directory"):
        return None
    return CaptureDirectory(speculative["output_directory"], str(speculative.get("file_prefix") or FILE_PREFIX))


class Front:
    def __init__(
        self,
        config: RuntimeConfig,
        backend: Backend,
        *,
        supervisor=None,
        tokenizer: Tokenizer | None = None,
        request_timeout: float = 600.0,
        health_timeout: float = 3.0,
        stats_interval: float = 5.0,
        route: str = "",
        draft_len_file: Path | None = None,
    ):
        self.config = config
        self.supervisor = supervisor
        self.health_timeout = health_timeout
        self.stats_interval = stats_interval
        self.model = config.served_model_name
        self.metrics = RuntimeMetrics(
            mode=config.mode, backend=config.backend, model=self.model, route=route or backend.kind
        )
        self.route = make_route(
            config,
            backend,
            self.metrics,
            request_timeout=request_timeout,
            tokenizer=tokenizer or Tokenizer(None),
            draft_len_file=draft_len_file,
        )
        self.capture = capture_directory(config)
        self.drafter = (
            DrafterCapture(config.drafter_capture, self.metrics.registry, tokenizer or Tokenizer(None))
            if config.drafter_capture is not None
            else None
        )
        self.route.drafter = self.drafter
        known = self.route.known_draft_len()
        if known is not None:
            self.metrics.draft_length(known)
        self.session: aiohttp.ClientSession | None = None
        self._polling = asyncio.Lock()  # one poll at a time: the periodic ones and a scrape's
        self._scrape_polls: asyncio.Future | None = None  # the scrapes' polls in flight: one at most
        self.ready_announced = False
        self.created = int(time.time())
        self._tasks: list[asyncio.Task] = []
        # path -> the exchange answering it on the client's connection (specdec.runtime.front_server)
        self.exchanges = {path: self.route.exchange for path in GENERATION}

    @property
    def backend(self) -> Backend:
        return self.route.backend

    # --- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Before the first request: the backend's client session, the route's start and its polls."""
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), auto_decompress=True)
        self.route.session = self.session
        self.route.start()
        if self.drafter is not None:
            self.drafter.start()
        if self.stats_interval > 0:
            loop = asyncio.get_running_loop()
            self._tasks = [loop.create_task(self._every(poll)) for poll in self.route.polls()]

    async def _every(self, poll: Callable[[], Awaitable[None]]) -> None:
        while True:
            await asyncio.sleep(self.stats_interval)
            await self._poll(poll)

    async def _poll(self, poll: Callable[[], Awaitable[None]]) -> None:
        async with self._polling:
            try:
                await poll()
            except Exception:  # noqa: BLE001 - one bad page must not end the polling for good
                log.exception("%s failed", poll.__name__)

    async def _fresh_statistics(self) -> None:
        """The route's scrape polls, waited for at most SCRAPE_POLL_SECONDS (a slow backend delays no scrape); a
        scrape while they are still in flight waits for those rather than queueing more."""
        if self._scrape_polls is None or self._scrape_polls.done():
            self._scrape_polls = asyncio.gather(*(self._poll(poll) for poll in self.route.scrape_polls()))
        try:
            await asyncio.wait_for(asyncio.shield(self._scrape_polls), SCRAPE_POLL_SECONDS)
        except TimeoutError:
            log.warning("the backend's statistics took over %.1fs: /metrics answers without them", SCRAPE_POLL_SECONDS)

    async def stop(self) -> None:
        """After the last request."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.route.stop()
        if self.drafter is not None:
            self.drafter.stop()
        if self.session:
            await self.session.close()

    # --- health and metrics ------------------------------------------------------------------------

    async def backend_ready(self) -> tuple[bool, str]:
        if self.supervisor is not None and self.supervisor.exited:
            return False, "the server process has exited"
        assert self.session is not None
        url = self.backend.url + self.backend.health_path
        try:
            async with self.session.get(url, timeout=aiohttp.ClientTimeout(total=self.health_timeout)) as resp:
                await resp.read()
                if resp.status == 200:
                    return True, "ok"
                return False, f"{url} answered HTTP {resp.status}"
        except (TimeoutError, aiohttp.ClientError) as error:
            return False, f"{url} not reachable: {type(error).__name__}"

    def mark_ready(self) -> None:
        """Log (once) that the backend answers: the end of start-up."""
        if not self.ready_announced:
            self.ready_announced = True
            since = f" after {time.monotonic() - self.supervisor.started_at:.1f}s" if self.supervisor else ""
            log.info("backend ready%s; serving %r on port %d", since, self.model, self.config.port)

    async def page(self, path: str) -> Page | None:
        """The answer to GET `path` (its path decoded), None when there is no such page."""
        if path == "/health":
            ok, detail = await self.backend_ready()
            self.metrics.backend_up.set(1 if ok else 0)
            if ok:
                self.mark_ready()
                return Page.json({"status": "ok", "model": self.model})
            return Page.json({"status": "unavailable", "detail": detail}, 503)
        if path == "/metrics":
            if self.stats_interval > 0:  # 0: no statistics polled
                await self._fresh_statistics()
            if self.capture is not None:
                self.metrics.capture(await self.capture.current())
            return Page(200, self.metrics.render(), CONTENT_TYPE_LATEST)
        if path == "/v1/models":
            return Page.json({"object": "list", "data": [self._model_card()]})
        if path.startswith(MODELS_PREFIX) and len(path) > len(MODELS_PREFIX):  # the openai client's models.retrieve
            requested = path[len(MODELS_PREFIX) :]
            if requested != self.model:
                error = model_not_found(requested, self.model)
                return Page(error.status, error.body())
            return Page.json(self._model_card())
        return None

    def _model_card(self) -> dict[str, Any]:
        return {"id": self.model, "object": "model", "created": self.created, "owned_by": "specdec"}
