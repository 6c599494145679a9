"""The guards of a reconcile pass: what may stop it from writing, and the memory they keep between passes.

- **Holds.** A pass that created children, was refused and deleted them again puts its service on hold: passes of
  the same generation write nothing until the hold ends (`ROLLBACK_HOLD_SECONDS`, growing per attempt). Without it
  the rollback's own DELETE events would queue the service again at once and every pass would create and delete the
  same children (the work queue's backoff spaces retries, not passes that events trigger).
- **Rolled-back children.** The uids a rollback deleted are not live, although the watch-fed cache may still hold
  them: a pass in between must not take them for live (it would skip re-creating them, or create the others alone).
- **Missing APIs.** A spec that needs an optional kind the cluster does not serve (a multi-node pool needs the
  LeaderWorkerSet API) is applied not at all.
- **Stale owner.** A pass that would create a child first makes sure its owner still exists as cached: creating is
  the one write that can outlive a dead owner (the garbage collector deletes it again, its event queues the owner,
  and so on).
The memory (`Guards`) is touched only under the service's lock; nothing here talks to the API server.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

from disaggspec import apply
from disaggspec import constants as c
from disaggspec.api import DisaggSpecService, pool
from disaggspec.runtime import informer
from disaggspec.runtime.availability import ApiAvailability

ServiceKey = tuple[str, str]
"""(namespace, name) of a DisaggSpecService."""

ROLLBACK_HOLD_SECONDS: Final[tuple[float, ...]] = (2.0, 5.0, 15.0, 30.0, 60.0)
"""How long a service whose pass was rolled back waits before writing again (the last one repeats)."""


@dataclass(frozen=True)
class Hold:
    """Until `until` (monotonic), passes of `generation` write nothing; `message` is the refusal that caused it."""

    generation: int
    message: str
    until: float
    attempts: int


class HeldOff(Exception):
    """A pass that wrote nothing because its service is on hold; `retry_after` tells the work queue when to retry."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"a child was refused: writing again in {retry_after:.0f}s")
        self.retry_after = retry_after


class ApiMissing(Exception):
    """A pass that wrote nothing because the spec needs an API the cluster does not serve; retried after
    `retry_after` (the informer of that kind lists again as often)."""

    def __init__(self, message: str, retry_after: float = informer.ABSENT_RECHECK_SECONDS) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Stale(Exception):
    """The cached service no longer exists as cached; `current` is what the API server holds (None: nothing)."""

    def __init__(self, current: dict[str, Any] | None) -> None:
        super().__init__("stale service")
        self.current = current


def uid(obj: dict[str, Any]) -> str:
    return str(obj["metadata"].get("uid", ""))


class Guards:
    """Holds and rolled-back uids per service (see the module docstring)."""

    def __init__(self, monotonic: Callable[[], float] | None = None) -> None:
        # Looked up at each call, not bound here, so a test's patch of time.monotonic reaches it.
        self._monotonic = monotonic or (lambda: time.monotonic())
        self._holds: dict[ServiceKey, Hold] = {}
        self._rolled_back: dict[ServiceKey, set[str]] = {}

    def forget(self, key: ServiceKey) -> None:
        self._holds.pop(key, None)
        self._rolled_back.pop(key, None)

    def without_rolled_back(self, key: ServiceKey, live: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """`live` without the children a rollback deleted; forgets them once the cache has seen every delete."""
        gone = self._rolled_back.get(key)
        if not gone:
            return live
        if not any(obj["metadata"].get("uid") in gone for obj in live):
            del self._rolled_back[key]
        return [obj for obj in live if obj["metadata"].get("uid") not in gone]

    def hold(self, key: ServiceKey, generation: int, applies: bool) -> Hold | None:
        """The service's hold, if it still binds: an edit (another generation), or a spec with nothing to apply, is a
        new attempt and ends it."""
        hold = self._holds.get(key)
        if hold is not None and (hold.generation != generation or not applies):
            del self._holds[key]
            return None
        return hold

    def held_off(self, hold: Hold | None) -> HeldOff | None:
        """The exception of a pass that must not write because of `hold`, or None when it may."""
        now = self._monotonic()
        return HeldOff(hold.until - now) if hold is not None and now < hold.until else None

    def rolled_back(self, key: ServiceKey, uids: Iterable[str], generation: int, message: str) -> None:
        """A pass created children, was refused and deleted them again: remember them and hold the service."""
        self._rolled_back.setdefault(key, set()).update(uids)
        previous = self._holds.get(key)
        attempts = previous.attempts + 1 if previous is not None and previous.generation == generation else 1
        wait = ROLLBACK_HOLD_SECONDS[min(attempts, len(ROLLBACK_HOLD_SECONDS)) - 1]
        self._holds[key] = Hold(generation, message, self._monotonic() + wait, attempts)

    def applied(self, key: ServiceKey) -> None:
        """A pass applied the whole spec: no hold any more."""
        self._holds.pop(key, None)


def missing_api(service: DisaggSpecService, desired: list[dict[str, Any]], availability: ApiAvailability) -> str | None:
    """Why `desired` cannot be applied because the cluster does not serve one of its optional kinds, or None."""
    needs_lws = any(m["kind"] == apply.LEADER_WORKER_SET.kind for m in desired)
    if not needs_lws or not availability.absent(apply.LEADER_WORKER_SET.api_version, apply.LEADER_WORKER_SET.kind):
        return None
    pools = " and ".join(
        f"spec.{role}.nodesPerInstance is {pool(service.spec, role).nodes_per_instance}"
        for role in c.POOLS
        if pool(service.spec, role).nodes_per_instance > 1
    )
    return (
        f"{pools}: a multi-node pool is a LeaderWorkerSet ({apply.LEADER_WORKER_SET.api_version}), which this "
        f"cluster does not serve; install the LeaderWorkerSet controller {c.LWS_MIN_VERSION} or newer "
        "(the chart README, 'Prerequisite for multi-node pools') or set nodesPerInstance to 1. Nothing of this spec "
        "is applied."
    )


def optional_kind_path(message: str) -> apply.Kind | None:
    """The optional kind whose REST path a request error names, if any."""
    return next((k for k in apply.OWNED_KINDS if k.optional and f"/apis/{k.api_version}/" in message), None)


def creates(desired: list[dict[str, Any]], live: list[dict[str, Any]]) -> bool:
    """Whether applying `desired` over `live` would create an object."""
    known = {apply.ref(obj) for obj in live}
    return any(apply.ref(manifest) not in known for manifest in desired)


def check_owner(
    body: dict[str, Any], read: Callable[[], dict[str, Any] | None], *, confirmed: bool, creating: bool
) -> None:
    """Raise `Stale` when a pass about to create a child finds its owner gone or replaced (`read` GETs it); a body
    just read from the API server (`confirmed`) needs no second read."""
    if confirmed or not creating:
        return
    current = read()
    if current is None or uid(current) != uid(body):
        raise Stale(current)
