"""What a rollout test of the serving simulation watches: capacity over time, traffic through the router Service, and
the emulator's cross-revision oracle.

`capacity_sampler(api, namespace, name)` lists the service's pods every `SAMPLE_SECONDS` on a thread of its own and
records, per role, how many are Ready and not terminating and which spec fingerprints (revisions) those carry, so a
test can assert that capacity never dipped below the desired replicas (`minimum(role)`). `router_service_target`
is the router Service as kube-proxy would balance it (`e2e.serving.servicetraffic`), to send traffic through with
`e2e.serving.continuous`. A pairing across revisions fails the request at the decode with the oracle's marker
(docs/serving-emulator.md); `cross_revision` finds such outcomes and `oracle_refusals` finds them in the pod logs,
since smg retries a failed request on another pair and the client may then never see the refusal.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

from disaggspec import constants as c
from e2e.serving.emulator.revision import MARKER, conflict
from e2e.serving.kubeapi import ApiError, KubeApi
from e2e.serving.servicetraffic import ServiceTarget, pod_ready
from e2e.serving.traffic import Outcome, Report
from e2e.support.kube import Cluster

ROLES: Final = ("prefill", "decode", "router")
SAMPLE_SECONDS: Final = 0.2


class PodLister(Protocol):
    """The one call a `CapacitySampler` makes (`KubeApi` has it)."""

    def request(self, method: str, path: str, *, query: dict[str, Any] | None = None) -> Any: ...


@dataclass(frozen=True)
class Sample:
    """The serving pods of a service at one moment."""

    at: float
    """Wall-clock time of the listing (time.time())."""
    ready: Mapping[str, int]
    """Role -> Ready serving pods without a deletionTimestamp (every role in ROLES, 0 when none): servers, so a
    multi-node group counts once, by its leader (its workers serve no API)."""
    fingerprints: Mapping[str, frozenset[str]]
    """Role -> the distinct disaggspec.io/spec-fingerprint values among those pods (unlabelled pods add none)."""


def count_ready(pods: Sequence[Mapping[str, Any]], at: float) -> Sample:
    """Count the Ready, not terminating serving pods (group leaders, not workers) per role (disaggspec.io/role), with
    their fingerprints."""
    ready = dict.fromkeys(ROLES, 0)
    fingerprints: dict[str, set[str]] = {role: set() for role in ROLES}
    for pod in pods:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        role = labels.get(c.LABEL_ROLE)
        if role not in ready or not pod_ready(pod) or labels.get(c.LWS_LABEL_WORKER_INDEX, "0") != "0":
            continue
        ready[role] += 1
        if labels.get(c.LABEL_FINGERPRINT):
            fingerprints[role].add(str(labels[c.LABEL_FINGERPRINT]))
    return Sample(at=at, ready=ready, fingerprints={role: frozenset(fps) for role, fps in fingerprints.items()})


class CapacitySampler:
    """Samples of one service's serving pods, taken every `interval` seconds while started (see `capacity_sampler`).
    A failed listing is counted in `errors` (its samples are missing: the timestamps show the gap)."""

    def __init__(self, api: PodLister, namespace: str, name: str, interval: float = SAMPLE_SECONDS) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.interval = interval
        self.errors = 0
        self.last_error = ""
        self._samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"capacity-{name}", daemon=True)

    def sample(self) -> Sample:
        """List the service's pods now and record the sample (raises when the API call fails)."""
        listed = self.api.request(
            "GET",
            f"/api/v1/namespaces/{self.namespace}/pods",
            query={"labelSelector": f"{c.LABEL_SERVICE}={self.name}"},
        )
        taken = count_ready((listed or {}).get("items") or [], time.time())
        self._samples.append(taken)
        return taken

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sample()
            except (ApiError, OSError, ValueError) as error:
                self.errors += 1
                self.last_error = str(error)

    def start(self) -> CapacitySampler:
        """Take a first sample (so there is always one), then keep sampling on a thread; returns self."""
        self.sample()
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling (takes at most one interval plus one API call)."""
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=self.interval + 30)

    @property
    def samples(self) -> list[Sample]:
        """The samples so far, oldest first (a copy)."""
        return list(self._samples)

    def minimum(self, role: str) -> int:
        """The fewest Ready, not terminating pods of `role` in any sample."""
        return min(s.ready[role] for s in self._require_samples())

    def maximum(self, role: str) -> int:
        """The most Ready, not terminating pods of `role` in any sample (a surge shows here)."""
        return max(s.ready[role] for s in self._require_samples())

    def below(self, role: str, desired: int) -> list[Sample]:
        """The samples where `role` had fewer than `desired` Ready pods (for an assertion's message)."""
        return [s for s in self._require_samples() if s.ready[role] < desired]

    def _require_samples(self) -> list[Sample]:
        samples = self.samples
        if not samples:
            raise ValueError(f"no capacity sample of {self.namespace}/{self.name} yet")
        return samples


@contextmanager
def capacity_sampler(
    api: PodLister, namespace: str, name: str, interval: float = SAMPLE_SECONDS
) -> Iterator[CapacitySampler]:
    """Sample service `namespace/name`'s serving pods for the block (first sample taken on entry)."""
    sampler = CapacitySampler(api, namespace, name, interval).start()
    try:
        yield sampler
    finally:
        sampler.stop()


def kube_api(cluster: Cluster) -> KubeApi:
    """A thread-safe API client for `cluster` (its kubeconfig), for the sampler and the Service target."""
    return KubeApi(cluster.kubeconfig)


def router_service_target(api: KubeApi, namespace: str, obj: Mapping[str, Any]) -> ServiceTarget:
    """The router Service of DisaggSpecService `obj` (`<name>-router`, its first port), balanced like kube-proxy:
    every Ready router pod of every revision, refreshed every 200 ms."""
    return ServiceTarget(api, namespace, f"{obj['metadata']['name']}-router")


def cross_revision(report: Report) -> list[Outcome]:
    """The requests the cross-revision oracle caught (the decode's error names it) or that were served by pods of
    two different revisions."""
    return [o for o in report.outcomes if MARKER in o.error or conflict(o.decode_revision, o.prefill_revision)]


def oracle_refusals(log_dir: Path) -> list[str]:
    """Every line of the pod runner's container logs (`pod_runner` yields their directory) where an emulator refused
    a cross-revision pairing, prefixed with the log's file name; a client can miss them behind a router's retries."""
    found: list[str] = []
    for path in sorted(log_dir.glob("*.log")):
        with path.open(errors="replace") as lines:
            found += [f"{path.name}: {line.rstrip()}" for line in lines if MARKER in line]
    return found
