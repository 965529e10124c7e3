"""Every change this operator makes to kopf, in one place, for the one kopf release they were checked on.

Three of kopf's behaviours do not fit an operator at fleet scale, and kopf has no setting or hook for any:

- Watch streams. kopf re-lists after an in-stream `ERROR 410` event, and reconnects after a dropped
  connection, but an HTTP error *answer* to the watch or list request itself (410 Gone when the resource
  version is too old, or a 5xx / connection failure that outlasts its request retries) escapes its watcher
  task and stops the whole operator. client-go's reflector re-lists and goes on in all those cases, so we
  wrap the one function kopf's `infinite_watch` loops over: such a failure ends the current stream
  quietly, and kopf starts a new one (a fresh list, then a watch) after its `watching.reconnect_backoff`.
  Events missed meanwhile are caught by that list and by the operator's periodic resync.
- JSON. A fifth of the operator's Python CPU in a fleet of 1000 went to the standard library's json.loads
  (py-spy, `bench/run.py --profile`), nearly all of it in kopf's watch streams. The module of its watch
  stream (`kopf._cogs.clients.api`, whose only use of json is `json.loads` of each event line) gets a json
  module whose `loads` is jsonio.loads (orjson).
- Diff bases. kopf deep-copies every object of every watch event into a diff base, for on.create/on.update
  handlers to diff against; this operator has on.event handlers only, and nothing reads it. The copies
  were ~8 % of the operator's CPU in a fleet of 1000 (py-spy): `NoDiffBase` keeps none.

The first two reach into kopf's private `kopf._cogs`, which changes between releases without notice: so this
module refuses to load beside any kopf but the pinned one (constraints.txt; a unit test keeps the two equal).
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import types
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import kopf

KOPF_VERSION = "1.45.2"

if importlib.metadata.version("kopf") != KOPF_VERSION:
    raise ImportError(
        f"specdec.kube.kopf_patches patches kopf {KOPF_VERSION}'s private modules, but kopf "
        f"{importlib.metadata.version('kopf')} is installed: install with `--constraint constraints.txt`, or check "
        f"each patch against the new release and update KOPF_VERSION (and constraints.txt)"
    )


from kopf._cogs.clients import api, errors, watching  # noqa: E402 — only once the version is known

from specdec.kube import jsonio  # noqa: E402 — with the imports above

log = logging.getLogger(__name__)

_original_continuous_watch = watching.continuous_watch


def _recoverable(error: BaseException) -> bool:
    if isinstance(error, errors.APIError):
        return error.status == 410 or error.status == 429 or error.status >= 500
    return isinstance(error, (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, TimeoutError))


async def _continuous_watch(**kwargs: Any) -> AsyncIterator[Any]:
    try:
        async for item in _original_continuous_watch(**kwargs):
            yield item
    except Exception as error:  # noqa: BLE001 — re-raised unless recoverable
        if not _recoverable(error):
            raise
        log.warning(
            "watch of %s ended (%s: %s); listing and watching again",
            kwargs.get("resource"),
            type(error).__name__,
            error,
        )


def install_watch_resilience() -> None:
    """Idempotent; `infinite_watch` looks `continuous_watch` up in its module at every loop."""
    watching.continuous_watch = _continuous_watch


def install_json() -> None:
    module = types.ModuleType("json")
    module.__dict__.update(json.__dict__)
    module.loads = jsonio.loads  # type: ignore[attr-defined]  # a fresh module: mypy knows no attributes of it
    api.json = module


class NoDiffBase(kopf.DiffBaseStorage):
    """No diff base (kopf has no setting to skip it): right only while no handler diffs (on.create, on.update,
    on.field, on.resume, on.delete, daemons, timers)."""

    def build(  # type: ignore[override]  # no diff base at all: see the class docstring
        self, *, body: kopf.Body, extra_fields: Any = None
    ) -> None:
        return None

    def fetch(self, *, body: kopf.Body) -> None:  # noqa: ARG002 — kopf's signature
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: Any) -> None:  # noqa: ARG002 — kopf's signature
        pass


def install(settings: kopf.OperatorSettings) -> None:
    """All of the above, at the operator's start-up (before kopf starts its watches)."""
    settings.persistence.diffbase_storage = NoDiffBase()
    install_watch_resilience()
    install_json()
