"""Plans a coordinated prefill/decode rollout across revisions; pure: no clock (the caller passes `now` and the
rollout's time budget, `revision.RolloutTiming`), no I/O, nothing of the renderer.

A revision is the set of children of one spec fingerprint: a prefill, a decode and a router Deployment named
`<service>-<role>-<8 hex of the fingerprint>`, each carrying the spec it was rendered from. The router of a revision
pairs only that revision's pods (its selectors include the fingerprint), and all routers sit behind the one router
Service, so traffic is shared by the serving revisions in proportion to their ready router pods; a revision joins as
soon as its router is ready, which sglang-router (and the readiness helper with smg) allows only once the revision
has a ready prefill and a ready decode. So a request can never be paired across revisions, and the new revision
takes traffic exactly when it can serve it.

Traffic follows capacity (issue 32): during a rollout the router pods, not spec.router.replicas per revision, are
what the planner shares out. M = max(spec.router.replicas, the larger pool's replicas) router slots go to the serving
revisions in proportion to their capacity after this pass (the smaller of their pools' staying ready pods over the
pools' replicas), by the largest remainder, each at least one pod (`size_routers`, `apportion`): no revision's
share of the router pods exceeds its share of the capacity by more than 1/M, so the new revision's first pair no
longer takes half the requests while it holds 1/N of the capacity. It works on plain Kubernetes with the routers of
any release because it needs nothing but the Service: kube-proxy (and the simulation's `ServiceTarget`,
e2e/serving/servicetraffic.py) spreads new connections evenly over the ready endpoints. The alternatives: a weighted
front proxy needs no mesh but is one more hop and one more component to run and make highly available; Gateway API
weights (HTTPRoute backendRefs) need a Gateway the cluster may not have; gating the new router's readiness can only
switch a revision's whole share on or off. The limits: connections are spread, not requests, so a client that keeps
connections open stays with the router pod it reached (a router pod removed closes its connections, and those
clients reconnect by the new split; router pods added receive only new connections), the split moves in steps of
1/M, and a rollout runs up to M + (number of revisions) router pods (the router's CPU, no GPU). Traffic moves before
capacity: a pass removes router pods at once but can only start others, so a pass that would take ready pods from an
older revision while the current one lacks ready router pods of those the split gives it only starts them (and
lowers the older routers); the pass that finds them ready takes the pods (`_traffic_behind`, `Plan.shifting`).
Otherwise the older revision would lose its capacity at once and its requests only seconds later. Each step then
waits for a router pod's start as well. Outside a rollout (one revision) the router has spec.router.replicas.

`plan` decides, on every pass, how many pods each revision gets:
- the current revision (the spec's fingerprint) grows towards the pools' replicas, bounded by
  `spec.rollout.maxSurge` (pods of a pool beyond its replicas, counting the old revisions' pods) and by
  `spec.rollout.maxSkew` (neither of its pools ahead of the other by more than that fraction of ready pods);
- the older revisions shrink only as far as the ready pods of serving revisions stay at or above
  `replicas - maxUnavailable` per pool (a serving revision the budget can take whole first, then the others down to
  their pair, oldest first); pods of an old revision that are not ready, or of one that does not serve, go at once,
  since they carry no traffic;
- the serving revisions' routers are sized by capacity (above), and an old revision loses ready pods only once the
  current revision's router pods of that split are ready; an old revision whose pools are to reach zero loses its
  router first, and its pools only once its router pods are gone, so nothing routes to a pool pod that is being
  removed (the pool pods' own preStop pause and drain cover the requests in flight);
- a current revision that waits `progressDeadlineSeconds` for pods it asked for without another becoming ready
  holds: it grows no further, the old revisions keep serving, and the plan says why (Progressing=False,
  RolloutHeld). Only waiting counts: a pass that finds nothing pending starts the count again;
- a current revision with nothing pending that the budgets allow no further step (no pod of it can start within
  maxSurge, no older pod can go within maxUnavailable and the pairs, every Deployment as asked: every later pass
  would plan the same) holds at once, and the plan says which budgets block it.
A revision whose stored spec cannot be read (made by an older operator, or edited by hand) is left as it is (its
router too: it takes no part in the split), and removed whole once the current revision has every replica ready.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import pydantic

from disaggspec import constants as c
from disaggspec.api import DisaggSpecService
from disaggspec.api.v1alpha1 import RevisionPoolStatus, RevisionStatus, RevisionTraffic
from disaggspec.revision import REVISION_SPEC_ANNOTATION, Revision, RolloutTiming, revision_name

LEGACY_PREFIX: Final = "legacy-"
"""Key prefix of the revisions `observe` finds without a stored spec (made by an operator before revisions)."""


@dataclass(frozen=True)
class Count:
    """One Deployment of a revision as live."""

    replicas: int = 0
    """spec.replicas: the pods the operator last asked for."""
    pods: int = 0
    """status.replicas: pods that exist and are not being deleted."""
    ready: int = 0
    """status.readyReplicas."""
    terminating: int | None = None
    """status.terminatingReplicas: pods being deleted (None where the API server does not report it, before
    Kubernetes 1.35 or with the DeploymentReplicaSetTerminatingReplicas gate off)."""

    @property
    def staying(self) -> int:
        """Ready pods that stay: at most spec.replicas. Right after a scale-down the Deployment's status still
        counts the pods being removed; counting them would remove as many again."""
        return min(self.replicas, self.ready)

    @property
    def held(self) -> int:
        """Pods that occupy (or are about to occupy) a slot: the larger of asked and existing."""
        return max(self.replicas, self.pods)


@dataclass(frozen=True)
class LiveRevision:
    """The live children of one fingerprint."""

    fingerprint: str
    counts: Mapping[str, Count]
    """Per role (prefill, decode, router); a missing Deployment counts zero."""
    spec: str | None
    """The stored spec (`revision.REVISION_SPEC_ANNOTATION`), None when no Deployment carries one."""
    created: str | None
    """The earliest creationTimestamp of its Deployments."""
    deployments: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """The live Deployments by role."""

    def count(self, role: str) -> Count:
        return self.counts.get(role, Count())

    @property
    def serving(self) -> bool:
        """Its router is ready, so the router Service sends it requests (a router is ready only with a pair).

        Ready router pods count only up to spec.replicas (`Count.staying`), as the pools' do: a router just scaled to
        zero (retiring, or scaled back up on a rollback with new pods not ready yet) may still report its old pods
        ready, but they are leaving the Service, and counting them would let the other revisions shrink below
        replicas - maxUnavailable."""
        return self.count(c.ROLE_ROUTER).staying > 0


def observe(service_name: str, live: Iterable[Mapping[str, Any]]) -> dict[str, LiveRevision]:
    """The revisions among `live` children of service `service_name`, by fingerprint."""
    grouped: dict[str, dict[str, Mapping[str, Any]]] = {}
    for obj in live:
        labels = obj.get("metadata", {}).get("labels") or {}
        fingerprint = labels.get(c.LABEL_FINGERPRINT)
        role = labels.get(c.LABEL_ROLE)
        if obj.get("kind") not in WORKLOAD_KINDS or labels.get(c.LABEL_SERVICE) != service_name or not fingerprint:
            continue
        if role not in c.ROLES:
            continue
        annotations = obj.get("metadata", {}).get("annotations") or {}
        # Deployments of an operator before revisions carry no stored spec (and select every pod of their role):
        # never the current revision's, even under the same fingerprint.
        key = str(fingerprint) if REVISION_SPEC_ANNOTATION in annotations else LEGACY_PREFIX + str(fingerprint)
        grouped.setdefault(key, {})[str(role)] = as_deployment_status(obj)
    revisions: dict[str, LiveRevision] = {}
    for fingerprint, deployments in grouped.items():
        counts = {role: _count(obj) for role, obj in deployments.items()}
        stored = [
            (obj.get("metadata", {}).get("annotations") or {}).get(REVISION_SPEC_ANNOTATION)
            for obj in deployments.values()
        ]
        created = sorted(
            str(obj["metadata"]["creationTimestamp"])
            for obj in deployments.values()
            if obj.get("metadata", {}).get("creationTimestamp")
        )
        revisions[fingerprint] = LiveRevision(
            fingerprint,
            counts,
            next((s for s in stored if s), None),
            created[0] if created else None,
            deployments,
        )
    return revisions


WORKLOAD_KINDS: Final = frozenset({"Deployment", c.LWS_KIND})
"""The kinds a pool runs as: a Deployment of single-node servers, a LeaderWorkerSet of multi-node groups."""


def as_deployment_status(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """A live pool workload with the status fields a Deployment reports, so counting and status read one shape.

    A LeaderWorkerSet counts groups (one server each): status.replicas and readyReplicas are groups, a group is
    ready only when its leader and every worker are. It reports no availableReplicas (nor minReadySeconds): a ready
    group is available. It reports no terminatingReplicas either (LeaderWorkerSet v0.9.0's status has conditions,
    observedGeneration, replicas, readyReplicas, updatedReplicas and hpaPodSelector), and none is needed: retiring a
    revision waits for its router, always a Deployment (`router_pods_needed`), never for a pool's terminating count.
    """
    if obj.get("kind") != c.LWS_KIND:
        return obj
    status = dict(obj.get("status") or {})
    status.setdefault("availableReplicas", status.get("readyReplicas", 0))
    return {**obj, "status": status}


def _count(obj: Mapping[str, Any]) -> Count:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    terminating = status.get("terminatingReplicas")
    return Count(
        int(spec.get("replicas", 1)),
        int(status.get("replicas", 0)),
        int(status.get("readyReplicas", 0)),
        None if terminating is None else int(terminating),
    )


def router_pods_needed(revisions: Mapping[str, LiveRevision]) -> list[str]:
    """Fingerprints of the revisions whose router Deployment was scaled to zero and reports no pod, on an API server
    that does not count terminating pods (no status.terminatingReplicas: before Kubernetes 1.35, or the
    DeploymentReplicaSetTerminatingReplicas gate off): only a LIST of its pods tells whether one is still stopping
    (a pod being deleted is listed until the kubelet has stopped its containers and the API server removes it)."""
    return [
        fingerprint
        for fingerprint, revision in revisions.items()
        if not fingerprint.startswith(LEGACY_PREFIX)
        and c.ROLE_ROUTER in revision.counts
        and (router := revision.counts[c.ROLE_ROUTER]).terminating is None
        and router.replicas == 0
        and router.pods == 0
    ]


def with_router_pods(
    revisions: Mapping[str, LiveRevision], fingerprints: Iterable[str], pods: Iterable[Mapping[str, Any]]
) -> dict[str, LiveRevision]:
    """`revisions` with the router of each of `fingerprints` counting as terminating the router pods of that
    revision among `pods` (a LIST of the service's router pods): every listed pod is one that is not gone yet,
    whether its deletion shows already or the Deployment's status is ahead of its ReplicaSet."""
    listed: dict[str, int] = {}
    for pod in pods:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if labels.get(c.LABEL_ROLE) == c.ROLE_ROUTER and labels.get(c.LABEL_FINGERPRINT):
            listed[str(labels[c.LABEL_FINGERPRINT])] = listed.get(str(labels[c.LABEL_FINGERPRINT]), 0) + 1
    counted = dict(revisions)
    for fingerprint in fingerprints:
        revision = counted[fingerprint]
        router = dataclasses.replace(revision.counts[c.ROLE_ROUTER], terminating=listed.get(fingerprint, 0))
        counted[fingerprint] = dataclasses.replace(revision, counts={**revision.counts, c.ROLE_ROUTER: router})
    return counted


@dataclass(frozen=True)
class Plan:
    """What one pass renders, and what the status reports."""

    revisions: tuple[Revision, ...]
    """Revisions to keep, the current one first; every other live revision is removed."""
    status: tuple[RevisionStatus, ...]
    held: str | None = None
    """Why the rollout holds (Progressing=False, RolloutHeld), or None."""
    draining: tuple[str, ...] = ()
    """Revision names of the older revisions still present (the rollout is not finished while any is)."""
    wake_after: float | None = None
    """Seconds after which the pass must run again although nothing changes (the progress deadline)."""
    blocked: bool = False
    """The hold is the budgets': nothing is pending and spec.rollout allows no further step (`held` says which)."""
    shifting: bool = False
    """Traffic moves first: the older revisions keep the ready pods this pass would take from them until the current
    revision's router pods it starts are ready (`_traffic_behind`)."""

    @property
    def current(self) -> Revision:
        return self.revisions[0]

    def kept(self, live: Mapping[str, LiveRevision]) -> list[dict[str, Any]]:
        """Live Deployments of revisions kept as they are (no readable spec): never pruned, never rewritten."""
        return [
            obj
            for revision in self.revisions
            if revision.service is None and revision.fingerprint in live
            for obj in live[revision.fingerprint].deployments.values()
            if isinstance(obj, dict)
        ]


def parse_time(value: str) -> datetime.datetime:
    return datetime.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)


def format_time(value: datetime.datetime) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


def stored_service(service: DisaggSpecService, stored: str | None) -> DisaggSpecService | None:
    """The service as it was when a revision was rendered (its stored spec), or None when that cannot be read."""
    if not stored:
        return None
    try:
        spec = json.loads(stored)
        return DisaggSpecService.model_validate(
            {"metadata": service.metadata.model_dump(by_alias=True, exclude_none=True), "spec": spec}
        )
    except (ValueError, pydantic.ValidationError):
        return None


def desired_replicas(service: DisaggSpecService) -> dict[str, int]:
    """The spec's replicas per role."""
    spec = service.spec
    return {
        c.ROLE_PREFILL: spec.prefill.replicas,
        c.ROLE_DECODE: spec.decode.replicas,
        c.ROLE_ROUTER: spec.router.replicas,
    }


def _surge_caps(service: DisaggSpecService, olds: Sequence[LiveRevision]) -> dict[str, int]:
    """Per pool, the pods the current revision may have beside the older revisions' (ready or not: they hold GPUs)."""
    desired = desired_replicas(service)
    return {
        role: desired[role] + service.spec.rollout.max_surge - sum(old.count(role).held for old in olds)
        for role in c.POOLS
    }


def _grow(service: DisaggSpecService, current: LiveRevision | None, olds: Sequence[LiveRevision]) -> dict[str, int]:
    """The current revision's pool replicas this pass: towards the desired, within maxSurge and maxSkew."""
    rollout = service.spec.rollout
    desired = desired_replicas(service)
    ready: dict[str, int] = {role: current.count(role).ready if current else 0 for role in c.POOLS}
    asked = {role: current.count(role).replicas if current else 0 for role in c.POOLS}
    progress: dict[str, float] = {role: (ready[role] / desired[role]) if desired[role] else 1.0 for role in c.POOLS}
    surge_cap = _surge_caps(service, olds)
    grown: dict[str, int] = {}
    for role in c.POOLS:
        other = c.ROLE_DECODE if role == c.ROLE_PREFILL else c.ROLE_PREFILL
        # A small epsilon keeps an exact product (0.5 x 4 = 2) from rounding up to 3.
        skew_cap = max(1, math.ceil(desired[role] * (progress[other] + rollout.max_skew) - 1e-9))
        if ready[role] * desired[other] <= ready[other] * desired[role]:
            # A pool not ahead of the other (by ready fraction) may always ask for one pod beyond its ready ones:
            # with maxSkew 0 two level pools would otherwise each be capped at what the other has, and neither grow.
            skew_cap = max(skew_cap, ready[role] + 1)
        if ready[other] < desired[other] and ready[other] >= surge_cap[other]:
            # The other pool has every pod maxSurge leaves it, all ready: it grows only once the older revisions
            # shrink, which they do only as this pool's ready pods replace theirs. Holding this pool to the other's
            # fraction would stop both for good (the pods an older revision keeps for its pair, say, fill the other
            # pool's surge).
            skew_cap = desired[role]
        target = min(desired[role], surge_cap[role], skew_cap)
        grown[role] = max(0, min(desired[role], max(target, asked[role])))
    return grown


def _shrink(
    service: DisaggSpecService,
    current: LiveRevision | None,
    olds: Sequence[LiveRevision],
    scalable: Sequence[LiveRevision],
) -> dict[str, dict[str, int]]:
    """The pool replicas this pass of each old revision of `scalable` (those with a readable spec; the others stay as
    they are): down as far as the serving capacity allows.

    The budget per pool is the ready pods of serving revisions (`olds`, all of them) above replicas - maxUnavailable.
    An old revision that does not serve keeps nothing (it carries no traffic). A serving one the budget can take
    whole (every ready pod of both pools) goes, oldest first: only that frees the pods it keeps for its pair. The
    others keep a pair, and lose ready pods beyond it as the budget left allows, oldest first (the revision furthest
    from the current spec first); their unready pods go at once. A pod that stays (kept for a pair, or of a revision
    without a readable spec) costs no budget."""
    rollout = service.spec.rollout
    desired = desired_replicas(service)
    serving = [old for old in olds if old.serving]
    new_ready = {
        role: current.count(role).staying if current is not None and current.serving else 0 for role in c.POOLS
    }
    budget = {
        role: max(
            0,
            new_ready[role]
            + sum(old.count(role).staying for old in serving)
            - (desired[role] - rollout.max_unavailable),
        )
        for role in c.POOLS
    }
    targets: dict[str, dict[str, int]] = {old.fingerprint: {role: 0 for role in c.POOLS} for old in scalable}
    thinned: list[LiveRevision] = []
    for old in (old for old in serving if old.fingerprint in targets):
        if all(old.count(role).staying <= budget[role] for role in c.POOLS):
            for role in c.POOLS:
                budget[role] -= old.count(role).staying
        else:
            thinned.append(old)
    for old in thinned:
        for role in c.POOLS:
            count = old.count(role)
            # A serving revision keeps a whole pair until both pools go: its router stays in the Service until its
            # readiness probe fails, and would meanwhile fail every request for want of the missing role. Its ready
            # router shows a ready pod of each pool, whatever the pool's own status says (it may lag the router's),
            # so one pod of each pool it has stays.
            pair = min(1, count.replicas)
            removed = min(budget[role], max(0, count.staying - pair))
            budget[role] -= removed
            targets[old.fingerprint][role] = max(pair, count.staying - removed)
    return targets


def apportion(capacities: Mapping[str, float], slots: int) -> dict[str, int]:
    """`slots` router pods shared out by `capacities` (revision -> capacity; ties go in this order) by the largest
    remainder, every revision at least one: a serving revision without a router pod would stop serving.

    Each revision gets `floor(quota)` or `floor(quota) + 1` pods of its quota `slots x capacity / total`, never more,
    and the one-pod minimum is added on top (the total may then exceed `slots`): so no revision's share of the pods
    is above its share of the capacity by more than 1/slots. Without any capacity every revision gets one pod."""
    total = sum(max(0.0, capacity) for capacity in capacities.values())
    if total <= 0:
        return {key: 1 for key in capacities}
    quotas = {key: slots * max(0.0, capacity) / total for key, capacity in capacities.items()}
    # The epsilon keeps a whole quota (3 x 1/3 x 3) from flooring one below.
    seats = {key: max(1, math.floor(quota + 1e-9)) for key, quota in quotas.items()}
    left = slots - sum(seats.values())
    # Only a revision below its quota takes a remaining pod (one raised to the minimum is above it already); `left`
    # is below their count, so none takes two.
    below = sorted((key for key in quotas if seats[key] < quotas[key] - 1e-9), key=lambda k: seats[k] - quotas[k])
    for key in below[: max(0, left)]:
        seats[key] += 1
    return seats


def capacity(ready: Mapping[str, int], desired: Mapping[str, int]) -> float:
    """The share of the service's nominal capacity that `ready` pods per pool serve: the smaller pool's fraction of
    its replicas (a prefill without its decodes serves no more than they do). A pool of 0 replicas limits nothing."""
    return min(min(1.0, ready.get(role, 0) / desired[role]) if desired[role] else 1.0 for role in c.POOLS)


@dataclass(frozen=True)
class RouterSizing:
    """The router replicas of the revisions that stay and serve during a rollout, and the split they give."""

    replicas: Mapping[str, int]
    """Router replicas per fingerprint: the current revision's, and each serving older revision's that keeps pools."""
    capacity_share: Mapping[str, float]
    """The capacity share each of those was sized by."""


def _serving_pods(revision: LiveRevision) -> dict[str, int]:
    """The ready pods per pool that stay (`Count.staying`), at least one of each pool it has while it serves: its
    ready router shows a ready pod of each pool, whatever the pool's own status says (it may lag the router's)."""
    return {
        role: max(revision.count(role).staying, min(1, revision.count(role).replicas) if revision.serving else 0)
        for role in c.POOLS
    }


def router_slots(service: DisaggSpecService) -> int:
    """The router pods a rollout shares out by capacity: spec.router.replicas, or the larger pool's replicas if more
    (one router pod per pod of the larger pool lets the split follow the rollout's steps of one pod)."""
    desired = desired_replicas(service)
    return max(desired[c.ROLE_ROUTER], *(desired[role] for role in c.POOLS))


def size_routers(
    service: DisaggSpecService,
    fingerprint: str,
    current: LiveRevision | None,
    olds: Sequence[LiveRevision],
    shrunk: Mapping[str, Mapping[str, int]],
) -> RouterSizing:
    """The router replicas of a rollout's pass (more than one revision): the serving revisions share
    `router_slots(service)` by their capacity after this pass (`apportion`).

    Capacity counts the ready pods that stay (`Count.staying`): for an older revision, those of its pools' replicas
    this pass (`shrunk`, `_shrink`'s), so traffic leaves it in the pass its pods do; for the current one, its ready
    pods (the pods it asks for serve nothing yet). An older revision whose pools go (retiring) or that cannot be
    scaled (no readable spec, not in `shrunk`) takes no part: the one loses its router first anyway, the other keeps
    its Deployments as they are. A current revision that does not serve yet gets the pods it would get if it did,
    while the others share the slots as if it did not: its router becomes ready on its own once it has a pair, and
    then takes no more than its capacity's share (at least one pod, so that it can become ready at all). Once only
    the current revision serves (every older one retiring), it has spec.router.replicas. With spec.router.replicas 0
    (the router scaled away) nothing is shared out: the current revision has none, the older ones their own spec's."""
    desired = desired_replicas(service)
    slots = router_slots(service)
    own = capacity(_serving_pods(current), desired) if current is not None else 0.0
    capacities: dict[str, float] = {fingerprint: own} if current is not None and current.serving else {}
    for old in olds:
        pools = shrunk.get(old.fingerprint)
        if pools is None or not old.serving or all(pools[role] == 0 for role in c.POOLS):
            continue
        staying = _serving_pods(old)
        capacities[old.fingerprint] = capacity({role: min(pools[role], staying[role]) for role in c.POOLS}, desired)
    replicas = apportion(capacities, slots)
    total = sum(capacities.values())
    shares = {fp: (cap / total if total > 0 else 1.0 / len(capacities)) for fp, cap in capacities.items()}
    if fingerprint not in capacities:
        joined = {fingerprint: own, **capacities}
        replicas[fingerprint] = apportion(joined, slots)[fingerprint]
        shares[fingerprint] = own / sum(joined.values()) if sum(joined.values()) > 0 else 0.0
    elif len(capacities) == 1:
        replicas[fingerprint] = desired[c.ROLE_ROUTER]
    if desired[c.ROLE_ROUTER] == 0:
        # Routers sized by capacity would bring back a router the user scaled to zero (and drop it again once the
        # current revision serves alone).
        replicas = {fingerprint: 0}
    return RouterSizing(replicas, shares)


def _thinned(old: LiveRevision, pools: Mapping[str, int] | None) -> bool:
    """`pools` (its pools this pass) take ready pods from an older revision that keeps pools."""
    return (
        pools is not None
        and any(pools[role] for role in c.POOLS)
        and any(pools[role] < old.count(role).staying for role in c.POOLS)
    )


def _traffic_behind(
    current: LiveRevision | None,
    olds: Sequence[LiveRevision],
    shrunk: Mapping[str, Mapping[str, int]],
    sizing: RouterSizing,
) -> bool:
    """This pass would take ready pods from an older revision that keeps serving while the serving current revision
    still lacks ready router pods of those `sizing` gives it: the older revision would lose its capacity at once, and
    its requests only as the added router pods become ready (seconds), being sent meanwhile more than it can serve.
    The current revision's router pods are what a rollout waits for (`_pending`: a router pod that never becomes
    ready holds the rollout by the progress deadline); an older revision's router rarely grows (when another older
    one retires) and is not waited for."""
    if current is None or not current.serving:
        return False
    if current.count(c.ROLE_ROUTER).ready >= sizing.replicas[current.fingerprint]:
        return False
    return any(_thinned(old, shrunk.get(old.fingerprint)) for old in olds)


def _keep_ready(olds: Sequence[LiveRevision], shrunk: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """`shrunk` with every older revision that keeps pools keeping its ready pods (its unready ones still go); one
    whose pools go keeps going: it loses its router first anyway."""
    kept = {fp: dict(pools) for fp, pools in shrunk.items()}
    for old in olds:
        if _thinned(old, shrunk.get(old.fingerprint)):
            kept[old.fingerprint] = {
                role: max(shrunk[old.fingerprint][role], old.count(role).staying) for role in c.POOLS
            }
    return kept


def router_split(statuses: Sequence[RevisionStatus]) -> dict[str, int]:
    """Per revision (by name) of status.revisions, the router pods that take requests once this pass is applied:
    of a serving revision, its ready router pods up to the replicas the pass asks (the others are being removed,
    and leave the Service's endpoints); 0 for one that does not serve. The router Service spreads new connections
    evenly over them: each revision's count over the total is its traffic share (`RevisionStatus.traffic_share`,
    the TrafficShifted Event)."""
    return {
        entry.name: min(entry.router.replicas, entry.router.ready_replicas) if entry.serving else 0
        for entry in statuses
    }


def _with_traffic(statuses: Sequence[RevisionStatus]) -> list[RevisionStatus]:
    """`statuses` with each revision's traffic share (`router_split`); a pass that removes the last older revision
    leaves one, which reports no split (as outside a rollout)."""
    if len(statuses) == 1:
        return [statuses[0].model_copy(update={"traffic_share": None, "capacity_share": None})]
    split = router_split(statuses)
    total = sum(split.values())
    return [
        entry.model_copy(update={"traffic_share": _share(split[entry.name] / total if total else 0.0)})
        for entry in statuses
    ]


def _router_gone(router: Count, retiring_since: str, now: str, gone_after: float) -> bool:
    """No router pod of the retiring revision exists any more, terminating ones included: status.terminatingReplicas
    (Kubernetes 1.35+) or, before, the count of its listed pods (`with_router_pods`); only where neither could be
    read (the pod LIST failed), `gone_after` seconds after the router was scaled to zero."""
    if router.replicas > 0 or router.pods > 0:
        return False
    if router.terminating is not None:
        return router.terminating == 0
    return (parse_time(now) - parse_time(retiring_since)).total_seconds() >= gone_after


def _pending(current: LiveRevision | None) -> bool:
    """The current revision waits for pods it asked for: a pool pod not ready yet, or a router pod not ready although
    the revision has a ready prefill and a ready decode (without them the router waits for the pools, not for
    itself)."""
    if current is None:
        return False
    if any(current.count(role).ready < current.count(role).replicas for role in c.POOLS):
        return True
    router = current.count(c.ROLE_ROUTER)
    return all(current.count(role).ready > 0 for role in c.POOLS) and router.ready < router.replicas


def _last_progress(
    fingerprint: str, current: LiveRevision | None, previous: Mapping[str, RevisionStatus], now: str
) -> str:
    """When the current revision last gained a ready pod (or was created), or now when it waits for none: the
    progress deadline measures how long the rollout waits for pods it asked for. A pass that finds every asked pod
    ready has nothing to wait for, however long since the last one (a late pass, the operator down): counting that
    time would hold a revision that has nothing pending, and a hold is released only by a pod becoming ready."""
    if current is None or not _pending(current):
        return now
    before = previous.get(fingerprint)
    if before is None:
        return current.created or now
    for role in c.ROLES:
        if current.count(role).ready > getattr(before, role).ready_replicas:
            return now
    return before.last_progress_time or now


def _revision_status(
    revision: LiveRevision | None,
    fingerprint: str,
    replicas: Mapping[str, int],
    traffic: RevisionTraffic,
    created: str,
    last_progress: str | None,
) -> RevisionStatus:
    def pool_of(role: str) -> RevisionPoolStatus:
        ready = revision.count(role).ready if revision is not None else 0
        return RevisionPoolStatus(replicas=replicas.get(role, 0), ready_replicas=ready)

    legacy = fingerprint.startswith(LEGACY_PREFIX)
    return RevisionStatus(
        fingerprint=fingerprint.removeprefix(LEGACY_PREFIX),
        name="legacy" if legacy else revision_name(fingerprint),
        created=created,
        traffic=traffic,
        serving=revision is not None and revision.serving,
        prefill=pool_of(c.ROLE_PREFILL),
        decode=pool_of(c.ROLE_DECODE),
        router=pool_of(c.ROLE_ROUTER),
        last_progress_time=last_progress,
    )


@dataclass(frozen=True)
class _OldStep:
    """What this pass does with one older revision that stays."""

    revision: Revision
    status: RevisionStatus
    retiring: bool
    """Its router is being removed: the pass must run again when the router should be gone."""


def _old_step(
    old: LiveRevision,
    old_service: DisaggSpecService | None,
    pools: Mapping[str, int],
    before: Mapping[str, RevisionStatus],
    context: tuple[str, RolloutTiming, bool, RouterSizing],
) -> _OldStep | None:
    """The replicas of an older revision this pass (`pools`: its pools' share left by `_shrink`, none without a
    readable spec), or None when it goes; `context` is (now, the rollout's timing, whether the current revision has
    every replica ready, the routers' sizing)."""
    now, timing, complete, sizing = context
    if old_service is None:
        if complete:
            return None  # an unreadable revision goes whole once the current one has full capacity
        kept: dict[str, int] = {role: old.count(role).replicas for role in c.ROLES}
        status = _revision_status(old, old.fingerprint, kept, "Draining", old.created or now, None)
        return _OldStep(Revision(old.fingerprint, None, kept), status, retiring=False)
    retiring: str | None = None
    if all(pools[role] == 0 for role in c.POOLS):
        # The router goes first, the pools once its pods are gone: a router still proxying (or still in the
        # Service's endpoints during its preStop pause) must find its pools there.
        was = before.get(old.fingerprint)
        retiring = (was.retiring_since if was is not None else None) or now
        if _router_gone(old.count(c.ROLE_ROUTER), retiring, now, timing.router_gone_seconds):
            return None
        replicas: dict[str, int] = {role: old.count(role).replicas for role in c.POOLS}
        replicas[c.ROLE_ROUTER] = 0
    else:
        # A serving revision that keeps pools has its share of the router slots (`size_routers`); one that does not
        # serve keeps nothing of its pools (`_shrink`), so this is only a fallback.
        router = sizing.replicas.get(old.fingerprint, desired_replicas(old_service)[c.ROLE_ROUTER])
        replicas = {**pools, c.ROLE_ROUTER: router}
    status = _revision_status(old, old.fingerprint, replicas, "Draining", old.created or now, None)
    status = status.model_copy(
        update={
            "retiring_since": retiring,
            "capacity_share": _share(sizing.capacity_share.get(old.fingerprint)),
        }
    )
    return _OldStep(Revision(old.fingerprint, old_service, replicas), status, retiring=retiring is not None)


def _share(value: float | None) -> float | None:
    """A share as status reports it: to 3 decimals, so a pass that changes nothing writes the same."""
    return None if value is None else round(value, 3)


def _keep_serving(olds: Sequence[LiveRevision]) -> str:
    """'<old> keeps serving', or '<old>, <older> keep serving'."""
    names = ", ".join(revision_name(old.fingerprint) for old in olds)
    return f"{names} {'keeps' if len(olds) == 1 else 'keep'} serving"


def _held(
    fingerprint: str,
    current: LiveRevision | None,
    olds: Sequence[LiveRevision],
    desired: Mapping[str, int],
    waited: float,
    deadline: int,
) -> str:
    """Progressing's message for a rollout that went past its deadline without progress."""
    ready = ", ".join(f"{role} {current.count(role).ready if current else 0}/{desired[role]}" for role in c.ROLES)
    return (
        f"revision {revision_name(fingerprint)} has had no pod become ready for {int(waited)}s "
        f"(spec.rollout.progressDeadlineSeconds {deadline}): ready {ready}; "
        f"{_keep_serving(olds)}. Check its pods (a "
        "model that does not load, or no free GPUs for a surge pod: free some, or allow "
        "spec.rollout.maxUnavailable 1), fix the spec, or apply the previous spec to roll back"
    )


def _stalled(
    current: LiveRevision, planned: Revision, olds: Sequence[LiveRevision], kept: Mapping[str, _OldStep]
) -> bool:
    """This pass asks nothing of the cluster and the cluster owes it nothing: the current revision waits for no pod
    and is asked for what it has, every older revision stays as it is (none retiring, none removed), and every
    Deployment runs the pods it was asked for. The next pass then sees the same and plans the same: the budgets
    allow no further step."""
    if _pending(current) or any(old.fingerprint not in kept or kept[old.fingerprint].retiring for old in olds):
        return False
    revisions = [(current, planned), *((old, kept[old.fingerprint].revision) for old in olds)]
    return all(
        revision.count(role).pods == revision.count(role).replicas == step.replicas.get(role, 0)
        for revision, step in revisions
        for role in c.ROLES
    )


def _blocked(
    service: DisaggSpecService,
    fingerprint: str,
    current: LiveRevision,
    olds: Sequence[LiveRevision],
    scalable: Sequence[LiveRevision],
) -> str:
    """Progressing's message for a rollout the budgets allow no further step (`_stalled`); `scalable`: the older
    revisions with a readable spec (those that count against maxSurge)."""
    rollout = service.spec.rollout
    desired = desired_replicas(service)
    surge_cap = _surge_caps(service, scalable)
    short = [role for role in c.POOLS if current.count(role).replicas < desired[role]]
    starts = "; ".join(
        f"{role}: replicas {desired[role]} + maxSurge {rollout.max_surge}, of which the older revisions hold "
        f"{desired[role] + rollout.max_surge - surge_cap[role]}"
        for role in short
    )
    floors = ", ".join(f"{role} {desired[role]} - {rollout.max_unavailable}" for role in c.POOLS)
    return (
        f"revision {revision_name(fingerprint)} can take no further step within spec.rollout: it can start no "
        f"{' or '.join(short)} pod ({starts}), and no older revision can lose a pod without leaving a serving "
        f"revision without a pair or the ready pods of the serving revisions below replicas - maxUnavailable "
        f"({floors}); {_keep_serving(olds)}. Allow a larger "
        "spec.rollout.maxSurge (a free slot for another pod of that pool) or maxUnavailable (the older revision "
        "may then go before the new one serves), or apply the previous spec to roll back"
    )


def plan(
    service: DisaggSpecService,
    fingerprint: str,
    live: Mapping[str, LiveRevision],
    previous: Sequence[RevisionStatus],
    now: str,
    timing: RolloutTiming,
) -> Plan:
    """The revisions of this pass and their replicas (see the module docstring); `previous` is status.revisions as
    last written, `now` RFC 3339, `timing` the rollout's time budget (`render.rollout_timing`)."""
    desired = desired_replicas(service)
    current = live.get(fingerprint)
    olds = _older(live, fingerprint)
    before = {entry.fingerprint: entry for entry in previous}
    known = before.get(fingerprint)
    created = (current.created if current is not None else None) or (known.created if known else None) or now
    if not olds:
        status = _revision_status(current, fingerprint, desired, "Active", created, None)
        return Plan((Revision(fingerprint, service, desired),), (status,))

    last_progress = _last_progress(fingerprint, current, before, now)
    deadline = timing.progress_deadline_seconds
    waited = (parse_time(now) - parse_time(last_progress)).total_seconds()
    # A revision that cannot be scaled (no readable spec) leaves only at the end: it does not count against surge,
    # else the new revision could never grow to replace it.
    specs = {old.fingerprint: stored_service(service, old.spec) for old in olds}
    scalable = [old for old in olds if specs[old.fingerprint] is not None]
    grown = _grow(service, current, scalable)
    held = _held(fingerprint, current, olds, desired, waited, deadline) if waited >= deadline else None
    if held:
        grown = _no_further(grown, current)
    shrunk, sizing, shifting = _scale_down(service, fingerprint, current, olds, scalable)
    current_replicas = {**grown, c.ROLE_ROUTER: sizing.replicas[fingerprint]}
    complete = current is not None and all(current.count(role).ready >= desired[role] for role in c.ROLES)
    kept = _old_steps(olds, specs, shrunk, before, (now, timing, complete, sizing))
    current_step = Revision(fingerprint, service, current_replicas)
    blocked = False
    if held is None and current is not None and _stalled(current, current_step, olds, kept):
        # Nothing is pending, so the progress deadline would never pass: say at once what blocks the rollout.
        blocked, held = True, _blocked(service, fingerprint, current, olds, scalable)
    traffic: RevisionTraffic = "Failed" if held else "Rolling"
    plans = [current_step, *(step.revision for step in kept.values())]
    current_status = _revision_status(current, fingerprint, current_replicas, traffic, created, last_progress)
    current_status = current_status.model_copy(update={"capacity_share": _share(sizing.capacity_share[fingerprint])})
    statuses = _with_traffic([current_status, *(step.status for step in kept.values())])
    draining = tuple(revision_name(fp) for fp in kept)
    wake_after = _wake_after(held, waited, kept, timing)
    return Plan(tuple(plans), tuple(statuses), held, draining, wake_after, blocked, shifting)


def _older(live: Mapping[str, LiveRevision], fingerprint: str) -> list[LiveRevision]:
    """The live revisions other than the current one, oldest first (the order they give up pods in)."""
    return sorted(
        (rev for fp, rev in live.items() if fp != fingerprint), key=lambda rev: (rev.created or "", rev.fingerprint)
    )


def _no_further(grown: Mapping[str, int], current: LiveRevision | None) -> dict[str, int]:
    """`grown` for a held rollout: no pool of the current revision grows past what it asked for already (or one pod,
    where it asked for none)."""
    asked = {role: current.count(role).replicas if current else 0 for role in c.POOLS}
    return {role: min(grown[role], max(asked[role], 1)) for role in c.POOLS}


def _scale_down(
    service: DisaggSpecService,
    fingerprint: str,
    current: LiveRevision | None,
    olds: Sequence[LiveRevision],
    scalable: Sequence[LiveRevision],
) -> tuple[dict[str, dict[str, int]], RouterSizing, bool]:
    """The older revisions' pools this pass (`_shrink`), the routers' sizing and whether traffic moves first
    (`_traffic_behind`): then this pass sets the routers this scale-down needs, and the next (finding them ready)
    removes the pods. The routers are sized for the whole scale-down either way."""
    shrunk = _shrink(service, current, olds, scalable)
    sizing = size_routers(service, fingerprint, current, olds, shrunk)
    shifting = _traffic_behind(current, olds, shrunk, sizing)
    return (_keep_ready(olds, shrunk) if shifting else shrunk), sizing, shifting


def _old_steps(
    olds: Sequence[LiveRevision],
    specs: Mapping[str, DisaggSpecService | None],
    shrunk: Mapping[str, Mapping[str, int]],
    before: Mapping[str, RevisionStatus],
    context: tuple[str, RolloutTiming, bool, RouterSizing],
) -> dict[str, _OldStep]:
    """By fingerprint, oldest first, the older revisions that stay this pass and what it does with each
    (`_old_step`)."""
    kept: dict[str, _OldStep] = {}
    for old in olds:
        step = _old_step(old, specs[old.fingerprint], shrunk.get(old.fingerprint, {}), before, context)
        if step is not None:
            kept[old.fingerprint] = step
    return kept


def _wake_after(held: str | None, waited: float, kept: Mapping[str, _OldStep], timing: RolloutTiming) -> float | None:
    """When the pass must run again although nothing changes: just past the progress deadline (unless the rollout
    holds already) or, at the latest, when a retiring router should be gone; never once no older revision stays."""
    if not kept:
        return None
    wake_after: float | None = None if held else max(1.0, timing.progress_deadline_seconds - waited + 1)
    if any(step.retiring for step in kept.values()):
        wake_after = min(wake_after or timing.router_gone_seconds, timing.router_gone_seconds)
    return wake_after
