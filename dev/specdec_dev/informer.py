"""A kind's objects kept current by list and watch on a thread of its own (the kubernetes client blocks), for
the local pod runner's asyncio loop (specdec_dev.podrunner). The client has no informer of its own; kopf's
watching is tied to its handlers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

import urllib3
from kubernetes import watch
from kubernetes.client.rest import ApiException

log = logging.getLogger("specdec_dev.podrunner")

RETRY_SECONDS = 2.0
WATCH_SECONDS = 30  # watches end and start again this often, so the threads of a stopped runner end too

Key = tuple[str, str]  # namespace, name


def _key(obj: dict[str, Any]) -> Key:
    return obj["metadata"]["namespace"], obj["metadata"]["name"]


class Informer:
    """One kind's objects, kept current by list and watch on a thread of its own; the thread hands every
    change to the event loop, which alone touches `objects`."""

    def __init__(
        self, list_objects: Callable, selector: str, loop: asyncio.AbstractEventLoop, changed: Callable[[], None]
    ):
        self.objects: dict[Key, dict[str, Any]] = {}
        self._list, self._selector, self._loop, self._changed = list_objects, selector, loop, changed
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"watch {selector}")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()

    def _post(self, fn: Callable, *args: Any) -> None:
        if not self._stopped.is_set():
            with contextlib.suppress(RuntimeError):  # the loop has closed: the runner stopped
                self._loop.call_soon_threadsafe(fn, *args)

    def _replace(self, items: list[dict[str, Any]]) -> None:
        self.objects = {_key(o): o for o in items}
        self._changed()

    def _apply(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            self.objects.pop(_key(obj), None)
        else:
            self.objects[_key(obj)] = obj
        self._changed()

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                listing = json.loads(self._list(label_selector=self._selector, _preload_content=False).data)
                self._post(self._replace, listing["items"])
                version = listing["metadata"]["resourceVersion"]
                while not self._stopped.is_set():
                    for event in watch.Watch().stream(
                        self._list,
                        label_selector=self._selector,
                        resource_version=version,
                        timeout_seconds=WATCH_SECONDS,
                        allow_watch_bookmarks=True,
                    ):
                        obj = event["raw_object"]
                        version = obj["metadata"]["resourceVersion"]
                        if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                            self._post(self._apply, event["type"], obj)
            except ApiException as error:
                if error.status != 410:  # 410: the version expired; list again at once
                    log.warning("watching %s: %s", self._selector, error.reason)
                    self._stopped.wait(RETRY_SECONDS)
            except (urllib3.exceptions.HTTPError, OSError, ValueError) as error:
                log.warning("watching %s: %s", self._selector, error)
                self._stopped.wait(RETRY_SECONDS)
