"""The measuring loop: off the reconcile path, it judges every service's serving pods and requeues on a change.

Every `interval_seconds`, on its own thread and only on the leader, it lists the pool pods (one LIST of pods labelled
`disaggspec.io/role`, per watched namespace: the operator's ClusterRole already grants pods get/list/watch for the
routers' Roles), scrapes each ready pod's `http://<podIP>:<port>/metrics` (its `http` container port, which
host-network pods sharing a node each have of their own, else `port`; a thread pool of `concurrency`, each request
bounded by `timeout_seconds`), or sends the per-service instant queries to Prometheus, keeps each pod's
scrapes for `window_seconds`, and judges (`judge`). Reconcile passes only read the latest verdict (`verdict`): a pod
that does not answer delays the next measurement, never a pass. When a service's verdict changes (its reasons), the
service is requeued so the normal pass writes the conditions with the rest of the status and emits the Events.

Per service it also keeps what SpecDecodeHealthy judges against (issue 29): the spec's expectedAcceptLength and the
decode pool's numDraftTokens (parsed once per generation), the learned `Baseline` (seeded from `status.specDecode`
the first time it sees the service, so a restart or a failover keeps it; taught by at most one healthy window per
`window_seconds`), and whether the condition is False (hysteresis; seeded from status too). Until it has measured a
service, or while its history is shorter than the window and shows too little traffic, its verdict is provisional
(`judge.PENDING`): the pass keeps the conditions status holds, so a new leader writes nothing for a service whose
state did not change.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.parse
import urllib.request
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

import pydantic

from disaggspec import constants as c
from disaggspec import metrics
from disaggspec.api import parse_service
from disaggspec.api.effective import effective_speculative
from disaggspec.config import HealthSettings
from disaggspec.servinghealth import prometheus
from disaggspec.servinghealth.judge import (
    NOT_MEASURED,
    PENDING,
    Baseline,
    PodWindow,
    Role,
    SpecContext,
    Verdict,
    expectation,
    judge,
    learn,
    reduce,
    with_baseline,
)
from disaggspec.servinghealth.samples import PodSample, parse

log = logging.getLogger("disaggspec.servinghealth")

Key = tuple[str, str]
"""(namespace, service name)."""
Fetch = Callable[[str, float], bytes]
"""(url, timeout seconds) -> body; raises on any failure."""


def http_get(url: str, timeout: float) -> bytes:
    """GET `url` (plain HTTP to a pod IP, or the configured Prometheus URL)."""
    with urllib.request.urlopen(url, timeout=timeout) as response:
        body: bytes = response.read()
        return body


Lookup = Callable[[str, str], Mapping[str, Any] | None]
"""(namespace, name) -> the service as cached (spec and status), or None."""


class WindowObserver(Protocol):
    """What the monitor hands each round's scrapes to (`runtime.autoscaler.Autoscaler`)."""

    def observe(
        self, key: Key, series: Mapping[str, Mapping[str, Sequence[tuple[float, PodSample]]]], now: float
    ) -> None:
        """One service's pods that answered this round: role -> pod -> (monotonic seconds, sample) in the window."""
        ...

    def reset(self) -> None:
        """This process stopped leading."""
        ...


@dataclass(frozen=True)
class _Spec:
    """What the judgement reads from a service's spec (parsed once per generation)."""

    generation: int | None
    expected_accept_length: float | None
    num_draft_tokens: int | None


def _spec_of(body: Mapping[str, Any]) -> _Spec:
    generation = (body.get("metadata") or {}).get("generation")
    try:
        service = parse_service(body)
    except pydantic.ValidationError:  # a stored spec the rules refuse: judge the floor only
        return _Spec(generation, None, None)
    decode = effective_speculative(service.spec, c.ROLE_DECODE)
    return _Spec(generation, service.spec.speculative.expected_accept_length, decode.num_draft_tokens)


def _status_baseline(status: Mapping[str, Any]) -> Baseline | None:
    held = status.get("specDecode") or {}
    try:
        return Baseline(
            float(held["baselineAcceptLength"]), float(held["baselineVerifySteps"]), held.get("specFingerprint")
        )
    except (KeyError, TypeError, ValueError):
        return None


def _status_low(status: Mapping[str, Any]) -> bool:
    return any(
        cond.get("type") == c.CONDITION_SPEC_DECODE_HEALTHY and cond.get("status") == "False"
        for cond in status.get("conditions") or ()
    )


def ready(pod: dict[str, Any]) -> bool:
    """Running, with an IP, and Ready (a loading server has no metrics worth judging)."""
    status = pod.get("status") or {}
    conditions = status.get("conditions") or []
    return bool(status.get("podIP")) and any(
        cond.get("type") == "Ready" and cond.get("status") == "True" for cond in conditions
    )


class Monitor:
    """Verdicts per service, refreshed by `run_once` (called by `start`'s thread every interval)."""

    def __init__(
        self,
        settings: HealthSettings,
        *,
        list_pods: Callable[[], list[dict[str, Any]]],
        services: Callable[[], Iterable[Key]],
        requeue: Callable[[Iterable[Key]], None],
        is_leader: Callable[[], bool] = lambda: True,
        fetch: Fetch = http_get,
        clock: Callable[[], float] = time.monotonic,
        lookup: Lookup = lambda namespace, name: None,
    ) -> None:
        self.settings = settings
        self._list_pods = list_pods
        self._services = services
        self._requeue = requeue
        self._is_leader = is_leader
        self._fetch = fetch
        self._clock = clock
        self._lock = threading.Lock()
        self._lookup = lookup
        self._verdicts: dict[Key, Verdict] = {}
        self._history: dict[tuple[str, str], deque[tuple[float, PodSample]]] = {}
        self._specs: dict[Key, _Spec] = {}
        self._baselines: dict[Key, Baseline | None] = {}
        """The learned baseline per service; a service absent here is seeded from its status."""
        self._learned_at: dict[Key, float] = {}
        self._fingerprints: dict[Key, str | None] = {}
        """Each service's status.specFingerprint as of this round (what its baseline belongs to)."""
        self._candidates: dict[Key, Verdict] = {}
        """A healthy window waiting one window to be learned (dropped if the service turns unhealthy meanwhile)."""
        self._watched_since: dict[Key, float] = {}
        """When this process (as leader) first measured each service: its history covers the window after that."""
        self._pool = ThreadPoolExecutor(max(1, settings.concurrency), thread_name_prefix="health-scrape")
        self.last_round_seconds = 0.0
        """How long the last measurement took (for the benchmark and logs)."""
        self._observers: list[WindowObserver] = []

    def add_window_observer(self, observer: WindowObserver) -> None:
        """Hand `observer` each service's scraped series every round (the planner: `runtime.autoscaler`)."""
        self._observers.append(observer)

    def verdict(self, namespace: str, name: str) -> Verdict:
        """The latest verdict on a service: PENDING before this process measured it (NOT_MEASURED with measurement
        off); cheap, never blocks on I/O."""
        if self.settings.source == "off":
            return NOT_MEASURED
        with self._lock:
            return self._verdicts.get((namespace, name), PENDING)

    def forget(self, namespace: str, name: str) -> None:
        """Drop a deleted service's verdict, its learned state and its gauges."""
        key = (namespace, name)
        with self._lock:
            self._verdicts.pop(key, None)
            self._specs.pop(key, None)
            self._fingerprints.pop(key, None)
            self._baselines.pop(key, None)
            self._learned_at.pop(key, None)
            self._candidates.pop(key, None)
            self._watched_since.pop(key, None)
        metrics.forget_runtime_health(namespace, name)

    def _reset(self) -> None:
        """Not the leader (any more): what this process measured is stale by the time it leads again."""
        for observer in self._observers:
            observer.reset()
        with self._lock:
            self._history.clear()
            self._verdicts.clear()
            self._baselines.clear()
            self._learned_at.clear()
            self._candidates.clear()
            self._watched_since.clear()

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self._loop, name="serving-health", daemon=True)
        thread.start()
        return thread

    def _loop(self) -> None:
        while True:
            started = self._clock()
            try:
                if self._is_leader():
                    self.run_once()
                else:
                    self._reset()
            except Exception:  # a bug here must not stop the measurements (nor touch reconcile)
                log.exception("runtime health measurement failed")
            time.sleep(max(0.0, self.settings.interval_seconds - (self._clock() - started)))

    def run_once(self) -> None:
        """Measure every known service once, store the verdicts, set the gauges, requeue the changed services."""
        started = self._clock()
        keys = set(self._services())
        contexts = {key: self._context(key, started) for key in keys}
        if self.settings.source == "prometheus":
            verdicts = self._query_prometheus(keys, contexts)
        else:
            try:
                listed = self._list_pods()
            except Exception as error:  # the API server is unreachable: keep the verdicts, try next interval
                log.warning("runtime health: could not list the pool pods: %s", error)
                return
            verdicts = self._scrape(keys, listed, contexts)
        verdicts = {key: self._learn(key, verdict, started) for key, verdict in verdicts.items()}
        changed = []
        with self._lock:
            for key in keys:
                new = verdicts.get(key, PENDING)
                old = self._verdicts.get(key, PENDING)
                self._verdicts[key] = new
                provisional = (new.spec_decode.provisional, new.transfer.provisional)
                if new.key() != old.key() or provisional != (old.spec_decode.provisional, old.transfer.provisional):
                    changed.append(key)
        for key in keys:
            metrics.record_runtime_health(*key, verdicts.get(key, PENDING))
        self.last_round_seconds = self._clock() - started
        if changed:
            log.info("runtime health changed for %s", ", ".join("/".join(key) for key in sorted(changed)))
            self._requeue(sorted(changed))

    # ---- what a service is judged against ----------------------------------------------------------------------

    def _context(self, key: Key, now: float) -> SpecContext:
        """The expectation and hysteresis state of one service for this round (seeding from its status once)."""
        body = self._lookup(*key) or {}
        status = body.get("status") or {}
        generation = (body.get("metadata") or {}).get("generation")
        spec = self._specs.get(key)
        if spec is None or spec.generation != generation:
            spec = self._specs[key] = _spec_of(body) if body else _Spec(None, None, None)
        with self._lock:
            if key not in self._baselines:
                self._baselines[key] = _status_baseline(status)
            baseline = self._baselines[key]
            previous = self._verdicts.get(key)
            since = self._watched_since.setdefault(key, now)
        fingerprint = self._fingerprints[key] = status.get("specFingerprint")
        if baseline is not None and baseline.fingerprint != fingerprint:
            baseline = None
        if previous is None or previous.spec_decode.provisional:
            was_low = _status_low(status)
        else:
            was_low = previous.spec_decode.reason.status == "False"
        settled = self.settings.source == "prometheus" or now - since >= self.settings.window_seconds
        steps = baseline.verify_steps if baseline is not None else 0.0
        learning = f", learning: {steps:.0f} of {self.settings.baseline_min_verify_steps} verify steps"
        return SpecContext(
            expected=expectation(spec.expected_accept_length, spec.num_draft_tokens, baseline, self.settings),
            was_low=was_low,
            settled=settled,
            learning=learning,
        )

    def _learn(self, key: Key, verdict: Verdict, now: float) -> Verdict:
        """Teach the service's baseline from settled history, at most one window per `window_seconds` (learned
        windows do not overlap), one window late: a healthy window is a candidate, learned only if the service is
        still healthy a window later, so the first minutes of a drop (not flagged yet, within the recover band)
        never lower the baseline. The verdict carries the baseline to publish."""
        fingerprint = self._fingerprints.get(key)
        with self._lock:
            baseline = self._baselines.get(key)
            if baseline is not None and baseline.fingerprint != fingerprint:
                baseline = self._baselines[key] = None
            if verdict.spec_decode.reason.status == "False":
                self._candidates.pop(key, None)  # the candidate window may hold the start of this drop
            since = self._watched_since.get(key, now)
            if (
                not verdict.spec_decode.provisional
                and now - self._learned_at.get(key, since) >= self.settings.window_seconds
            ):
                self._learned_at[key] = now
                learnable = learn(baseline, verdict, fingerprint, self.settings) != baseline
                candidate = self._candidates.pop(key, None)
                if learnable:
                    if candidate is not None:
                        baseline = self._baselines[key] = learn(baseline, candidate, fingerprint, self.settings)
                    self._candidates[key] = verdict
        return with_baseline(verdict, baseline)

    # ---- scraping the pods ----------------------------------------------------------------------------------------

    def _scrape(
        self, keys: set[Key], listed: list[dict[str, Any]], contexts: dict[Key, SpecContext]
    ) -> dict[Key, Verdict]:
        pods: dict[Key, list[tuple[str, Role, str]]] = {key: [] for key in keys}
        for pod in listed:
            meta = pod.get("metadata") or {}
            labels = meta.get("labels") or {}
            key = (str(meta.get("namespace")), str(labels.get(c.LABEL_SERVICE)))
            role = labels.get(c.LABEL_ROLE)
            if (
                key in pods
                and role in c.POOLS
                # A multi-node group's workers serve no API and record no serving metrics: its leader speaks for it.
                and labels.get(c.LWS_LABEL_WORKER_INDEX, "0") == "0"
                and ready(pod)
                and not meta.get("deletionTimestamp")
            ):
                pods[key].append(
                    (str(meta["name"]), role, f"{pod['status']['podIP']}:{_http_port(pod, self.settings.port)}")
                )
        targets = [(key, name, role, where) for key, found in pods.items() for name, role, where in found]
        timeout = self.settings.timeout_seconds
        futures = [self._pool.submit(self._fetch, f"http://{where}/metrics", timeout) for _, _, _, where in targets]
        now = self._clock()
        horizon = now - self.settings.window_seconds
        answered: dict[Key, list[PodWindow]] = {key: [] for key in keys}
        unreachable: dict[Key, list[str]] = {key: [] for key in keys}
        spans: dict[Key, float] = {key: 0.0 for key in keys}
        seen = set()
        for (key, name, role, _), future in zip(targets, futures, strict=True):
            seen.add((key[0], name))
            history = self._history.setdefault((key[0], name), deque())
            try:
                history.append((now, parse(future.result().decode("utf-8", "replace"))))
            except Exception as error:
                log.debug("%s/%s: no metrics: %s", key[0], name, error)
                unreachable[key].append(name)
            while history and history[0][0] < horizon:
                history.popleft()
            if len(history) >= 2:
                spans[key] = max(spans[key], history[-1][0] - history[0][0])
            if history and name not in unreachable[key]:
                answered[key].append(reduce(name, role, list(history)))
        for gone in set(self._history) - seen:  # pods that left (deleted, not ready): their counters start over
            del self._history[gone]
        self._hand_windows(keys, targets, unreachable, now)
        return {
            key: judge(answered[key], unreachable[key], spans[key], self.settings, context=contexts.get(key))
            for key in keys
        }

    def _hand_windows(
        self,
        keys: set[Key],
        targets: list[tuple[Key, str, Role, str]],
        unreachable: Mapping[Key, list[str]],
        now: float,
    ) -> None:
        """Each observer gets, per service, role -> pod -> its series in the window (pods that answered)."""
        if not self._observers:
            return
        series: dict[Key, dict[str, dict[str, list[tuple[float, PodSample]]]]] = {key: {} for key in keys}
        for key, name, role, _ in targets:
            history = self._history.get((key[0], name))
            if history and name not in unreachable[key]:
                series[key].setdefault(role, {})[name] = list(history)
        for observer in self._observers:
            for key in sorted(keys):
                try:
                    observer.observe(key, series[key], now)
                except Exception:  # one service's planner bug must not stop the others, nor the health verdicts
                    log.exception("%s/%s: window observer failed", *key)

    # ---- asking Prometheus ----------------------------------------------------------------------------------------

    def _query_prometheus(self, keys: set[Key], contexts: dict[Key, SpecContext]) -> dict[Key, Verdict]:
        jobs = {
            key: [(q, self._pool.submit(self._query, q.promql)) for q in prometheus.queries(*key, self.settings)]
            for key in keys
        }
        verdicts = {}
        for key, pending in jobs.items():
            try:
                answers = {query.signal: future.result() for query, future in pending}
            except Exception as error:
                verdicts[key] = judge([], [], self.settings.window_seconds, self.settings, error=f"Prometheus: {error}")
                continue
            windows = prometheus.windows(key[1], answers)
            verdicts[key] = judge(windows, [], self.settings.window_seconds, self.settings, context=contexts.get(key))
        return verdicts

    def _query(self, promql: str) -> dict[str, float]:
        url = f"{self.settings.prometheus_url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
        return prometheus.per_pod(json.loads(self._fetch(url, self.settings.timeout_seconds)))


def _http_port(pod: Mapping[str, Any], default: int) -> int:
    """The pod's own `http` container port (host-network pods that share a node each have theirs: render/ports.py),
    else `default`."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == "http" and port.get("containerPort"):
                return int(port["containerPort"])
    return default
