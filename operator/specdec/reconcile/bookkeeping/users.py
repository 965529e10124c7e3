"""Which deployments use each shared object (EngineBuild or ModelCache), and what they last heard of it."""

from __future__ import annotations

import collections
import threading


class Users:
    """By (namespace, shared object): its users, and what they last heard (see fanout.UserFanout). An
    EngineBuild's and a ModelCache's names are content hashes of different inputs: one name space will do."""

    def __init__(self) -> None:
        self._users: dict[tuple[str, str], set[str]] = collections.defaultdict(set)
        self._told: dict[tuple[str, str], tuple] = {}
        self._guard = threading.Lock()

    def use(self, namespace: str, shared: str, user: str) -> None:
        with self._guard:
            self._users[(namespace, shared)].add(user)

    def of(self, namespace: str, shared: str) -> list[str]:
        with self._guard:
            return sorted(self._users.get((namespace, shared), ()))

    def forget_user(self, namespace: str, user: str) -> None:
        with self._guard:
            for (ns, _), users in self._users.items():
                if ns == namespace:
                    users.discard(user)

    def forget_shared(self, namespace: str, shared: str) -> None:
        """A shared object deleted: one made again is heard of anew."""
        with self._guard:
            self._told.pop((namespace, shared), None)

    def to_tell(self, namespace: str, shared: str, heard: tuple) -> list[str] | None:
        """The users to tell `heard`, None when it is what they last heard."""
        key = (namespace, shared)
        with self._guard:
            if self._told.get(key) == heard:
                return None
            self._told[key] = heard
            return list(self._users.get(key, ()))
