"""Failed reconciles: back-off by key, and why a deployment's Service lane could not apply its Service."""

from __future__ import annotations

from collections.abc import Callable

from specdec.kube.workqueue import backoff


class Backoff:
    """Consecutive failed reconciles by key (kind, namespace, name); each retried after a longer wait."""

    def __init__(self, enqueue_after: Callable[..., None]):
        """`enqueue_after(seconds, kind, namespace, name, urgent=False)`: reconcile a key later."""
        self._enqueue_after = enqueue_after
        self._failures: dict[tuple[str, str, str], int] = {}

    def retry_later(self, key: tuple[str, str, str]) -> None:
        failures = self._failures[key] = self._failures.get(key, 0) + 1
        self._enqueue_after(backoff(failures), *key, urgent=True)

    def settled(self, key: tuple[str, str, str]) -> None:
        self._failures.pop(key, None)


class ServiceFailures:
    """By deployment (namespace, name): the generation whose Service the lane could not apply, and why."""

    def __init__(self) -> None:
        self._failures: dict[tuple[str, str], tuple[int | None, Exception]] = {}

    def record(self, namespace: str, name: str, generation: int | None, error: Exception) -> None:
        self._failures[(namespace, name)] = (generation, error)

    def clear(self, namespace: str, name: str) -> None:
        self._failures.pop((namespace, name), None)

    def get(self, namespace: str, name: str) -> tuple[int | None, Exception] | None:
        return self._failures.get((namespace, name))
