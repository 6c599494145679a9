"""Whole-sequence property tests of the rollout planner (issue 28), in the style of LeaderWorkerSet's rolling-update
tests that compute every step: for random (seeded, reproducible) replica counts, `spec.rollout` budgets and readiness
sequences, a rollout from a fully ready old revision to a new spec is simulated pass by pass, and every pass is
checked.

The simulation stands in for Kubernetes. Each pass observes the live Deployments (`rollout.observe`), plans
(`_plan_pass`, the one call of the planner), renders the plan (`render`) and applies it: Deployments are created or
scaled, those of revisions the plan drops are deleted (their pods terminate). The Deployment controller then creates
the missing pods and, scaling down, deletes unready pods first, then the newest (as a ReplicaSet does). Between passes
some pods the planner asked for become ready: each pod is ready at the latest `ready_within` passes after it was
created, otherwise at random, and in some passes nothing becomes ready. A router pod is ready only while a ready
prefill and a ready decode match its `--prefill-selector`/`--decode-selector` (sglang-router's PD readiness), read
from the rendered command. Terminating pods linger (a router at least its preStop pause); the API server counts them
(status.terminatingReplicas) or not, per seed; a Deployment's status may lag one pass behind.

Checked after every pass, once its plan is applied and the Deployment controller has acted (`violations`: 1 to 3,
6 and 7):
1. floor: per pool, the ready pods of serving revisions (those with a ready router) stay at or above
   `replicas - maxUnavailable`. This is rollout.py's promise ("the older revisions shrink only as far as the ready
   pods of serving revisions stay at or above replicas - maxUnavailable per pool"), exactly: the old revision
   starts with every replica ready, pods become ready only between passes, and only the planner removes pods.
2. no pairing across revisions: each router's rendered selectors name its own revision and role and match no pod of
   another revision (nor does any Deployment's selector); and every router pod that may still take requests (ready,
   or terminating within its preStop pause after having served) has a ready prefill and a ready decode of its own
   revision: the planner keeps a serving revision's pair until both pools go, and removes a retiring revision's pools
   only once its router pods are gone.
3. surge: per pool, the pods that exist and are not terminating, and the replicas asked of its Deployments, stay at
   or below `replicas + maxSurge` (terminating pods are not counted, as by a Deployment's own maxSurge).
4. termination: within `step_bound(...)` passes (computed from the budgets and the simulation's delays) only the new
   revision is left, at full replicas and all ready, and planning again is a fixed point (same plan, nothing to apply).
   Where the budgets cannot finish the rollout (`cannot_finish`: a one-replica pool with maxSurge 0, whose only slot
   a serving old revision keeps for its pair, while the other pool may not drop to 0 ready), it holds instead for
   want of a step (`Plan.blocked`, RolloutHeld) within the bound, and from then on changes nothing.
5. a pass that holds for want of a step has none left (`steps_left`, from the pods, not from the planner's rules).
6. traffic by capacity (issue 32): where more than one revision serves, each one's share of the router pods of the
   serving revisions (the router Service spreads new connections evenly over them) is at most its share of the
   serving capacity plus 1/M, M the router slots (`rollout.router_slots`, the strictest of the specs'); a revision's
   capacity is the smaller of its pools' ready pods over their replicas. The router pods counted are the ready ones
   and those starting in a serving revision: a pass removes router pods at once but can only start others, and a
   starting router pod of a revision that serves becomes ready once it has started and found its pair (seconds),
   with no further pass: the split the pass sets is what the routers reach. Not checked on a pass that moves
   traffic ahead of a scale-down (`Plan.shifting`): it gives the current revision the share of the capacity the
   scale-down will leave it while the older revision still has its pods; such a pass must remove no ready pool pod
   of a serving revision (checked, from the pods).
7. traffic first: a serving revision that lost ready pool pods in the pass has, counting only *ready* router pods,
   at most its capacity share plus 1/M: its capacity went at once, so its requests must have gone before.
Properties 6 and 7 are not checked on a pass whose planner read a Deployment status behind its pods (`Cluster.stale`:
it splits by what the API server reports; the next pass, reading the status caught up, is checked): over the 200
drawn sequences that leaves 158 of 1388 passes with two serving revisions unchecked.
And a rollout whose pods never become ready holds (RolloutHeld: `Plan.held`, traffic Failed) once the progress
deadline has passed, keeps the old revision at the floor, and stops changing anything.

The drawn sequences pass every few seconds (passes follow watch events) with maxSkew > 0. The planner bugs the
sequences found outside the drawn families (a lagging status with a spec change, maxSkew 0, a pass that comes a
whole deadline late) run, fixed, at the smallest seed of their family (`REGRESSIONS`); those in the drawn seeds run
with them. The checker itself is tested on hand-made violating states, and the simulation on planners broken on
purpose (`BROKEN`): every property can fail.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final
from unittest import mock

import pytest

from disaggspec import constants as c
from disaggspec import rollout
from disaggspec.api import DisaggSpecService, parse_service
from disaggspec.api.v1alpha1 import RevisionStatus
from disaggspec.config import OperatorConfig
from disaggspec.render import Revision, fingerprint, lifecycle, render, rollout_timing
from disaggspec.revision import RolloutTiming
from tests.unit.dss_cases import edited

SERVICE: Final = "base"
POOLS: Final = (c.ROLE_PREFILL, c.ROLE_DECODE)
ROLES: Final = (c.ROLE_PREFILL, c.ROLE_DECODE, c.ROLE_ROUTER)
IMAGES: Final = {
    "old": "example.invalid/sglang:old",
    "new": "example.invalid/sglang:new",
    "third": "example.invalid/sglang:third",
}
T0: Final = datetime.datetime(2026, 12, 4, 12, 0, 0, tzinfo=datetime.UTC)
ROUTER_PRESTOP: Final = lifecycle.ROUTER_PRESTOP_SECONDS
"""A terminating router pod stays in the router Service's endpoints (as kube-proxy sees them) this long."""
SEEDS: Final = range(200)
WORKLOADS: Final = ("Deployment",)


# ---- the one call of the planner ----------------------------------------------------------------------------------


def _plan_pass(
    service: DisaggSpecService,
    fp: str,
    live: Mapping[str, rollout.LiveRevision],
    previous: Sequence[RevisionStatus],
    now: str,
) -> rollout.Plan:
    """One pass of the planner for the spec `service` of fingerprint `fp` (the only place that follows
    `rollout.plan`'s signature): `previous` is status.revisions as last written and read back, `now` RFC 3339."""
    return rollout.plan(service, fp, live, previous, now, _timing(service))


def _timing(service: DisaggSpecService) -> RolloutTiming:
    """The rollout's time budget the planner is given."""
    return rollout_timing(service)


Planner = Callable[
    [DisaggSpecService, str, Mapping[str, rollout.LiveRevision], Sequence[RevisionStatus], str], rollout.Plan
]


def _written(statuses: Iterable[RevisionStatus]) -> tuple[RevisionStatus, ...]:
    """status.revisions as the API server stores it and the next pass reads it back."""
    return tuple(
        RevisionStatus.model_validate(s.model_dump(mode="json", by_alias=True, exclude_none=True)) for s in statuses
    )


# ---- scenarios ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    """Everything one seed draws: the spec, its budgets, and how the simulated cluster behaves."""

    seed: int
    replicas: Mapping[str, int]
    """The new spec's replicas per role (the old spec has the same pools)."""
    old_router: int
    max_surge: int
    max_unavailable: int
    max_skew: float
    deadline: int
    """spec.rollout.progressDeadlineSeconds."""
    seconds: int
    """Between two passes."""
    ready_within: int
    """A pod is ready at the latest this many passes after it was created (readiness is eventually granted)."""
    freeze_at: int | None
    """From this pass on, no pod becomes ready for `freeze_passes`: longer than the progress deadline, so the rollout
    holds until pods become ready again."""
    stall: float
    """Chance that in a pass no pod becomes ready but those whose time is up."""
    grant: float
    """Otherwise, each pending pod's chance to become ready in a pass."""
    linger: int
    """Seconds a terminating pod may linger (a router's beyond its preStop pause)."""
    counts_terminating: bool
    """The API server reports status.terminatingReplicas (Kubernetes 1.35+)."""
    status_lag: float
    """Chance that a Deployment's status is one pass behind."""
    change: str | None = None
    """The spec changes again mid-rollout: to a third revision ("third") or back to the old one ("rollback")."""
    change_at: int = 0
    outage_after: int | None = None
    """The operator is down once, for progressDeadlineSeconds, after this pass (not drawn: the xfail tests)."""

    @classmethod
    def draw(cls, seed: int) -> Scenario:
        rng = random.Random(seed)
        router = rng.randint(1, 3)
        surge, unavailable = rng.choice((0, 1, 1, 2, 3)), rng.choice((0, 0, 1, 2))
        if surge + unavailable == 0:  # the rollout-budget rule rejects 0 and 0
            surge = 1
        return cls(
            seed=seed,
            replicas={c.ROLE_PREFILL: rng.randint(1, 6), c.ROLE_DECODE: rng.randint(1, 6), c.ROLE_ROUTER: router},
            old_router=rng.choice((router, rng.randint(1, 3))),
            max_surge=surge,
            max_unavailable=unavailable,
            max_skew=rng.choice((0.1, 0.25, 0.34, 0.5, 1.0)),
            deadline=rng.choice((30, 60, 600)),
            seconds=rng.choice((1, 2, 5)),
            ready_within=rng.randint(0, 4),
            freeze_at=rng.choice((None, None, rng.randint(0, 12))),
            stall=rng.choice((0.0, 0.3, 0.6)),
            grant=rng.choice((0.3, 0.6, 1.0)),
            linger=rng.choice((0, 5, 20)),
            counts_terminating=rng.random() < 0.5,
            status_lag=rng.choice((0.0, 0.0, 0.3)),
            change=rng.choice((None, None, None, None, "third", "rollback")),
            change_at=rng.randint(1, 8),
        )

    @property
    def freeze_passes(self) -> int:
        """How long the freeze lasts: past the deadline (only where that is few passes, for a short test)."""
        passes = math.ceil(1.5 * self.deadline / self.seconds)
        return passes if self.freeze_at is not None and passes <= 25 else 0

    def frozen(self, step: int) -> bool:
        return self.freeze_at is not None and self.freeze_at <= step < self.freeze_at + self.freeze_passes

    def service(self, image: str) -> DisaggSpecService:
        old = image == IMAGES["old"]
        return parse_service(
            edited(
                {
                    "metadata.namespace": "ns",
                    "spec.sglang.image": image,
                    "spec.prefill.replicas": self.replicas[c.ROLE_PREFILL],
                    "spec.decode.replicas": self.replicas[c.ROLE_DECODE],
                    "spec.router.replicas": self.old_router if old else self.replicas[c.ROLE_ROUTER],
                    "spec.rollout": {
                        "maxSurge": self.max_surge,
                        "maxUnavailable": self.max_unavailable,
                        "maxSkew": self.max_skew,
                        "progressDeadlineSeconds": self.deadline,
                    },
                }
            )
        )


def step_bound(sc: Scenario) -> int:
    """Passes within which the rollout must finish, from the budgets and the simulation's delays.

    A wave: the new revision asks for pods; they are ready within `ready_within` passes (the router too, once it
    has a pair), the next pass sees it (one more with a lagging status) and shrinks the old revision as far as the
    floor allows, and the pass after sees the old one smaller and grows the new one. Each wave grows the new
    revision's pool that is furthest behind by at least min(maxSurge + maxUnavailable, its maxSkew share), at least
    one pod. Then each old revision retires: its router goes, its pods are gone after the preStop pause and the
    linger (or the planner's fixed wait where terminating pods are not counted), and the next pass removes it."""
    lag = 1 if sc.status_lag else 0
    wave = sc.ready_within + 2 + 2 * lag
    waves = 1  # the first pair and the router
    for role in POOLS:
        replicas = sc.replicas[role]
        step = max(1, min(sc.max_surge + sc.max_unavailable, math.floor(replicas * sc.max_skew)))
        waves += math.ceil(replicas / step)
    gone = max(ROUTER_PRESTOP + sc.linger, _timing(sc.service(IMAGES["new"])).router_gone_seconds)
    retire = math.ceil(gone / sc.seconds) + 3 + lag
    olds = 2 if sc.change else 1
    return waves * wave + olds * retire + sc.freeze_passes + 2


# ---- the simulated cluster ----------------------------------------------------------------------------------------


@dataclass
class Pod:
    fingerprint: str
    role: str
    labels: Mapping[str, str]
    owner: str | None
    """Its Deployment; None once that was deleted."""
    born: int
    ready_by: int
    selectors: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """A router pod's worker selectors per pool (from its rendered command)."""
    granted: bool = False
    """Its own readiness (a router is ready only with a pair besides)."""
    ready: bool = False
    served: bool = False
    """A router pod that was ready at some point: it may have taken requests."""
    active: bool = True
    """Not terminating."""
    terminating_since: float | None = None
    gone_at: float = math.inf


def matches(labels: Mapping[str, str], selector: Mapping[str, str]) -> bool:
    return selector.items() <= labels.items()


def router_selectors(deployment: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """The `--prefill-selector` and `--decode-selector` of a rendered router Deployment."""
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    args = [*container.get("command", []), *container.get("args", [])]
    selectors: dict[str, dict[str, str]] = {}
    for role in POOLS:
        start = args.index(f"--{role}-selector") + 1
        end = next((i for i in range(start, len(args)) if args[i].startswith("--")), len(args))
        selectors[role] = dict(arg.split("=", 1) for arg in args[start:end])
    return selectors


class Cluster:
    """Deployments, their pods and their status, as the API server and the Deployment controller keep them."""

    def __init__(self, sc: Scenario) -> None:
        self.sc = sc
        self.rng = random.Random(sc.seed * 7919 + 17)
        self.step = 0
        self.seconds = 0.0
        self.deployments: dict[str, dict[str, Any]] = {}
        self.reported: dict[str, dict[str, int]] = {}
        self.lagged: set[str] = set()
        self.pods: list[Pod] = []
        self.selectors: dict[str, dict[str, dict[str, str]]] = {}
        """Per router Deployment, its worker selectors."""
        self.sources: dict[str, Mapping[str, Any]] = {}
        """Per Deployment, the manifest last applied."""
        self._pairs: dict[Any, tuple[list[str], list[Mapping[str, Any]]]] = {}
        self.thinned: set[str] = set()
        """Revisions that lost a ready pool pod since the pass began (`begin_pass`)."""

    def begin_pass(self) -> None:
        self.thinned = set()

    def now(self) -> str:
        return format(T0 + datetime.timedelta(seconds=self.seconds), "%Y-%m-%dT%H:%M:%SZ")

    def live(self) -> list[dict[str, Any]]:
        return [{**obj, "status": dict(self.reported[name])} for name, obj in self.deployments.items()]

    def apply(self, manifests: Iterable[Mapping[str, Any]], keep: Iterable[str] = ()) -> None:
        """Apply the workloads of a pass and delete the service's other workloads (but those of `keep`)."""
        wanted = {m["metadata"]["name"]: m for m in manifests if m["kind"] in WORKLOADS}
        for name, manifest in wanted.items():
            before = self.deployments.get(name)
            created = self.now()
            if before is not None:
                assert before["spec"]["selector"] == manifest["spec"]["selector"], (
                    f"seed {self.sc.seed} step {self.step}: {name}'s selector is immutable"
                )
                created = before["metadata"]["creationTimestamp"]
            else:
                self.reported[name] = {}
            if manifest["metadata"]["labels"][c.LABEL_ROLE] == c.ROLE_ROUTER and self.sources.get(name) is not manifest:
                self.selectors[name] = router_selectors(manifest)
            self.sources[name] = manifest
            self.deployments[name] = {**manifest, "metadata": {**manifest["metadata"], "creationTimestamp": created}}
        kept = set(keep)
        for name in [n for n, obj in self.deployments.items() if n not in wanted]:
            if self.deployments[name]["metadata"]["labels"][c.LABEL_FINGERPRINT] in kept:
                continue
            del self.deployments[name], self.reported[name], self.sources[name]
            self.lagged.discard(name)
            for pod in self.pods:
                if pod.owner == name:
                    pod.owner = None
                    self.terminate(pod)

    def settle(self) -> None:
        """The Deployment controller: as many active pods as asked, deleting unready then newest pods first."""
        for name, obj in self.deployments.items():
            want = int(obj["spec"]["replicas"])
            mine = [pod for pod in self.pods if pod.owner == name and pod.active]
            for pod in sorted(mine, key=lambda pod: (pod.ready, -pod.born))[: max(0, len(mine) - want)]:
                self.terminate(pod)
            for _ in range(want - len(mine)):
                labels = obj["spec"]["template"]["metadata"]["labels"]
                role = labels[c.LABEL_ROLE]
                self.pods.append(
                    Pod(
                        fingerprint=labels[c.LABEL_FINGERPRINT],
                        role=role,
                        labels=labels,
                        owner=name,
                        born=self.step,
                        ready_by=self.step + self.rng.randint(0, self.sc.ready_within),
                        selectors=self.selectors.get(name, {}),
                    )
                )

    def terminate(self, pod: Pod) -> None:
        if not pod.active:
            return
        if pod.ready and pod.role in POOLS:
            self.thinned.add(pod.fingerprint)
        pod.terminating_since, pod.ready, pod.active = self.seconds, False, False
        pause = ROUTER_PRESTOP if pod.role == c.ROLE_ROUTER else 0
        pod.gone_at = self.seconds + pause + self.rng.randint(0, self.sc.linger)

    def kinds(self, ready: bool = False) -> dict[tuple[str, str], Mapping[str, str]]:
        """The pod labels (one per revision and role) among the pods, or among the active ready ones."""
        return {(pod.fingerprint, pod.role): pod.labels for pod in self.pods if not ready or (pod.active and pod.ready)}

    def paired(self, router: Pod, ready: Mapping[tuple[str, str], Mapping[str, str]] | None = None) -> bool:
        """A ready prefill and a ready decode match the router pod's selectors (`ready`: `kinds(ready=True)`)."""
        kinds = self.kinds(ready=True) if ready is None else ready
        return all(
            any(matches(labels, selector) for labels in kinds.values()) for selector in router.selectors.values()
        )

    def strangers(self) -> list[str]:
        """`_strangers` of what is live (the same Deployments and revisions of pods give the same answer)."""
        kinds = self.kinds()
        sources = [self.sources[name] for name in self.deployments]
        key = (tuple(map(id, sources)), tuple(kinds))  # the cache keeps `sources` alive: their ids stay theirs
        if key not in self._pairs:
            self._pairs[key] = (_strangers(self.deployments, self.selectors, kinds), sources)
        return self._pairs[key][0]

    def progress(self, readiness: bool = True) -> None:
        """Between two passes: pods become ready (if `readiness`), time passes, statuses are reported."""
        stall = self.rng.random() < self.sc.stall
        readiness = readiness and not self.sc.frozen(self.step)
        for pod in self.pods:
            if pod.active and not pod.granted and readiness:
                pod.granted = self.step >= pod.ready_by or (not stall and self.rng.random() < self.sc.grant)
        for pod in self.pods:
            if pod.role != c.ROLE_ROUTER:
                pod.ready = pod.active and pod.granted
        ready = self.kinds(ready=True)
        for pod in self.pods:
            if pod.role == c.ROLE_ROUTER:
                pod.ready = pod.active and pod.granted and self.paired(pod, ready)
                pod.served = pod.served or pod.ready
        outage = self.sc.deadline if self.step == self.sc.outage_after else 0
        self.step += 1
        self.seconds += self.sc.seconds + outage
        self.pods = [pod for pod in self.pods if pod.gone_at > self.seconds]
        self.report()

    def report(self) -> None:
        for name in self.deployments:
            if self.reported[name] and name not in self.lagged and self.rng.random() < self.sc.status_lag:
                self.lagged.add(name)
                continue
            self.lagged.discard(name)
            self.reported[name] = self.status(name)

    def status(self, name: str) -> dict[str, int]:
        """The status of Deployment `name` as its pods are now."""
        mine = [pod for pod in self.pods if pod.owner == name]
        active = [pod for pod in mine if pod.active]
        ready = sum(pod.ready for pod in active)
        status = {"replicas": len(active), "readyReplicas": ready, "availableReplicas": ready}
        if self.sc.counts_terminating:
            status["terminatingReplicas"] = len(mine) - len(active)
        return status

    def stale(self) -> bool:
        """Some Deployment's reported status is behind its pods (it lagged while they changed)."""
        return any(self.reported[name] != self.status(name) for name in self.lagged)


# ---- the properties -----------------------------------------------------------------------------------------------


def violations(cluster: Cluster, sc: Scenario, traffic: bool = True, shifting: bool = False) -> list[str]:
    """Which of the properties (module docstring, 1 to 3 and 6, 6 only with `traffic`) the cluster breaks right after
    a pass was applied."""
    found: list[str] = []
    active = [pod for pod in cluster.pods if pod.active]
    serving = {pod.fingerprint for pod in active if pod.role == c.ROLE_ROUTER and pod.ready}
    for role in POOLS:
        desired = sc.replicas[role]
        ready = sum(1 for pod in active if pod.role == role and pod.ready and pod.fingerprint in serving)
        if ready < desired - sc.max_unavailable:
            found.append(
                f"floor: {role} has {ready} ready pods in serving revisions {sorted(serving)}, below replicas "
                f"{desired} - maxUnavailable {sc.max_unavailable}"
            )
        pods = sum(1 for pod in active if pod.role == role)
        asked = sum(
            int(obj["spec"]["replicas"])
            for obj in cluster.deployments.values()
            if obj["metadata"]["labels"][c.LABEL_ROLE] == role
        )
        if max(pods, asked) > desired + sc.max_surge:
            found.append(
                f"surge: {role} has {pods} pods and asks for {asked}, above replicas {desired} + maxSurge "
                f"{sc.max_surge}"
            )
    if traffic:
        found += traffic_violations(cluster, sc, shifting)
    found += cluster.strangers()
    ready_kinds = cluster.kinds(ready=True)
    for pod in cluster.pods:
        if pod.role != c.ROLE_ROUTER:
            continue
        pausing = pod.terminating_since is not None and cluster.seconds - pod.terminating_since < ROUTER_PRESTOP
        if (pod.ready or (pod.served and pausing)) and not cluster.paired(pod, ready_kinds):
            state = "ready" if pod.ready else f"in its preStop pause since {pod.terminating_since}s"
            found.append(f"lone router: a router pod of {pod.fingerprint} is {state} without a ready pair")
    return found


def traffic_violations(cluster: Cluster, sc: Scenario, shifting: bool = False) -> list[str]:
    """Properties 6 and 7 (module docstring), and for a pass that moves traffic ahead of a scale-down (`shifting`)
    that it removes no ready pool pod; 6 is not checked on such a pass."""
    active = [pod for pod in cluster.pods if pod.active]
    serving = {pod.fingerprint for pod in active if pod.role == c.ROLE_ROUTER and pod.ready}
    found = []
    if shifting and cluster.thinned & serving:
        thinned = sorted(cluster.thinned & serving)
        found.append(f"shifting: a pass that moves traffic first removed ready pool pods of serving {thinned}")
    routers = {fp: 0 for fp in serving}
    ready = {fp: 0 for fp in serving}
    for pod in active:
        if pod.role == c.ROLE_ROUTER and pod.fingerprint in serving:
            routers[pod.fingerprint] += 1
            ready[pod.fingerprint] += pod.ready
    capacities = {
        fp: min(
            min(1.0, sum(1 for p in active if p.fingerprint == fp and p.role == role and p.ready) / sc.replicas[role])
            for role in POOLS
        )
        for fp in serving
    }
    total_capacity = sum(capacities.values())
    if len(serving) < 2 or not total_capacity:
        return found
    slots = max(min(sc.replicas[c.ROLE_ROUTER], sc.old_router), *(sc.replicas[role] for role in POOLS))
    for fp in sorted(serving):
        capacity = capacities[fp] / total_capacity
        share = routers[fp] / sum(routers.values())
        if not shifting and share > capacity + 1 / slots + 1e-9:
            found.append(
                f"traffic: {fp[:8]} has {routers[fp]} of {sum(routers.values())} router pods ({share:.2f}), above "
                f"its capacity share {capacity:.2f} + 1/{slots}"
            )
        share = ready[fp] / sum(ready.values())
        if fp in cluster.thinned and share > capacity + 1 / slots + 1e-9:
            found.append(
                f"traffic first: {fp[:8]} lost ready pool pods with {ready[fp]} of {sum(ready.values())} ready "
                f"router pods ({share:.2f}), above its capacity share {capacity:.2f} + 1/{slots}"
            )
    return found


def _strangers(
    deployments: Mapping[str, Mapping[str, Any]],
    selectors_of: Mapping[str, Mapping[str, Mapping[str, str]]],
    kinds: Mapping[tuple[str, str], Mapping[str, str]],
) -> list[str]:
    """Property 2, the selectors: those of each router name its own revision and role, and no Deployment's or
    router's selector matches a pod of another revision (or role)."""
    found = []
    for name, obj in deployments.items():
        labels = obj["metadata"]["labels"]
        own = (labels[c.LABEL_FINGERPRINT], labels[c.LABEL_ROLE])
        selectors: Mapping[str, Mapping[str, str]] = {own[1]: obj["spec"]["selector"]["matchLabels"]}
        if own[1] == c.ROLE_ROUTER:
            selectors = selectors_of[name]
            for role, selector in selectors.items():
                if selector.get(c.LABEL_FINGERPRINT) != own[0] or selector.get(c.LABEL_ROLE) != role:
                    found.append(f"pairs: {name}'s {role} selector {selector} does not name revision {own[0]}")
        for role, selector in selectors.items():
            strangers = {kind for kind, pod_labels in kinds.items() if matches(pod_labels, selector)} - {(own[0], role)}
            if strangers:
                found.append(f"pairs: {name}'s {role} selector matches pods of {sorted(strangers)}")
    return found


def steps_left(cluster: Cluster, sc: Scenario, fp: str) -> list[str]:
    """Property 5, for a pass that holds for want of a step (`Plan.blocked`): no step is left indeed. From the pods
    themselves, not the planner's rules: a step is a pod of revision `fp` that a pool short of its replicas could
    start within replicas + maxSurge, an older revision's pod that could go while every serving revision keeps a
    ready pair and the ready pods of the serving revisions stay at or above replicas - maxUnavailable (or a whole
    older revision that could go so), or a pod still on its way (not ready, or of a revision that does not serve)."""
    active = [pod for pod in cluster.pods if pod.active]
    serving = {pod.fingerprint for pod in active if pod.role == c.ROLE_ROUTER and pod.ready}

    def ready(role: str, revisions: Iterable[str]) -> int:
        return sum(1 for pod in active if pod.role == role and pod.ready and pod.fingerprint in set(revisions))

    floor = {role: sc.replicas[role] - sc.max_unavailable for role in POOLS}
    found = []
    for pod in active:
        if pod.role in POOLS and (not pod.ready or pod.fingerprint not in serving | {fp}):
            found.append(f"a {pod.role} pod of {pod.fingerprint} is not ready or serves nothing")
    for role in POOLS:
        pods = sum(1 for pod in active if pod.role == role)
        asked = sum(
            int(obj["spec"]["replicas"])
            for obj in cluster.deployments.values()
            if obj["metadata"]["labels"][c.LABEL_ROLE] == role
        )
        mine = sum(1 for pod in active if pod.role == role and pod.fingerprint == fp)
        if mine < sc.replicas[role] and max(pods, asked) < sc.replicas[role] + sc.max_surge:
            found.append(f"{fp} could start a {role} pod within maxSurge")
    for old in sorted(serving - {fp}):
        rest = serving - {old}
        if all(ready(role, rest) >= floor[role] for role in POOLS):
            found.append(f"{old} could go whole")
        for role in POOLS:
            if ready(role, [old]) >= 2 and ready(role, serving) - 1 >= floor[role]:
                found.append(f"{old} could lose a {role} pod")
    return [f"stuck: the pass holds for want of a step, but {step}" for step in found]


def finished(cluster: Cluster, fp: str, replicas: Mapping[str, int]) -> bool:
    """Only the revision `fp` is left, at `replicas`, every pod ready and reported so."""
    if {obj["metadata"]["labels"][c.LABEL_FINGERPRINT] for obj in cluster.deployments.values()} != {fp}:
        return False
    if any(pod.active and pod.fingerprint != fp for pod in cluster.pods):
        return False
    for name, obj in cluster.deployments.items():
        want = replicas[obj["metadata"]["labels"][c.LABEL_ROLE]]
        status = cluster.reported[name]
        if int(obj["spec"]["replicas"]) != want or status.get("readyReplicas") != want or status["replicas"] != want:
            return False
    return True


# ---- the simulation -----------------------------------------------------------------------------------------------

Edit = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]


class Simulation:
    """A rollout from the old spec, every replica ready, to the new one: one `run_pass` per planner pass."""

    def __init__(self, sc: Scenario, planner: Planner = _plan_pass, edit: Edit | None = None) -> None:
        self.sc, self.planner, self.edit = sc, planner, edit
        self.specs = {key: sc.service(image) for key, image in IMAGES.items()}
        self.fingerprints = {key: fingerprint(spec) for key, spec in self.specs.items()}
        self._rendered: dict[tuple[str, tuple[tuple[str, int], ...]], list[dict[str, Any]]] = {}
        self.cluster = Cluster(sc)
        self.use("old")
        self.cluster.apply(self._render([Revision(self.fp, self.service, {})]))
        self.cluster.settle()
        for pod in self.cluster.pods:
            pod.granted = pod.ready = pod.served = True
        self.cluster.seconds = 3600.0
        self.cluster.report()
        self.previous: tuple[RevisionStatus, ...] = ()
        self.previous = _written(self.plan().status)
        self.use("new")

    def use(self, key: str) -> None:
        """The service's spec is now the `key` one ("old", "new" or "third")."""
        self.service, self.fp = self.specs[key], self.fingerprints[key]
        self.replicas = rollout.desired_replicas(self.service)

    def finished(self) -> bool:
        return finished(self.cluster, self.fp, self.replicas)

    def label(self) -> str:
        return f"seed {self.sc.seed} step {self.cluster.step}"

    def _observe(self) -> dict[str, rollout.LiveRevision]:
        return rollout.observe(SERVICE, self.cluster.live())

    def _render(self, revisions: Sequence[Revision]) -> list[dict[str, Any]]:
        """The workloads `render` makes of `revisions`, revision by revision (each renders on its own)."""
        manifests = []
        for revision in revisions:
            key = (revision.fingerprint, tuple(sorted(revision.replicas.items())))
            if key not in self._rendered:
                rendered = render(self.service, OperatorConfig(), [revision])
                self._rendered[key] = [m for m in rendered if m["kind"] in WORKLOADS]
            manifests += self._rendered[key]
        return self.edit(manifests) if self.edit is not None else manifests

    def plan(self) -> rollout.Plan:
        """Plan once on what is live, without applying."""
        return self.planner(self.service, self.fp, self._observe(), self.previous, self.cluster.now())

    def run_pass(self, readiness: bool = True) -> rollout.Plan:
        """One pass: plan, write the status, apply, let the Deployment controller act, check, then let time pass."""
        # The planner splits traffic by the statuses it reads: a pass that read one behind its pods is not held to
        # properties 6 and 7 (the next pass, reading the status caught up, is).
        lagging = self.cluster.stale()
        self.cluster.begin_pass()
        plan = self.plan()
        self.previous = _written(plan.status)
        self.cluster.apply(
            self._render(plan.revisions), keep=[r.fingerprint for r in plan.revisions if r.service is None]
        )
        self.cluster.settle()
        problems = violations(self.cluster, self.sc, traffic=not lagging, shifting=plan.shifting)
        if plan.blocked:
            problems += steps_left(self.cluster, self.sc, self.fp)
        assert not problems, f"{self.label()}: " + "; ".join(problems) + f"\n{self.describe(plan)}"
        self.cluster.progress(readiness)
        return plan

    def describe(self, plan: rollout.Plan) -> str:
        """The plan and the live pods, for a failure message."""
        lines = [f"  {self.sc}", f"  plan: held={plan.held is not None} draining={plan.draining}"]
        lines += [f"    {r.fingerprint[:8]} {dict(r.replicas)}" for r in plan.revisions]
        for fp in sorted({pod.fingerprint for pod in self.cluster.pods}):
            counts = {
                role: (
                    sum(1 for p in self.cluster.pods if p.fingerprint == fp and p.role == role and p.active),
                    sum(1 for p in self.cluster.pods if p.fingerprint == fp and p.role == role and p.ready),
                )
                for role in ROLES
            }
            lines.append(f"  pods {fp[:8]} (active, ready): {counts}")
        return "\n".join(lines)

    def change_spec(self) -> None:
        if self.sc.change is not None and self.cluster.step == self.sc.change_at:
            self.use("old" if self.sc.change == "rollback" else "third")


@dataclass(frozen=True)
class Outcome:
    steps: int
    """Passes until only the new revision was left, complete."""
    held: int
    """Passes that planned a hold."""


def roll_out(sc: Scenario, planner: Planner = _plan_pass, edit: Edit | None = None) -> Outcome:
    """Run the rollout of `sc` to its end, checking every pass, its bound and the fixed point at the end."""
    sim = Simulation(sc, planner, edit)
    bound = step_bound(sc) + (sc.change_at if sc.change else 0)
    held = 0
    while not sim.finished():
        assert sim.cluster.step <= bound, (
            f"{sim.label()}: termination: the rollout is not finished after the bound of {bound} passes "
            f"(held: {sim.plan().held})\n{sim.describe(sim.plan())}"
        )
        sim.change_spec()
        held += sim.run_pass().held is not None
    steps = sim.cluster.step
    # The fixed point: the pass plans the one revision as it is, and a second pass plans (and applies) the same.
    first = sim.run_pass()
    before = {name: obj["spec"]["replicas"] for name, obj in sim.cluster.deployments.items()}
    second = sim.run_pass()
    label = f"seed {sc.seed} step {steps}"
    assert [r.fingerprint for r in first.revisions] == [sim.fp], f"{label}: termination: {first.revisions}"
    assert dict(first.current.replicas) == sim.replicas, f"{label}: termination: {first.current.replicas}"
    assert first.held is None and not first.draining and first.wake_after is None, f"{label}: termination: {first}"
    assert [s.traffic for s in first.status] == ["Active"], f"{label}: termination: {first.status}"
    assert (second.revisions, second.status) == (first.revisions, first.status), f"{label}: termination: no fixed point"
    after = {name: obj["spec"]["replicas"] for name, obj in sim.cluster.deployments.items()}
    assert after == before and sim.finished(), f"{label}: termination: no fixed point: {after}"
    return Outcome(steps, held)


# ---- the sequences ------------------------------------------------------------------------------------------------


def cannot_finish(sc: Scenario) -> bool:
    """No sequence of passes can take the rollout of `sc` to its end within its budgets: a pool of one replica with
    maxSurge 0 has room for one pod, which a serving old revision keeps for its pair, so the new revision's first pod
    of that pool can start only once no old revision serves, and neither serves then; that takes the ready pods of
    the other pool's serving revisions to 0, below replicas - maxUnavailable unless that is 0 too. (A rollback to the
    old spec ends the rollout: the old revision is current again.)"""
    return (
        sc.change != "rollback"
        and sc.max_surge == 0
        and any(
            sc.replicas[role] == 1 and sc.replicas[other] > sc.max_unavailable
            for role, other in ((c.ROLE_PREFILL, c.ROLE_DECODE), (c.ROLE_DECODE, c.ROLE_PREFILL))
        )
    )


def blocked_sequence(sc: Scenario, planner: Planner = _plan_pass) -> None:
    """A rollout the budgets cannot finish (`cannot_finish`): every pass keeps the properties; within the bound a pass
    holds for want of a step (`Plan.blocked`: RolloutHeld, traffic Failed, a message naming maxSurge and
    maxUnavailable) with no step left indeed (`steps_left`, in `Simulation.run_pass`), and from then on every pass
    holds the same way and changes nothing."""
    sim = Simulation(sc, planner)
    bound = step_bound(sc) + (sc.change_at if sc.change else 0)
    plan = None
    while plan is None or not plan.blocked:
        assert sim.cluster.step <= bound, (
            f"{sim.label()}: termination: no pass held for want of a step within the bound of {bound} passes\n"
            f"{sim.describe(sim.plan())}"
        )
        sim.change_spec()
        plan = sim.run_pass()
    label = sim.label()
    assert plan.held is not None and "maxSurge" in plan.held and "maxUnavailable" in plan.held, f"{label}: {plan}"
    held = {name: obj["spec"]["replicas"] for name, obj in sim.cluster.deployments.items()}
    for _ in range(3):
        again = sim.run_pass()
        assert again.blocked and again.held == plan.held and again.wake_after is None, f"{sim.label()}: {again}"
        assert [s.traffic for s in again.status] == ["Failed", *["Draining"] * (len(again.status) - 1)], again
        after = {name: obj["spec"]["replicas"] for name, obj in sim.cluster.deployments.items()}
        assert after == held, f"{sim.label()}: a blocked rollout changed {held} to {after}"


def test_a_third_revision_that_finds_no_slot_left_holds_for_want_of_a_step() -> None:
    """Seed 360 (not drawn): decode has 1 replica and maxSurge 1, so 2 slots; the spec changes again while the old
    and the new revision both serve, each keeping its decode for its pair, and prefill's floor (6 - 0) needs both:
    the third revision can start no decode, and neither older one can go. The rollout holds for want of a step."""
    blocked_sequence(Scenario.draw(360))


@pytest.mark.parametrize("seed", SEEDS)
def test_every_pass_keeps_the_floor_pairs_and_surge_and_the_rollout_ends(seed: int) -> None:
    """The rollout finishes (`roll_out`), or, where the budgets cannot finish it, holds for want of a step
    (`blocked_sequence`); a pass that holds so in a rollout that can finish fails `steps_left`."""
    sc = Scenario.draw(seed)
    if cannot_finish(sc):
        blocked_sequence(sc)
    else:
        roll_out(sc)


def test_the_sequences_cover_the_budgets_and_the_cluster_behaviours() -> None:
    """The seeds reach what the properties are about: every budget, pools at most maxUnavailable big, a spec change
    mid-rollout (to a third revision, and back), statuses with and without terminating pods or lagging, freezes."""
    scenarios = [Scenario.draw(seed) for seed in SEEDS]
    assert {sc.max_surge for sc in scenarios} == {0, 1, 2, 3}
    assert {sc.max_unavailable for sc in scenarios} == {0, 1, 2}
    assert {sc.max_skew for sc in scenarios} == {0.1, 0.25, 0.34, 0.5, 1.0}
    assert {sc.change for sc in scenarios} == {None, "third", "rollback"}
    assert {sc.counts_terminating for sc in scenarios} == {True, False}
    assert {bool(sc.status_lag) for sc in scenarios} == {True, False}
    assert sum(bool(sc.freeze_passes) for sc in scenarios) >= 20
    assert any(sc.max_unavailable >= min(sc.replicas[r] for r in POOLS) for sc in scenarios)
    assert {sc.replicas[r] for sc in scenarios for r in POOLS} == set(range(1, 7))
    assert sum(cannot_finish(sc) for sc in scenarios) >= 3


@pytest.mark.parametrize("seed", [35, 57, 172, 174])
def test_a_freeze_past_the_deadline_holds_and_releases_once_pods_are_ready(seed: int) -> None:
    """Seeds whose readiness freezes past the deadline in mid-rollout: the rollout holds, and finishes once pods
    become ready again (within the bound, which counts the freeze). (Seed 16, a rollback, no longer holds since the
    routers follow capacity: the revision it rolls back from goes whole three passes into the freeze, and a single
    revision has no rollout to hold.)"""
    outcome = roll_out(Scenario.draw(seed))
    assert outcome.held > 0, f"seed {seed} step {outcome.steps}: finished without holding"


# ---- holding ------------------------------------------------------------------------------------------------------


def never_ready(seed: int) -> Scenario:
    """A scenario whose old revision keeps serving while the new one never does: maxUnavailable below one pool's
    replicas (else the floor is 0 and the whole old revision may go)."""
    sc = dataclasses.replace(Scenario.draw(seed), change=None)
    unavailable = min(sc.max_unavailable, max(sc.replicas[role] for role in POOLS) - 1)
    return dataclasses.replace(
        sc,
        max_unavailable=unavailable,
        max_surge=max(sc.max_surge, 1 - unavailable),
        deadline=min(sc.deadline, 60),  # nothing happens while it waits: a short deadline keeps the test short
        seconds=max(sc.seconds, 2),
    )


def hold_sequence(sc: Scenario, planner: Planner = _plan_pass) -> None:
    """No new pod ever becomes ready: up to the deadline (counted from the pass that first asks for a pool pod of the
    new revision: the wait for pods starts there) nothing holds; from then on every pass holds (RolloutHeld:
    `Plan.held`, which status turns into Progressing=False, and traffic Failed), the new revision asks for no more
    pods, the old one keeps serving at the floor (a pool whose floor is 0 keeps one pod for the pair), and nothing
    changes any more; the properties hold on every pass as well."""
    sim = Simulation(sc, planner)
    start: float | None = None
    held: dict[str, int] | None = None
    for _ in range(math.ceil(sc.deadline / sc.seconds) + 10):
        now = sim.cluster.seconds
        waited = 0.0 if start is None else now - start
        plan = sim.run_pass(readiness=False)
        if start is None and any(plan.current.replicas[role] for role in POOLS):
            start = now
        label = f"{sim.label()} (waited {waited:.0f}s of {sc.deadline}s)"
        if waited < sc.deadline:
            assert plan.held is None, f"{label}: held before the progress deadline"
            continue
        assert plan.held is not None and "progressDeadlineSeconds" in plan.held, f"{label}: not held"
        assert [s.traffic for s in plan.status] == ["Failed", "Draining"], f"{label}: {plan.status}"
        assert plan.wake_after is None, f"{label}: a held plan asks to be woken after {plan.wake_after}"
        replicas = {name: int(obj["spec"]["replicas"]) for name, obj in sim.cluster.deployments.items()}
        assert held in (None, replicas), f"{label}: a held rollout changed {held} to {replicas}"
        held = replicas
        old = plan.revisions[1].replicas
        for role in POOLS:
            floor = sc.replicas[role] - sc.max_unavailable
            want = floor if floor > 0 else 1
            assert old[role] == want, f"{label}: the old revision's {role} is at {old[role]}, not {want}"
    assert held is not None, f"{sim.label()}: never held"


@pytest.mark.parametrize("seed", range(1000, 1040))
def test_a_rollout_whose_pods_never_become_ready_holds_and_keeps_the_old_capacity(seed: int) -> None:
    hold_sequence(never_ready(seed))


# ---- the checker and the simulation catch violations --------------------------------------------------------------


def _state(sc: Scenario, pods: Mapping[str, tuple[int, int, int]], edit: Edit | None = None) -> Cluster:
    """A cluster right after a pass: per revision ("old", "new"), its (prefill, decode, router) pods, all ready."""
    sim = Simulation(sc)
    revisions = [
        Revision(sim.fingerprints[key], sim.specs[key], dict(zip(ROLES, counts, strict=True)))
        for key, counts in pods.items()
    ]
    manifests = render(sim.specs["new"], OperatorConfig(), revisions)
    cluster = Cluster(sc)
    cluster.apply(edit(manifests) if edit is not None else manifests)
    cluster.settle()
    for pod in cluster.pods:
        pod.granted = pod.ready = pod.served = True
    return cluster


_HAND_MADE_SCENARIO: Final = dataclasses.replace(
    Scenario.draw(0),
    replicas={c.ROLE_PREFILL: 2, c.ROLE_DECODE: 2, c.ROLE_ROUTER: 1},
    old_router=1,
    max_surge=1,
    max_unavailable=0,
)
"""Pools of 2, maxSurge 1, maxUnavailable 0."""

HAND_MADE: Final = {
    # The old revision lost a pod while the new one serves none (floor), with maxUnavailable 0.
    "floor": ({"old": (1, 2, 1), "new": (1, 1, 0)}, "floor:"),
    # Three revisions' worth of prefill pods: more than replicas + maxSurge.
    "surge": ({"old": (2, 2, 1), "new": (2, 2, 1)}, "surge:"),
    # The old revision's router is ready with no decode left.
    "lone router": ({"old": (2, 0, 1), "new": (1, 2, 1)}, "lone router:"),
}


@pytest.mark.parametrize("case", HAND_MADE, ids=str)
def test_the_checker_catches_a_hand_made_violation(case: str) -> None:
    sc = _HAND_MADE_SCENARIO
    pods, tag = HAND_MADE[case]
    cluster = _state(sc, pods)
    found = violations(cluster, sc)
    assert any(v.startswith(tag) for v in found), found
    assert all(v.startswith(tag) for v in found), found  # and nothing else: the states differ in one property


def test_the_checker_accepts_a_clean_state_and_catches_cross_pairing() -> None:
    sc = _HAND_MADE_SCENARIO
    assert violations(_state(sc, {"old": (2, 2, 1), "new": (1, 1, 1)}), sc) == []
    # Routers whose selectors do not name their revision pair the other revision's pods.
    found = violations(_state(sc, {"old": (2, 2, 1), "new": (1, 1, 1)}, _without_fingerprint_selectors), sc)
    assert found and all(v.startswith("pairs:") for v in found), found


def test_the_checker_catches_routers_out_of_proportion_to_capacity() -> None:
    """Pools of 4 (so 4 router slots): the new revision's first pair is a quarter of the capacity, a fifth of the
    serving capacity; with 2 of the 3 router pods it would take two thirds of the requests."""
    sc = dataclasses.replace(
        _HAND_MADE_SCENARIO, replicas={c.ROLE_PREFILL: 4, c.ROLE_DECODE: 4, c.ROLE_ROUTER: 1}, old_router=1
    )
    found = violations(_state(sc, {"old": (4, 4, 1), "new": (1, 1, 2)}), sc)
    assert found and all(v.startswith("traffic:") for v in found), found
    assert violations(_state(sc, {"old": (4, 4, 4), "new": (1, 1, 1)}), sc) == []
    assert violations(_state(sc, {"old": (4, 4, 1), "new": (1, 1, 2)}), sc, traffic=False) == []


def _without_fingerprint_selectors(manifests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The routers' worker selectors without the fingerprint: a router that pairs any revision's pods."""
    out = []
    for manifest in manifests:
        if manifest["kind"] == "Deployment" and manifest["metadata"]["labels"][c.LABEL_ROLE] == c.ROLE_ROUTER:
            template = manifest["spec"]["template"]
            container = template["spec"]["containers"][0]
            command = [arg for arg in container["command"] if not arg.startswith(c.LABEL_FINGERPRINT + "=")]
            containers = [{**container, "command": command}, *template["spec"]["containers"][1:]]
            spec = {
                **manifest["spec"],
                "template": {**template, "spec": {**template["spec"], "containers": containers}},
            }
            manifest = {**manifest, "spec": spec}
        out.append(manifest)
    return out


Change = Callable[[DisaggSpecService, rollout.Plan], rollout.Plan]


def _broken(change: Change) -> Planner:
    """The planner with its plan changed after the fact: a planner that breaks one promise."""

    def planner(
        service: DisaggSpecService,
        fp: str,
        live: Mapping[str, rollout.LiveRevision],
        previous: Sequence[RevisionStatus],
        now: str,
    ) -> rollout.Plan:
        return change(service, _plan_pass(service, fp, live, previous, now))

    return planner


def _scaled(plan: rollout.Plan, scale: Callable[[int, Revision], Mapping[str, int] | None]) -> rollout.Plan:
    """`plan` with each revision's replicas replaced by `scale(index, revision)` (None: the revision is dropped)."""
    revisions = []
    for index, revision in enumerate(plan.revisions):
        replicas = scale(index, revision)
        if replicas is not None:
            revisions.append(dataclasses.replace(revision, replicas=replicas))
    return dataclasses.replace(plan, revisions=tuple(revisions))


def _old_loses_one_more(service: DisaggSpecService, plan: rollout.Plan) -> rollout.Plan:
    return _scaled(
        plan,
        lambda i, r: r.replicas if i == 0 else {**r.replicas, **{p: max(0, r.replicas[p] - 1) for p in POOLS}},
    )


def _new_ignores_surge(service: DisaggSpecService, plan: rollout.Plan) -> rollout.Plan:
    wanted = rollout.desired_replicas(service)
    return _scaled(plan, lambda i, r: {**r.replicas, **{p: wanted[p] for p in POOLS}} if i == 0 else r.replicas)


def _pools_before_router(service: DisaggSpecService, plan: rollout.Plan) -> rollout.Plan:
    """A retiring revision loses its pools and keeps its router (instead of the other way round)."""

    def scale(index: int, revision: Revision) -> Mapping[str, int]:
        if index == 0 or revision.replicas.get(c.ROLE_ROUTER) != 0 or revision.service is None:
            return revision.replicas
        return {c.ROLE_PREFILL: 0, c.ROLE_DECODE: 0, c.ROLE_ROUTER: revision.service.spec.router.replicas}

    return _scaled(plan, scale)


def _pools_with_router(service: DisaggSpecService, plan: rollout.Plan) -> rollout.Plan:
    """A retiring revision goes whole at once, without waiting for its router pods to be gone."""
    return _scaled(plan, lambda i, r: None if i and r.replicas.get(c.ROLE_ROUTER) == 0 else r.replicas)


def _new_stops_at_one(service: DisaggSpecService, plan: rollout.Plan) -> rollout.Plan:
    return _scaled(
        plan, lambda i, r: {**r.replicas, **{p: min(1, r.replicas[p]) for p in POOLS}} if i == 0 else r.replicas
    )


def _routers_by_spec(service: DisaggSpecService, plan: rollout.Plan) -> rollout.Plan:
    """Every revision that keeps a router has spec.router.replicas of them, whatever its capacity (the planner before
    issue 32): the new revision takes a router's share of the requests from its first pair on."""
    return _scaled(
        plan,
        lambda i, r: (
            {**r.replicas, c.ROLE_ROUTER: service.spec.router.replicas} if r.replicas.get(c.ROLE_ROUTER) else r.replicas
        ),
    )


def _pools_before_traffic(
    service: DisaggSpecService,
    fp: str,
    live: Mapping[str, rollout.LiveRevision],
    previous: Sequence[RevisionStatus],
    now: str,
) -> rollout.Plan:
    """The planner that never waits for the current revision's router pods before it takes an older revision's ready
    pods (`rollout._traffic_behind` always False)."""
    with mock.patch.object(rollout, "_traffic_behind", return_value=False):
        return _plan_pass(service, fp, live, previous, now)


def _always_shifting(service: DisaggSpecService, plan: rollout.Plan) -> rollout.Plan:
    """Every pass claims to move traffic ahead of a scale-down (and scales down all the same)."""
    return dataclasses.replace(plan, shifting=True)


def _blocks_at_once(service: DisaggSpecService, plan: rollout.Plan) -> rollout.Plan:
    """Every pass that has an old revision says the budgets allow no step (and plans the step all the same)."""
    if not plan.draining:
        return plan
    return dataclasses.replace(plan, held="blocked: maxSurge, maxUnavailable", blocked=True)


BROKEN: Final[dict[str, tuple[Planner, Edit | None, str]]] = {
    "old revision shrinks below the floor": (_broken(_old_loses_one_more), None, "floor:"),
    "new revision ignores maxSurge": (_broken(_new_ignores_surge), None, "surge:"),
    "pools go before the router": (_broken(_pools_before_router), None, "lone router:"),
    "pools go with the router": (_broken(_pools_with_router), None, "lone router:"),
    "routers pair any revision": (_plan_pass, _without_fingerprint_selectors, "pairs:"),
    "new revision never grows": (_broken(_new_stops_at_one), None, "termination:"),
    "holds for want of a step with one left": (_broken(_blocks_at_once), None, "stuck:"),
    "routers by spec, not by capacity": (_broken(_routers_by_spec), None, "traffic:"),
    "pools go before the traffic has moved": (_pools_before_traffic, None, "traffic first:"),
    "a scale-down passed off as moving traffic": (_broken(_always_shifting), None, "shifting:"),
}


@pytest.mark.parametrize("case", BROKEN, ids=str)
def test_the_sequences_catch_a_broken_planner(case: str) -> None:
    """Each promise, broken on purpose in the planner's output (or the routers' selectors), fails some sequence of
    the first seeds with that property's message: the properties can fail."""
    planner, edit, tag = BROKEN[case]
    caught: list[str] = []
    for seed in SEEDS:
        try:
            roll_out(Scenario.draw(seed), planner, edit)
        except AssertionError as error:
            caught.append(str(error))
            where, _, what = str(error).partition(": ")
            if what.startswith(tag):
                assert where.startswith(f"seed {seed} step "), where
                return
    pytest.fail(f"no sequence caught it with {tag!r}; other failures: {caught[:3]}")


def _never_holds(service: DisaggSpecService, plan: rollout.Plan) -> rollout.Plan:
    return dataclasses.replace(plan, held=None)


def test_the_hold_sequence_catches_a_planner_that_never_holds() -> None:
    with pytest.raises(AssertionError, match=r"seed 1000 step \d+ \(waited \d+s of \d+s\): not held"):
        hold_sequence(never_ready(1000), _broken(_never_holds))


# ---- known planner bugs, each at its smallest seed ----------------------------------------------------------------

# ---- regressions: sequences outside the drawn families -------------------------------------------------------------

REGRESSIONS: Final[dict[str, tuple[int, dict[str, Any]]]] = {
    # A rollback right after the new revision's router was scaled to 0, statuses lagging one pass: the router's stale
    # ready pods must not count it as serving (`LiveRevision.serving` counts at most spec.replicas).
    "rollback onto a router being removed": (47, {"change": "rollback", "status_lag": 0.3}),
    # The same with a third revision and lagging pool statuses: the middle revision's router was once the only one
    # ready, and counting its stale status as serving retired the old revision's router too.
    "a third revision with lagging statuses": (231, {"change": "third", "status_lag": 0.3}),
    # A spec change while the new revision starts, its pools' statuses lagging behind its router's: a pool's only
    # ready pod, reported not ready, is still the pair its ready router shows, and must stay.
    "a pool status lagging its router's": (335, {"change": "third", "status_lag": 0.3}),
    # maxSkew 0 (the drawn values are all above 0): level pools must still grow, in step.
    "maxSkew 0": (4, {"max_skew": 0.0, "change": None}),
    # The pass after pass 5 comes progressDeadlineSeconds late, every pod the new revision asked for ready: nothing
    # was pending, so nothing holds (a hold would cap the revision at what it asked, and never be released).
    "a pass a whole deadline late": (2, {"outage_after": 5, "change": None}),
}
"""Sequences that once failed (the planner bugs the sequences found, now fixed), each at the smallest seed of its
family (the overrides) that showed it."""


@pytest.mark.parametrize("case", REGRESSIONS, ids=str)
def test_a_sequence_that_once_failed_keeps_every_property(case: str) -> None:
    seed, overrides = REGRESSIONS[case]
    roll_out(dataclasses.replace(Scenario.draw(seed), **overrides))
