"""One active operator replica: leader election on a coordination.k8s.io/v1 Lease.

The algorithm is the Kubernetes client's own (`kubernetes.leaderelection`, a port of client-go's): a
candidate takes the Lease when it is missing, has no holder, or its holder was not seen renewing for
`lease_seconds`; the leader renews every `retry_period` and gives up when it could not renew for
`renew_deadline`. What this module adds, each marked where it is done:

- our own ApiClient (the library's LeaseLock uses the global default client), a timeout on every
  request (the library sets none: a hung renewal would outlive the lease), and network errors
  treated as a failed attempt (the library catches only ApiException: one would end its thread);
- validation that raises ValueError (the library's Config calls sys.exit on bad values);
- a campaign that goes on after a lost term (the library's `run()` returns), as a standby;
- `stop()`, which ends the term and releases the Lease so a standby takes over at once (the library
  never releases; client-go's ReleaseOnCancel does the same: it clears holderIdentity);
- a standby that saw the Lease held does not re-create a deleted Lease before that holder's lease
  would have run out (the library creates it at once: two leaders until the old one's next attempt);
- `is_leader()`, true only while the last renewal is younger than `renew_deadline`, and false as soon
  as another holder is seen (the library keeps retrying until the deadline before it says so).

Settings (`ElectionSettings.from_env`; the Helm chart sets them from `leaderElection.*`):

  SPECDEC_LEADER_ELECTION                         true|false (default false: a single local process)
  SPECDEC_LEADER_ELECTION_NAMESPACE               namespace of the Lease; default POD_NAMESPACE, else
                                                  the in-cluster service-account namespace
  SPECDEC_LEADER_ELECTION_NAME                    name of the Lease (default specdec-operator)
  SPECDEC_LEADER_ELECTION_LEASE_SECONDS           a dead leader is replaced after this (default 15)
  SPECDEC_LEADER_ELECTION_RENEW_DEADLINE_SECONDS  a leader that cannot renew for this long stops
                                                  leading (default 10)
  SPECDEC_LEADER_ELECTION_RETRY_PERIOD_SECONDS    between attempts to acquire or renew (default 2)

The identity of a candidate is POD_NAME (else HOSTNAME) plus a random suffix, so a restarted
container never mistakes the previous one's Lease for its own.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

log = logging.getLogger(__name__)

# The library logs every follower attempt at INFO ("yet to finish lease_duration..."): every retry
# period, forever, on each standby. Ours logs the transitions instead.
if logging.getLogger("leaderelection").level == logging.NOTSET:
    logging.getLogger("leaderelection").setLevel(logging.WARNING)

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
DEFAULT_LEASE_NAME = "specdec-operator"
JITTER_FACTOR = 1.2  # electionconfig.Config's: renew_deadline must exceed retry_period times this


def validate(lease_seconds: float, renew_deadline: float, retry_period: float) -> None:
    """The library's Config checks, as ValueError instead of sys.exit; plus leaseDurationSeconds is an
    integer in the Lease (the library writes int(str(lease_seconds)), which fails on 15.0)."""
    if retry_period < 1:
        raise ValueError(f"retry period must be at least 1 second (got {retry_period})")
    if renew_deadline <= JITTER_FACTOR * retry_period:
        raise ValueError(
            f"renew deadline ({renew_deadline}s) must be greater than {JITTER_FACTOR} × the retry "
            f"period ({retry_period}s)"
        )
    if lease_seconds <= renew_deadline:
        raise ValueError(
            f"lease duration ({lease_seconds}s) must be greater than the renew deadline ({renew_deadline}s)"
        )
    if lease_seconds != int(lease_seconds):
        raise ValueError(f"lease duration must be a whole number of seconds (got {lease_seconds})")


def default_identity(env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    name = env.get("POD_NAME") or env.get("HOSTNAME") or socket.gethostname()
    return f"{name}_{uuid.uuid4().hex[:8]}"


class _Stopped(Exception):
    """Unwinds the library's loops when stop() was called."""


class _Lost(Exception):
    """Unwinds the library's renew loop when another holder has the Lease."""


class _TimedApi:
    """CoordinationV1Api with a timeout on every call (the library passes none)."""

    def __init__(self, api: client.CoordinationV1Api, timeout: float):
        self._api, self._timeout = api, timeout

    def __getattr__(self, name: str) -> Any:
        return functools.partial(getattr(self._api, name), _request_timeout=self._timeout)


class _Lock(LeaseLock):
    """The library's LeaseLock on our ApiClient, failing an attempt (not the thread) on any error."""

    def __init__(self, api: client.ApiClient, name: str, namespace: str, identity: str, timeout: float):
        super().__init__(name, namespace, identity)
        # The library builds client.CoordinationV1Api() on the global default client.
        self.api_instance = _TimedApi(client.CoordinationV1Api(api), timeout)  # type: ignore[assignment]  # a proxy with its methods

    # The library catches only ApiException; a refused connection or a timeout would end its loop.
    def get(self, name: str, namespace: str) -> tuple[bool, Any]:
        try:
            return super().get(name, namespace)
        except Exception as error:  # noqa: BLE001 - any transport failure is a failed attempt
            # Not a 404: the library retries at the next period (it reads .body and .reason).
            return False, ApiException(status=0, reason=f"{type(error).__name__}: {error}")

    may_create: Callable[[], bool] = staticmethod(lambda: True)  # set by _Elector

    def create(self, name: str, namespace: str, election_record: Any) -> bool:
        if not self.may_create():
            return False
        try:
            return super().create(name, namespace, election_record)
        except Exception as error:  # noqa: BLE001 - as in get()
            log.info("could not create Lease %s/%s: %s", namespace, name, error)
            return False

    def update(self, name: str, namespace: str, updated_record: Any) -> bool:
        try:
            return super().update(name, namespace, updated_record)
        except Exception as error:  # noqa: BLE001 - as in get()
            log.info("could not update Lease %s/%s: %s", namespace, name, error)
            return False


class _Elector(leaderelection.LeaderElection):
    """One campaign and term of the library's algorithm, stoppable, reporting to its Leadership."""

    def __init__(self, config: electionconfig.Config, owner: Leadership):
        super().__init__(config)
        self.owner = owner
        config.lock.may_create = self._may_create

    def _may_create(self) -> bool:
        """Not while another holder's lease would still run. The library creates a missing Lease at
        once: when someone deletes it, a standby would lead while the leader, until its next attempt,
        still does. Like this the standby waits as if the Lease were there (the leader re-creates it)."""
        record = self.observed_record
        if record is None or record.holder_identity in (None, self.owner.identity):
            return True
        return self.observed_time_milliseconds + self.owner.lease_seconds * 1000 <= int(time.time() * 1000)

    def acquire(self) -> bool:
        super().acquire()  # returns once we hold the Lease (or raises _Stopped)
        self.owner._start_term()  # here, not in the library's onstarted thread: on_stopped never runs first
        return True

    def try_acquire_or_renew(self) -> bool:
        owner = self.owner
        with owner._attempt:  # stop() waits for an attempt in flight, then releases
            if owner._stopping.is_set():
                raise _Stopped
            started = time.monotonic()
            held = super().try_acquire_or_renew()
            if held:
                owner._renewed_at = started
            elif (
                owner._leading
                and self.observed_record is not None
                and self.observed_record.holder_identity not in (None, owner.identity)
            ):
                raise _Lost(self.observed_record.holder_identity)
            return held


class Leadership:
    """Campaign for the Lease `namespace/name` in a daemon thread; call back when a term starts and ends.

    `on_started` runs in the election thread when this candidate becomes leader, and `on_stopped` when
    its term ends (renewals failed for `renew_deadline`, another holder took the Lease, or stop()).
    Both must return quickly: the thread renews the Lease only between them. After a lost term the
    candidate campaigns again as a standby. Single use: start() once, stop() once.
    """

    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        name: str,
        identity: str | None = None,
        lease_seconds: float = 15,
        renew_deadline: float = 10,
        retry_period: float = 2,
        on_started: Callable[[], None] = lambda: None,
        on_stopped: Callable[[], None] = lambda: None,
    ):
        validate(lease_seconds, renew_deadline, retry_period)
        if not namespace or not name:
            raise ValueError("leader election needs the namespace and name of its Lease")
        self.api = api
        self.namespace, self.name = namespace, name
        self.identity = identity or default_identity()
        self.lease_seconds, self.renew_deadline, self.retry_period = int(lease_seconds), renew_deadline, retry_period
        self.on_started, self.on_stopped = on_started, on_stopped
        # A request may not outlive the renew deadline (an attempt is a GET then a PUT).
        self._timeout = renew_deadline / 2
        self._coordination = _TimedApi(client.CoordinationV1Api(api), self._timeout)
        self._stopping = threading.Event()
        self._attempt = threading.Lock()  # one lease operation at a time: an attempt, or the release
        # A term's start (with on_started) and end (with on_stopped) never interleave; reentrant, so a
        # callback may call stop().
        self._term = threading.RLock()
        self._leading = False
        self._renewed_at = float("-inf")  # time.monotonic() when the last successful attempt began
        self._thread: threading.Thread | None = None

    @classmethod
    def from_env(
        cls,
        api: client.ApiClient,
        on_started: Callable[[], None] = lambda: None,
        on_stopped: Callable[[], None] = lambda: None,
        env: Mapping[str, str] | None = None,
    ) -> Leadership | None:
        """The Leadership the environment asks for, or None when leader election is off."""
        settings = ElectionSettings.from_env(env)
        if not settings.enabled:
            return None
        return cls(
            api,
            settings.namespace,
            settings.name,
            settings.identity,
            settings.lease_seconds,
            settings.renew_deadline,
            settings.retry_period,
            on_started,
            on_stopped,
        )

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("Leadership.start() was called already")
        self._thread = threading.Thread(target=self._campaign, daemon=True, name="specdec-leader-election")
        self._thread.start()
        log.info("campaigning for Lease %s/%s as %s", self.namespace, self.name, self.identity)

    def is_leader(self) -> bool:
        """True while this candidate holds the Lease and renewed it less than renew_deadline ago (no
        other candidate can have taken it before lease_seconds have passed since that renewal)."""
        return self._leading and time.monotonic() - self._renewed_at < self.renew_deadline

    @property
    def alive(self) -> bool:
        """The election thread runs (it ends only after stop(), or on a bug: a liveness probe's signal)."""
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        """End the term (on_stopped runs before this returns) and release the Lease if we hold it."""
        self._stopping.set()
        self._end_term()
        with self._attempt:  # no renewal can start after this (they check _stopping) or be in flight
            self._release()

    # -- the election thread ----------------------------------------------------------------------

    def _campaign(self) -> None:
        config = electionconfig.Config(
            _Lock(self.api, self.name, self.namespace, self.identity, self._timeout),
            lease_duration=self.lease_seconds,
            renew_deadline=self.renew_deadline,
            retry_period=self.retry_period,
            onstarted_leading=lambda: None,  # ours runs in acquire(), see _Elector
            onstopped_leading=self._end_term,
        )
        elector = _Elector(config, self)  # one for all terms: it keeps what it observed of the Lease
        while not self._stopping.is_set():
            try:
                elector.run()  # returns when a term ended: renewals failed
            except _Stopped:
                return
            except _Lost as holder:
                log.warning("Lease %s/%s is held by %s now", self.namespace, self.name, holder)
            except Exception:  # a bug (or on_started raised): end the thread, so `alive` tells the probe
                log.exception("leader election failed")
                self._end_term()
                with self._attempt:
                    self._release()  # a standby need not wait for the Lease to expire
                raise
            finally:
                self._end_term()
            self._stopping.wait(self.retry_period)  # then campaign again, as a standby

    def _start_term(self) -> None:
        with self._term:
            if self._stopping.is_set():
                raise _Stopped
            self._leading = True
            log.info("leading (Lease %s/%s, identity %s)", self.namespace, self.name, self.identity)
            self.on_started()

    def _end_term(self) -> None:
        with self._term:
            if not self._leading:
                return
            self._leading = False
            log.info("stopped leading (Lease %s/%s)", self.namespace, self.name)
            self.on_stopped()

    def _release(self) -> None:
        """Clear holderIdentity, as client-go's ReleaseOnCancel does: the library's followers take a Lease
        without a holder at their next attempt, without waiting for it to expire (they time a holder by
        their own observation, so an old renewTime or a short leaseDurationSeconds would not do)."""
        for _ in range(3):  # a conflict means it changed under us: read it again
            try:
                lease = self._coordination.read_namespaced_lease(self.name, self.namespace)
                if lease.spec is None or lease.spec.holder_identity != self.identity:
                    return
                now = datetime.datetime.now(datetime.UTC)
                lease.spec.holder_identity = None
                lease.spec.lease_duration_seconds = 1
                lease.spec.acquire_time = lease.spec.renew_time = now
                self._coordination.replace_namespaced_lease(self.name, self.namespace, lease)
                log.info("released Lease %s/%s", self.namespace, self.name)
                return
            except ApiException as error:
                if error.status != 409:
                    log.warning(
                        "could not release Lease %s/%s: HTTP %s %s",
                        self.namespace,
                        self.name,
                        error.status,
                        error.reason,
                    )
                    return
            except Exception as error:  # noqa: BLE001 - the standby then takes over when the lease expires
                log.warning("could not release Lease %s/%s: %s", self.namespace, self.name, error)
                return


@dataclasses.dataclass(frozen=True)
class ElectionSettings:
    enabled: bool = False
    namespace: str = ""
    name: str = DEFAULT_LEASE_NAME
    identity: str = ""
    lease_seconds: int = 15
    renew_deadline: float = 10
    retry_period: float = 2

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ElectionSettings:
        """Read the SPECDEC_LEADER_ELECTION* variables (see the module docstring); ValueError says which
        one is wrong."""
        env = os.environ if env is None else env
        flag = env.get("SPECDEC_LEADER_ELECTION", "false").strip().lower()
        if flag not in ("true", "false"):
            raise ValueError(f"SPECDEC_LEADER_ELECTION must be true or false (got {flag!r})")
        if flag == "false":
            return cls()

        def number(key: str, default: float) -> float:
            try:
                return float(env.get(key, default))
            except ValueError:
                raise ValueError(f"{key} must be a number of seconds (got {env[key]!r})") from None

        namespace = env.get("SPECDEC_LEADER_ELECTION_NAMESPACE") or env.get("POD_NAMESPACE") or ""
        if not namespace and SERVICE_ACCOUNT_NAMESPACE.is_file():
            namespace = SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
        if not namespace:
            raise ValueError(
                "leader election needs the Lease's namespace: set SPECDEC_LEADER_ELECTION_NAMESPACE "
                "(or POD_NAMESPACE), or run in a pod"
            )
        lease = number("SPECDEC_LEADER_ELECTION_LEASE_SECONDS", cls.lease_seconds)
        renew = number("SPECDEC_LEADER_ELECTION_RENEW_DEADLINE_SECONDS", cls.renew_deadline)
        retry = number("SPECDEC_LEADER_ELECTION_RETRY_PERIOD_SECONDS", cls.retry_period)
        validate(lease, renew, retry)
        return cls(
            enabled=True,
            namespace=namespace,
            name=env.get("SPECDEC_LEADER_ELECTION_NAME") or DEFAULT_LEASE_NAME,
            identity=default_identity(env),
            lease_seconds=int(lease),
            renew_deadline=renew,
            retry_period=retry,
        )
