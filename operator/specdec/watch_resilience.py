"""Keep kopf's watch streams alive through answers it treats as fatal.

kopf (1.45) re-lists after an in-stream `ERROR 410` event, and reconnects after a dropped
connection, but an HTTP error *answer* to the watch or list request itself (410 Gone when the
resource version is too old, or a 5xx / connection failure that outlasts its request retries)
escapes its watcher task and stops the whole operator. client-go's reflector re-lists and goes on
in all those cases, and kopf has no setting or hook for it, so we wrap the one function kopf's
`infinite_watch` loops over: such a failure ends the current stream quietly, and kopf starts a new
one (a fresh list, then a watch) after its `watching.reconnect_backoff`. Events missed meanwhile
are caught by that list and by the operator's periodic resync.
"""

from __future__ import annotations

import logging

import aiohttp
from kopf._cogs.clients import errors, watching

log = logging.getLogger(__name__)

_original_continuous_watch = watching.continuous_watch


def _recoverable(error: BaseException) -> bool:
    if isinstance(error, errors.APIError):
        return error.status == 410 or error.status == 429 or error.status >= 500
    return isinstance(error, (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, TimeoutError))


async def _continuous_watch(**kwargs):
    try:
        async for item in _original_continuous_watch(**kwargs):
            yield item
    except Exception as error:  # noqa: BLE001 — re-raised unless recoverable
        if not _recoverable(error):
            raise
        log.warning("watch of %s ended (%s: %s); listing and watching again",
                    kwargs.get("resource"), type(error).__name__, error)


def install() -> None:
    """Idempotent; `infinite_watch` looks `continuous_watch` up in its module at every loop."""
    watching.continuous_watch = _continuous_watch
