"""The measuring loop: off the reconcile path, it judges every service's serving pods and requeues on a change.

Every `interval_seconds`, on its own thread and only on the leader, it lists the pool pods (one LIST of pods labelled
`disaggspec.io/role`, per watched namespace: the operator's ClusterRole already grants pods get/list/watch for the
routers' Roles), scrapes each ready pod's `http://<podIP>:<port>/metrics` (a thread pool of `concurrency`, each
request bounded by `timeout_seconds`), or sends the per-service instant queries to Prometheus, keeps each pod's
scrapes for `window_seconds`, and judges (`judge`). Reconcile passes only read the latest verdict (`verdict`): a pod
that does not answer delays the next measurement, never a pass. When a service's verdict changes (its reasons), the
service is requeued so the normal pass writes the conditions with the rest of the status and emits the Events.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.parse
import urllib.request
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from disaggspec import constants as c
from disaggspec import metrics
from disaggspec.config import HealthSettings
from disaggspec.servinghealth import prometheus
from disaggspec.servinghealth.judge import NOT_MEASURED, PodWindow, Role, Verdict, judge, reduce
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
    ) -> None:
        self.settings = settings
        self._list_pods = list_pods
        self._services = services
        self._requeue = requeue
        self._is_leader = is_leader
        self._fetch = fetch
        self._clock = clock
        self._lock = threading.Lock()
        self._verdicts: dict[Key, Verdict] = {}
        self._history: dict[tuple[str, str], deque[tuple[float, PodSample]]] = {}
        self._pool = ThreadPoolExecutor(max(1, settings.concurrency), thread_name_prefix="health-scrape")
        self.last_round_seconds = 0.0
        """How long the last measurement took (for the benchmark and logs)."""

    def verdict(self, namespace: str, name: str) -> Verdict:
        """The latest verdict on a service (NOT_MEASURED before the first); cheap, never blocks on I/O."""
        with self._lock:
            return self._verdicts.get((namespace, name), NOT_MEASURED)

    def forget(self, namespace: str, name: str) -> None:
        """Drop a deleted service's verdict and its gauges."""
        with self._lock:
            self._verdicts.pop((namespace, name), None)
        metrics.forget_runtime_health(namespace, name)

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
                    with self._lock:
                        self._history.clear()
            except Exception:  # a bug here must not stop the measurements (nor touch reconcile)
                log.exception("runtime health measurement failed")
            time.sleep(max(0.0, self.settings.interval_seconds - (self._clock() - started)))

    def run_once(self) -> None:
        """Measure every known service once, store the verdicts, set the gauges, requeue the changed services."""
        started = self._clock()
        keys = set(self._services())
        if self.settings.source == "prometheus":
            verdicts = self._query_prometheus(keys)
        else:
            try:
                listed = self._list_pods()
            except Exception as error:  # the API server is unreachable: keep the verdicts, try next interval
                log.warning("runtime health: could not list the pool pods: %s", error)
                return
            verdicts = self._scrape(keys, listed)
        changed = []
        with self._lock:
            for key in keys:
                new = verdicts.get(key, NOT_MEASURED)
                old = self._verdicts.get(key, NOT_MEASURED)
                self._verdicts[key] = new
                if new.key() != old.key():
                    changed.append(key)
        for key in keys:
            metrics.record_runtime_health(*key, verdicts.get(key, NOT_MEASURED))
        self.last_round_seconds = self._clock() - started
        if changed:
            log.info("runtime health changed for %s", ", ".join("/".join(key) for key in sorted(changed)))
            self._requeue(sorted(changed))

    # ---- scraping the pods ----------------------------------------------------------------------------------------

    def _scrape(self, keys: set[Key], listed: list[dict[str, Any]]) -> dict[Key, Verdict]:
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
                pods[key].append((str(meta["name"]), role, str(pod["status"]["podIP"])))
        targets = [(key, name, role, ip) for key, found in pods.items() for name, role, ip in found]
        port, timeout = self.settings.port, self.settings.timeout_seconds
        futures = [self._pool.submit(self._fetch, f"http://{ip}:{port}/metrics", timeout) for _, _, _, ip in targets]
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
        return {key: judge(answered[key], unreachable[key], spans[key], self.settings) for key in keys}

    # ---- asking Prometheus ----------------------------------------------------------------------------------------

    def _query_prometheus(self, keys: set[Key]) -> dict[Key, Verdict]:
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
            verdicts[key] = judge(windows, [], self.settings.window_seconds, self.settings)
        return verdicts

    def _query(self, promql: str) -> dict[str, float]:
        url = f"{self.settings.prometheus_url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
        return prometheus.per_pod(json.loads(self._fetch(url, self.settings.timeout_seconds)))
