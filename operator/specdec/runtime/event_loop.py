"""The event loop specdec-runtime serves on: uvloop's when it is installed (the runtime images install it, with
the `runtime` extra), asyncio's own otherwise or when SPECDEC_RUNTIME_LOOP=asyncio.

uvloop runs the loop, its sockets and timers in C (libuv): each streamed token the front relays wakes the loop
and crosses two sockets, and that part of its cost drops with it (docs/performance/runtime-front.md).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")
LOOP_ENV = "SPECDEC_RUNTIME_LOOP"


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop factory, or None for asyncio's default loop."""
    if os.environ.get(LOOP_ENV, "uvloop") == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run(main: Awaitable[T]) -> T:
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)  # type: ignore[arg-type]  # Runner.run takes a coroutine; callers pass one
