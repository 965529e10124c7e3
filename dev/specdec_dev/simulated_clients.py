"""Simulated clients of a runtime pod in the local cluster: loads of /v1/completions.

- open loop (the pod runner's own, `open_loop`): arrivals are a Poisson process at the profile's
  `requestsPerSecond`, each asking for `maxTokens` (half of them streamed); they do not wait for earlier
  answers, except that a pod with MAX_IN_FLIGHT requests outstanding drops new arrivals, so an overloaded
  simulation does not snowball;
- closed loop (`closed_loop`, for a sweep over concurrency): N clients, each sending its next request when its
  last is answered, so N requests are in flight all along (their lengths vary around a mean).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

import aiohttp

from specdec_dev.simulation_profile import Profile

MAX_IN_FLIGHT = 64
MAX_WAIT_SECONDS = 1.0  # how soon a new rate applies
PROMPT = "Explain speculative decoding in one paragraph."
STREAMED = 0.5  # the share of requests that stream


async def _request(session: aiohttp.ClientSession, url: str, max_tokens: int, stream: bool) -> None:
    try:
        async with session.post(url, json={"prompt": PROMPT, "max_tokens": max_tokens, "stream": stream}) as response:
            await response.read()
    except (TimeoutError, aiohttp.ClientError):
        pass  # a pod starting or stopping; the front's own metrics count what it answered


async def open_loop(
    session: aiohttp.ClientSession, url: str, profile: Callable[[], Profile], rng: random.Random
) -> None:
    """Send completions to `url` until cancelled; `profile()` is read at every arrival."""
    in_flight: set[asyncio.Task] = set()
    try:
        while True:
            current = profile()
            if current.requests_per_second <= 0:
                await asyncio.sleep(MAX_WAIT_SECONDS)
                continue
            wait = rng.expovariate(current.requests_per_second)
            # Waiting at most a second and drawing again is the same process (it is memoryless), and a
            # changed rate applies within that second.
            await asyncio.sleep(min(wait, MAX_WAIT_SECONDS))
            if wait > MAX_WAIT_SECONDS or len(in_flight) >= MAX_IN_FLIGHT:
                continue
            # Every other request streams, as chat clients do: the front's time to first token has samples.
            task = asyncio.create_task(_request(session, url, current.max_tokens, stream=rng.random() < STREAMED))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
    finally:
        for task in in_flight:
            task.cancel()


async def closed_loop(
    session: aiohttp.ClientSession,
    url: str,
    clients: int,
    max_tokens: int,
    stop: asyncio.Event,
    headers: dict[str, str] | None = None,
    seed: int = 0,
) -> int:
    """`clients` clients sending completions to `url` one after another until `stop` is set; returns the requests
    answered. Each asks for a length drawn uniformly from half to one and a half times `max_tokens` (the mean):
    identical requests without drafts would all end at the same step and leave the batch empty while they are
    answered and sent again, a lockstep no real load has. A failed request ends the load with its error: a sweep
    that measured failures measured nothing."""
    rng = random.Random(seed)
    answered = 0

    async def client() -> None:
        nonlocal answered
        while not stop.is_set():
            tokens = rng.randint(max(max_tokens // 2, 1), max_tokens * 3 // 2)
            async with session.post(url, json={"prompt": PROMPT, "max_tokens": tokens}, headers=headers) as response:
                await response.read()
                response.raise_for_status()
            answered += 1

    await asyncio.gather(*(client() for _ in range(clients)))
    return answered
