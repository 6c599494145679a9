"""The mutating admission webhook that gives each host-network pool pod sharing a node its own HTTP and bootstrap
ports (`render.ports` says when and which), and its entry in the MutatingWebhookConfiguration `disaggspec.io`.

Writes to the API: that one configuration (server-side apply, next to the validating one, by
`webhook_config.ConfiguringWebhookServer`). Reads: the pods labelled `disaggspec.io/host-ports=allocate` in the
watched namespaces, one LIST per admitted pod (a fresh read, not a cache that may lag the pods just created).

On CREATE of such a pod, `PortAllocator.allocate` picks a slot no live pod of the same service holds and no recent
admission of this process reserved (a pod admitted a moment ago may not be stored yet: the reservation covers it for
`RESERVATION_SECONDS`), and `render.ports.assign` writes it into the pod. Dry-run requests get a slot but reserve
nothing (sideEffects NoneOnDryRun).

Failure policy Fail, scoped by objectSelector to those pods only: a pod admitted without its ports would bind the
fixed ones, so while no replica of the operator answers, the ReplicaSet's creates of these pods fail and are retried
with its back-off until one does (running pods are untouched; no other pod in the cluster goes through this
webhook). Several operator replicas each reserve in their own process: two pods admitted in the same instant by two
replicas may draw the same slot (they choose at random among the free ones, so rarely); their equal hostPorts then
keep them off one node (the scheduler's NodePorts filter), never a failed bind.
"""

from __future__ import annotations

import copy
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Final, cast

import kopf

from disaggspec import apply
from disaggspec import constants as c
from disaggspec.render import ports

log = logging.getLogger("disaggspec.podports")

HANDLER_ID: Final = "host-ports"
"""The id of the `kopf.on.mutate` handler: kopf routes `<root>/host-ports` to it."""
WEBHOOK_NAME: Final = f"host-ports.{c.GROUP}"
CONFIGURATION_NAME: Final = c.GROUP
"""The MutatingWebhookConfiguration's name (the chart creates it empty and owns it)."""
MUTATING_CONFIGURATION: Final = apply.Kind(
    "admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", "mutatingwebhookconfigurations"
)
RESERVATION_SECONDS: Final = 30.0
"""How long a slot handed out stays reserved in this process (long enough for the pod to be stored and listed)."""
POD_PAGE: Final = 500
SELECTOR: Final = f"{ports.LABEL_HOST_PORTS}={ports.ALLOCATE}"

PodLister = Callable[[], list[dict[str, Any]]]


class NoFreeSlot(RuntimeError):
    """Every slot is held by the service's live pods or reserved."""


class PortAllocator:
    """Hands out port slots to pods at admission; thread-safe (kopf runs sync handlers in a thread pool)."""

    def __init__(
        self,
        list_pods: PodLister,
        *,
        reservation_seconds: float = RESERVATION_SECONDS,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._list_pods = list_pods
        self._seconds = reservation_seconds
        self._rng = rng if rng is not None else random.Random()
        self._clock = clock
        self._reserved: dict[tuple[str, str], dict[int, float]] = {}
        self._lock = threading.Lock()

    @classmethod
    def listing(cls, client: apply.Client, namespaces: Iterable[str]) -> PortAllocator:
        """An allocator reading the labelled pods of `namespaces` (empty: every namespace) through `client`."""
        scopes = tuple(namespaces) or (None,)

        def list_pods() -> list[dict[str, Any]]:
            return [pod for namespace in scopes for pod in _pods_in(client, namespace)]

        return cls(list_pods)

    def allocate(self, pod: dict[str, Any], *, reserve: bool = True) -> int:
        """A free slot for `pod` (a pool pod being created); reserved for a while unless `reserve` is False."""
        owner = ports.service_of(pod)
        live = self._list_pods()  # outside the lock: a slow LIST must not hold up the other admissions
        with self._lock:
            now = self._clock()
            own, others = ports.held_slots(live, owner)
            reserved = self._reservations(owner, now)
            slot = ports.choose_slot(own | reserved, others, self._rng)
            if slot is None:
                raise NoFreeSlot(
                    f"no free host port slot for a pool pod of {owner[0]}/{owner[1]}: its live pool pods hold all "
                    f"{ports.SLOTS} slots (HTTP ports {ports.http_port(0)}-{ports.http_port(ports.SLOTS - 1)}); lower "
                    "the pools' replicas or spec.rollout.maxSurge, or give each pool pod a whole node (GPUs per pod "
                    "equal to gpusPerNode), which keeps the fixed ports"
                )
            if reserve:
                self._reserved.setdefault(owner, {})[slot] = now + self._seconds
            return slot

    def _reservations(self, owner: tuple[str, str], now: float) -> set[int]:
        """The owner's unexpired reservations (expired ones are dropped)."""
        held = self._reserved.get(owner, {})
        for slot in [slot for slot, until in held.items() if until <= now]:
            del held[slot]
        if not held:
            self._reserved.pop(owner, None)
        return set(held)


def _pods_in(client: apply.Client, namespace: str | None) -> list[dict[str, Any]]:
    path = f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"

    def get(query: dict[str, str]) -> dict[str, Any]:
        return client.request("GET", path, query=query)

    return [pod for page in apply.list_pages(get, {"labelSelector": SELECTOR}, POD_PAGE) for pod in page["items"] or []]


def mutate(*, body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, dryrun: bool, **kwargs: Any) -> None:
    """Give a labelled pool pod its ports (the allocator is the memo's `ports`)."""
    allocator: PortAllocator | None = memo.get("ports")
    if allocator is None:
        raise kopf.AdmissionError("the operator serves no port allocator: pool pod ports cannot be assigned", code=503)
    pod = copy.deepcopy(dict(body))
    meta = pod.setdefault("metadata", {})
    if not meta.get("namespace") and kwargs.get("namespace"):
        meta["namespace"] = kwargs["namespace"]
    try:
        slot = allocator.allocate(pod, reserve=not dryrun)
    except NoFreeSlot as error:
        raise kopf.AdmissionError(str(error), code=409) from error
    log.info(
        "%s/%s: host ports %d (http), %d (bootstrap)",
        meta.get("namespace"),
        meta.get("name") or meta.get("generateName"),
        ports.http_port(slot),
        ports.bootstrap_port(slot),
    )
    patch.fns.append(lambda target: ports.assign(cast(dict[str, Any], target), slot))


def enable_webhook() -> None:
    """Serve `mutate` for pod creations (the configuration's objectSelector sends only the labelled pods)."""
    kopf.on.mutate("", "v1", "pods", id=HANDLER_ID, operations=["CREATE"], persistent=True)(mutate)


def webhook_entry(client_config: dict[str, Any], timeout_seconds: int) -> dict[str, Any]:
    """The `webhooks[]` entry mutating the creation of labelled pods at `client_config` (already pointing at the
    handler's path)."""
    return {
        "name": WEBHOOK_NAME,
        "rules": [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": ["pods"],
                "operations": ["CREATE"],
                "scope": "Namespaced",
            }
        ],
        "objectSelector": {"matchLabels": {ports.LABEL_HOST_PORTS: ports.ALLOCATE}},
        "clientConfig": client_config,
        # Fail: a pod admitted without its ports would bind the fixed ones (see the module docstring).
        "failurePolicy": "Fail",
        "sideEffects": "NoneOnDryRun",
        "reinvocationPolicy": "Never",
        "matchPolicy": "Equivalent",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": timeout_seconds,
    }


def configuration(client_config: dict[str, Any], timeout_seconds: int) -> dict[str, Any]:
    """The whole MutatingWebhookConfiguration to server-side apply."""
    return {
        "apiVersion": MUTATING_CONFIGURATION.api_version,
        "kind": MUTATING_CONFIGURATION.kind,
        "metadata": {"name": CONFIGURATION_NAME},
        "webhooks": [webhook_entry(client_config, timeout_seconds)],
    }


def apply_configuration(client: apply.Client, manifest: dict[str, Any]) -> dict[str, Any]:
    """Server-side apply `manifest` (field manager `disaggspec-operator`, forced: the operator owns the entry)."""
    path = f"/apis/{MUTATING_CONFIGURATION.api_version}/{MUTATING_CONFIGURATION.plural}/{CONFIGURATION_NAME}"
    query = {"fieldManager": c.FIELD_MANAGER, "force": "true"}
    return client.request("PATCH", path, query, manifest, "application/apply-patch+yaml")
