"""Leader election on a `coordination.k8s.io/v1` Lease, with client-go's semantics, so two replicas never both write.

Writes to the API: its one Lease (create, update), nothing else. Every replica runs kopf (its watches fill the caches,
its webhook server answers admission requests), but only the leader reconciles: the `Controller` starts its workers
once its `LeaderElector` leads. The protocol is client-go's `leaderelection` package:

- A candidate reads the Lease every retry period. It takes the Lease when there is none (create), when it is released
  (empty `holderIdentity`), or when it has expired: its record has not changed for `leaseDurationSeconds` as measured
  on this replica's own monotonic clock since it first saw that record. Judging expiry by when this replica observed
  the record, not by comparing the holder's `renewTime` with this host's wall clock, is what client-go does: it needs
  the nodes' clocks to tick at the same rate, not to agree, so clock skew between nodes cannot elect two leaders. The
  cost: a replica that starts after the leader died waits one lease duration before taking over (a released Lease is
  taken at once).
- The leader renews (updates `renewTime`) every retry period. Each write is an update carrying the `resourceVersion`
  it read, so of two candidates racing for an expired Lease exactly one wins; the other gets 409 and retries.
- A leader that has not renewed successfully for the renew deadline (shorter than the lease duration, so it stops
  before any other replica may take over) has lost; so has a leader that finds another holder in the Lease. A
  watchdog thread checks the deadline, so a request hung in the client (its timeout is longer than the deadline)
  cannot keep a deposed leader leading. `on_lost` runs at each loss, and the replica campaigns again: it stays a
  warm standby (its informers keep their caches) and leads again as soon as the Lease is free, or at once when it
  still names this replica (nobody took over; e.g. after an API-server outage, when every replica failed to renew).
  controller-runtime exits instead and relies on the kubelet to restart the pod; after repeated outages that is
  CrashLoopBackOff, minutes without a leader. What makes staying safe is that the writes are fenced, not the exit:
  the reconciler's client (`apply.Client.fenced(is_leader)`) refuses every write unless `is_leader()` holds at
  that moment (leading, and renewed within the renew deadline), and the workers wait for leadership before each
  pass. A write already sent when the deadline passes is the same window an exiting process has.
- `release()` on graceful shutdown empties `holderIdentity`, so the other replica takes over at its next retry
  instead of after a lease duration.

The decision (`decide`) and the records written (`acquired`, `renewed`, `released`) are pure functions of the Lease,
the identity and the clocks; `LeaderElector` runs them against the API through `apply.Client.request` only.
"""

from __future__ import annotations

import datetime
import enum
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from disaggspec import apply, metrics

log = logging.getLogger("disaggspec.leader")

LEASE = apply.Kind("coordination.k8s.io/v1", "Lease", "leases")

JITTER = 1.2
"""A candidate waits retry_period * uniform(1, JITTER) between tries (client-go's JitterFactor), so replicas that
started together do not keep racing in step."""


class Action(enum.Enum):
    """What a replica should do with the Lease it just read."""

    CREATE = "create"
    """No Lease exists: create it, holding it."""
    TAKE_OVER = "take-over"
    """Released or expired: update it to name this replica (one more leader transition)."""
    RENEW = "renew"
    """This replica holds it: update `renewTime`."""
    WAIT = "wait"
    """Another replica holds a valid Lease."""


@dataclass(frozen=True)
class Observation:
    """A Lease record as this replica first saw it: its resourceVersion and the local monotonic time of that."""

    resource_version: str
    at: float


def micro_time(now: datetime.datetime) -> str:
    """A `metav1.MicroTime` as the API server writes it (RFC 3339, microseconds, UTC)."""
    return now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def holder(lease: dict[str, Any] | None) -> str:
    """The identity holding `lease` ("" when absent or released)."""
    return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")


def observe(lease: dict[str, Any] | None, previous: Observation | None, now: float) -> Observation | None:
    """The observation after reading `lease` at monotonic time `now`: kept while its record is unchanged."""
    if lease is None:
        return None
    version = str(lease.get("metadata", {}).get("resourceVersion", ""))
    if previous is not None and previous.resource_version == version:
        return previous
    return Observation(version, now)


def decide(
    lease: dict[str, Any] | None,
    identity: str,
    observed: Observation | None,
    now: float,
    default_duration: float,
) -> Action:
    """What `identity` should do with `lease`, first observed (unchanged since) as `observed`, at monotonic `now`."""
    if lease is None:
        return Action.CREATE
    current = holder(lease)
    if current == identity:
        return Action.RENEW
    if not current:
        return Action.TAKE_OVER
    duration = float((lease.get("spec") or {}).get("leaseDurationSeconds") or default_duration)
    if observed is None or now >= observed.at + duration:
        return Action.TAKE_OVER
    return Action.WAIT


def acquired(
    lease: dict[str, Any] | None,
    namespace: str,
    name: str,
    identity: str,
    duration_seconds: int,
    now: datetime.datetime,
) -> dict[str, Any]:
    """The Lease naming `identity` as a new holder (a create when `lease` is None, else an update of it)."""
    stamp = micro_time(now)
    spec = {
        "holderIdentity": identity,
        "leaseDurationSeconds": duration_seconds,
        "acquireTime": stamp,
        "renewTime": stamp,
        "leaseTransitions": 0,
    }
    if lease is None:
        return {
            "apiVersion": LEASE.api_version,
            "kind": LEASE.kind,
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }
    old = lease.get("spec") or {}
    # A transition is a change of holder; a replica re-taking the Lease it held (after a restart) is none.
    transitions = int(old.get("leaseTransitions") or 0) + (0 if holder(lease) == identity else 1)
    return _with_spec(lease, {**old, **spec, "leaseTransitions": transitions})


def renewed(lease: dict[str, Any], duration_seconds: int, now: datetime.datetime) -> dict[str, Any]:
    """The Lease with `renewTime` moved to `now` (the holder, acquire time and transitions unchanged)."""
    return _with_spec(
        lease, {**(lease.get("spec") or {}), "renewTime": micro_time(now), "leaseDurationSeconds": duration_seconds}
    )


def released(lease: dict[str, Any], now: datetime.datetime) -> dict[str, Any]:
    """The Lease given up: no holder, so any other replica takes it at its next try (client-go's release)."""
    stamp = micro_time(now)
    old = lease.get("spec") or {}
    spec = {
        "holderIdentity": "",
        "leaseDurationSeconds": 1,
        "acquireTime": stamp,
        "renewTime": stamp,
        "leaseTransitions": int(old.get("leaseTransitions") or 0),
    }
    return _with_spec(lease, spec)


def _with_spec(lease: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    """`lease` with a new spec, keeping the metadata (resourceVersion: the update is refused if it changed)."""
    return {
        "apiVersion": LEASE.api_version,
        "kind": LEASE.kind,
        "metadata": dict(lease.get("metadata") or {}),
        "spec": {k: v for k, v in spec.items() if v is not None},
    }


def _wall_clock() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class LeaderElector:
    """Holds the Lease `namespace/name` for `identity` while it can; `on_lost` runs each time it stops leading, and it
    campaigns again."""

    def __init__(
        self,
        client: apply.Client,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        on_lost: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime.datetime] = _wall_clock,
        sleep: Callable[[threading.Event, float], bool] | None = None,
    ) -> None:
        if not 0 < retry_period < renew_deadline < lease_duration:
            raise ValueError(
                "leader election needs 0 < retry period < renew deadline < lease duration, got "
                f"{retry_period} < {renew_deadline} < {lease_duration}"
            )
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.on_lost = on_lost
        self._clock = clock
        self._wall_clock = wall_clock
        self._sleep = sleep or (lambda event, seconds: event.wait(seconds))
        self._lock = threading.Lock()
        self._leading = threading.Event()
        self._stopped = threading.Event()
        self._term = 0
        """Counts losses: a round whose write was in flight when leadership was lost does not lead on its answer."""
        self._lease: dict[str, Any] | None = None
        self._observed: Observation | None = None
        self._renewed_at = 0.0
        """Monotonic time when the last successful acquire or renew was *sent* (the Lease is valid from then)."""
        self._threads: list[threading.Thread] = []
        metrics.IS_LEADER.set(0)

    @property
    def path(self) -> str:
        return LEASE.item(self.namespace, self.name)

    # ---- the public surface ----------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start campaigning (and, once leading, renewing and watching the deadline) on daemon threads."""
        for target, name in ((self._run, "leader-election"), (self._watchdog, "leader-watchdog")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def wait_until_leader(self) -> None:
        """Block until this replica leads (forever on a replica that stays a standby)."""
        self._leading.wait()

    def is_leader(self) -> bool:
        """True while this replica holds the Lease and its last renewal is within the renew deadline (the write fence:
        checked before every write of a pass)."""
        with self._lock:
            return self._leading.is_set() and self._clock() - self._renewed_at <= self.renew_deadline

    def release(self) -> None:
        """Stop campaigning; if leading, give the Lease up so another replica takes over at its next try."""
        self._stopped.set()
        for thread in self._threads:  # let a round in flight finish, so its write is released too (bounded wait)
            if thread is not threading.current_thread():
                thread.join(timeout=self.renew_deadline)
        with self._lock:
            was_leading = self._leading.is_set()
            lease = self._lease
            self._leading.clear()
        metrics.IS_LEADER.set(0)
        if not was_leading or lease is None:
            return
        try:
            try:
                self.client.request("PUT", self.path, body=released(lease, self._wall_clock()))
            except apply.ApiError as error:
                if error.status != 409:
                    raise
                current = self.client.request("GET", self.path)  # renewed meanwhile by our own loop: retry once
                if holder(current) != self.identity:
                    return
                self.client.request("PUT", self.path, body=released(current, self._wall_clock()))
            log.info("released the leader lease %s/%s", self.namespace, self.name)
        except Exception as error:  # the Lease then simply expires
            log.warning("could not release the leader lease %s/%s: %s", self.namespace, self.name, error)

    # ---- one round -------------------------------------------------------------------------------------------------

    def try_acquire_or_renew(self) -> bool:
        """One read and, when due, one write; True when this replica holds the Lease afterwards."""
        with self._lock:
            term = self._term
        sent_at = self._clock()
        try:
            lease: dict[str, Any] | None = self.client.request("GET", self.path)
        except apply.ApiError as error:
            if error.status != 404:
                raise
            lease = None
        now = self._clock()
        self._observed = observe(lease, self._observed, now)
        action = decide(lease, self.identity, self._observed, now, self.lease_duration)
        if action is Action.WAIT:
            if self._leading.is_set():
                self._lose(f"the lease is now held by {holder(lease)!r}")
            with self._lock:
                self._lease = lease
            return False
        duration = max(1, round(self.lease_duration))
        wall = self._wall_clock()
        if action is Action.CREATE:
            written = self.client.request(
                "POST",
                LEASE.collection(self.namespace),
                body=acquired(None, self.namespace, self.name, self.identity, duration, wall),
            )
        elif action is Action.TAKE_OVER:
            assert lease is not None
            if self._leading.is_set():
                self._lose(f"the lease was taken over (holder {holder(lease)!r})")
                return False
            written = self.client.request(
                "PUT", self.path, body=acquired(lease, self.namespace, self.name, self.identity, duration, wall)
            )
        else:
            assert lease is not None
            written = self.client.request("PUT", self.path, body=renewed(lease, duration, wall))
        with self._lock:
            if self._term != term:  # lost while this write was in flight: the next round reads the Lease afresh
                return False
            self._lease = written
            self._observed = observe(written, None, self._clock())
            self._renewed_at = sent_at
            newly = not self._leading.is_set()
            self._leading.set()
        if newly:
            metrics.IS_LEADER.set(1)
            log.info("acquired the leader lease %s/%s as %s", self.namespace, self.name, self.identity)
        return True

    # ---- the threads -----------------------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                self.try_acquire_or_renew()
            except apply.ApiError as error:
                # 409: another replica wrote first (create or update); anything else: try again next round. A leader's
                # failures are bounded by the watchdog's renew deadline.
                level = logging.DEBUG if error.status == 409 else logging.WARNING
                log.log(level, "leader election: %s", error)
            except Exception as error:
                log.warning("leader election: %s", error)
            period = self.retry_period if self._leading.is_set() else self.retry_period * random.uniform(1.0, JITTER)
            self._sleep(self._stopped, period)

    def _watchdog(self) -> None:
        while not self._stopped.is_set():
            self.check_deadline()
            self._sleep(self._stopped, min(self.retry_period, 1.0))

    def check_deadline(self) -> None:
        """Lose leadership when the last successful renewal is older than the renew deadline."""
        with self._lock:
            late = self._leading.is_set() and self._clock() - self._renewed_at > self.renew_deadline
        if late:
            self._lose(f"could not renew the lease within {self.renew_deadline:.0f}s")

    def _lose(self, why: str) -> None:
        with self._lock:
            if not self._leading.is_set():
                return
            self._leading.clear()
            self._term += 1
            self._observed = None  # judge the Lease afresh: wait a whole lease duration before taking it over
        metrics.IS_LEADER.set(0)
        metrics.LEADER_LOSSES.inc()
        log.error("lost the leader lease %s/%s: %s; campaigning again", self.namespace, self.name, why)
        if self.on_lost is not None:
            self.on_lost()
