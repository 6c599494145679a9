"""informer: the LIST/WATCH state machine against a scripted transport, the controller's owner routing and its
service informer (events, relists, wake-up after failures), and the reconcile guards against ghosts (tombstoned owners,
a 404 on the status write, denied namespaces). No cluster, no threads: each test drives `Informer.step` by hand.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from disaggspec import apply, metrics
from disaggspec import conditions as r
from disaggspec import constants as c
from disaggspec.config import OperatorConfig
from disaggspec.reconcile import Reconciler
from disaggspec.runtime import informer
from disaggspec.runtime.availability import ApiAvailability
from disaggspec.runtime.caches import ChildCache, DisaggSpecServiceCache, OwnerKey
from disaggspec.runtime.controller import Controller, ServiceEvents
from disaggspec.runtime.health import Health
from tests.unit.dss_cases import edited
from tests.unit.fakes import FakeClient

KIND = apply.DEPLOYMENT
NS = "team"


def _child(uid: str, owner: str, version: int, name: str | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name or f"{owner}-{uid}",
            "namespace": NS,
            "uid": uid,
            "resourceVersion": str(version),
            "labels": {c.LABEL_MANAGED_BY: c.MANAGED_BY},
            "ownerReferences": [{"apiVersion": c.API_VERSION, "kind": c.KIND, "name": owner, "controller": True}],
        },
        "spec": {"replicas": 1},
    }


def _event(type_: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"type": type_, "object": {"apiVersion": KIND.api_version, "kind": KIND.kind, **copy.deepcopy(obj)}}


def _gone() -> dict[str, Any]:
    return {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old resource version"}}


class FakeStream:
    """Scripted events; an Exception in the script is raised there; `during` runs after the first event."""

    def __init__(self, script: list[dict[str, Any] | Exception], during: Callable[[], None] | None = None) -> None:
        self.script = script
        self.during = during
        self.interrupted = False

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for index, item in enumerate(self.script):
            if self.interrupted:
                return
            if isinstance(item, Exception):
                raise item
            yield item
            if index == 0 and self.during is not None:
                self.during()

    def interrupt(self) -> None:
        self.interrupted = True


class FakeTransport:
    """An API server holding labelled children; LISTs page through them, WATCHes play what a test scripted."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.version = 100
        self.list_errors: deque[Exception] = deque()
        self.watches: deque[FakeStream | Exception] = deque()
        self.calls: list[tuple[str, dict[str, str]]] = []

    def store(self, obj: dict[str, Any]) -> None:
        self.objects[obj["metadata"]["uid"]] = obj
        self.version = max(self.version, int(obj["metadata"]["resourceVersion"]))

    def list(self, path: str, query: dict[str, str], accept: str = informer.JSON) -> dict[str, Any]:
        self.calls.append(("LIST", dict(query)))
        if self.list_errors:
            raise self.list_errors.popleft()
        ordered = sorted(self.objects.values(), key=lambda o: o["metadata"]["uid"])
        start = int(query.get("continue", "0"))
        limit = int(query["limit"])
        page = ordered[start : start + limit]
        items = [{"metadata": o["metadata"]} if accept == apply.METADATA_ONLY else copy.deepcopy(o) for o in page]
        meta: dict[str, Any] = {"resourceVersion": str(self.version)}
        if start + limit < len(ordered):
            meta["continue"] = str(start + limit)
        return {"metadata": meta, "items": items or None}

    def watch(self, path: str, query: dict[str, str], timeout: float) -> informer.WatchStream:
        self.calls.append(("WATCH", dict(query)))
        script = self.watches.popleft() if self.watches else FakeStream([])
        if isinstance(script, Exception):
            raise script
        return script


class Harness:
    def __init__(self, page: int = 100) -> None:
        self.transport = FakeTransport()
        self.cache = ChildCache()
        self.health = Health()
        self.requeued: list[set[OwnerKey]] = []
        self.recovered = 0
        self.delays: list[float] = []
        self.informer = informer.Informer(
            KIND,
            NS,
            self.transport,
            self.cache,
            self.requeued.append,
            on_recovered=self._recovered,
            health=self.health,
            availability=ApiAvailability(),
            page=page,
            settle=0,
            jitter=lambda: 0.0,
            sleep=self.delays.append,
        )

    def _recovered(self) -> None:
        self.recovered += 1

    def uids(self) -> set[str]:
        return set(self.cache.versions(KIND.kind, NS))

    def owners(self) -> set[OwnerKey]:
        return set().union(*self.requeued) if self.requeued else set()


def _restarts(reason: str) -> float:
    value = metrics.REGISTRY.get_sample_value("disaggspec_watch_restarts_total", {"kind": KIND.kind, "reason": reason})
    return value or 0.0


def _component_ok(harness: Harness) -> str:
    _, lines = harness.health.status()
    (line,) = [line for line in lines if line.startswith(harness.informer.component)]
    return line


# ---- LIST and WATCH ------------------------------------------------------------------------------------------------


def test_first_list_pages_with_the_selector_syncs_and_queues_nothing() -> None:
    harness = Harness(page=2)
    for index in range(5):
        harness.transport.store(_child(f"u{index}", "a", 10 + index))
    assert harness.informer.component == f"watch/deployments/{NS}"
    assert not harness.health.ready()[0]  # declared before its first report: readiness waits for it
    harness.informer.step()
    assert harness.informer.synced.is_set()
    assert harness.uids() == {f"u{index}" for index in range(5)}
    lists = [query for method, query in harness.transport.calls if method == "LIST"]
    assert len(lists) == 3 and all(q["labelSelector"] == informer.SELECTOR and q["limit"] == "2" for q in lists)
    assert harness.informer.resource_version == "100"
    assert harness.requeued == []  # every service is queued by its own initial listing
    assert harness.health.ready()[0]
    # Listed items come without kind; the cache hands them out with it (reconcile keys children by kind).
    assert {o["kind"] for o in harness.cache.children(NS, "a")} == {"Deployment"}


def test_watch_events_update_the_cache_and_queue_owners_and_resume_from_the_last_version() -> None:
    harness = Harness()
    harness.transport.store(_child("u1", "a", 10))
    harness.informer.step()
    harness.transport.watches.append(
        FakeStream(
            [
                _event("ADDED", _child("u2", "b", 101)),
                _event("MODIFIED", _child("u1", "a", 102)),
                _event("BOOKMARK", {"metadata": {"resourceVersion": "150"}}),
            ]
        )
    )
    harness.informer.step()
    assert harness.requeued == [{(NS, "b")}, {(NS, "a")}]
    assert harness.cache.versions(KIND.kind, NS) == {"u1": "102", "u2": "101"}
    watch = harness.transport.calls[-1][1]
    assert watch["resourceVersion"] == "100" and watch["allowWatchBookmarks"] == "true"
    assert watch["labelSelector"] == informer.SELECTOR and int(watch["timeoutSeconds"]) > 0
    # The server ended the watch (its timeout): the next one resumes from the bookmark, without a LIST.
    harness.informer.step()
    assert harness.transport.calls[-1] == ("WATCH", {**watch, "resourceVersion": "150"})


def test_gone_relists_and_drops_what_vanished_during_the_gap_and_queues_its_owner() -> None:
    harness = Harness()
    harness.transport.store(_child("keep", "a", 10))
    harness.transport.store(_child("lost", "b", 11))
    harness.informer.step()
    # While the watch was down: "lost" was deleted, "new" created; the watch then answers 410 Gone.
    del harness.transport.objects["lost"]
    harness.transport.store(_child("new", "c", 120))
    harness.transport.watches.append(FakeStream([_gone()]))
    before = _restarts("gone")
    harness.informer.step()  # the watch: 410
    assert _restarts("gone") == before + 1 and harness.uids() == {"keep", "lost"}
    harness.informer.step()  # the re-list: authoritative
    assert harness.uids() == {"keep", "new"}
    assert harness.requeued == [{(NS, "b"), (NS, "c")}]
    assert harness.cache.children(NS, "b") == []
    assert harness.informer.resource_version == "120"


def test_gone_as_the_watch_http_status_relists_too() -> None:
    harness = Harness()
    harness.informer.step()
    harness.transport.watches.append(apply.ApiError(410, "WATCH", "/x", "Expired"))
    harness.informer.step()
    lists = sum(1 for method, _ in harness.transport.calls if method == "LIST")
    harness.informer.step()
    assert sum(1 for method, _ in harness.transport.calls if method == "LIST") == lists + 1
    assert harness.delays == []  # not a failure: no backoff


def test_a_child_whose_label_is_removed_is_dropped_and_its_owner_queued() -> None:
    harness = Harness()
    harness.transport.store(_child("u1", "a", 10))
    harness.informer.step()
    # The API server sends DELETED when an object stops matching the watch's label selector.
    unlabelled = _child("u1", "a", 11)
    del unlabelled["metadata"]["labels"][c.LABEL_MANAGED_BY]
    harness.transport.watches.append(FakeStream([_event("DELETED", unlabelled)]))
    harness.informer.step()
    assert harness.requeued == [{(NS, "a")}]
    assert harness.cache.children(NS, "a") == []  # the pass GETs it and re-applies it, label included


def test_connection_errors_back_off_exponentially_up_to_the_cap_and_resume_the_watch() -> None:
    harness = Harness()
    harness.informer.backoff_cap = 4.0
    harness.transport.store(_child("u1", "a", 10))
    harness.informer.step()
    harness.transport.watches.extend(ConnectionError("connection refused") for _ in range(5))
    for _ in range(5):
        harness.informer.step()
    assert harness.delays == [0.5, 1.0, 2.0, 4.0, 4.0]
    assert harness.informer.failures == 5
    assert "failing" in _component_ok(harness) and "connection refused" in _component_ok(harness)
    harness.transport.watches.append(FakeStream([_event("MODIFIED", _child("u1", "a", 130))]))
    harness.informer.step()
    assert harness.recovered == 1 and harness.informer.failures == 0
    assert "failing" not in _component_ok(harness)
    watches = [query for method, query in harness.transport.calls if method == "WATCH"]
    assert {query["resourceVersion"] for query in watches} == {"100"}  # every retry resumed where it stopped
    assert sum(1 for method, _ in harness.transport.calls if method == "LIST") == 1
    assert harness.cache.versions(KIND.kind, NS) == {"u1": "130"}


def test_a_failed_first_list_is_retried_and_only_then_synced() -> None:
    harness = Harness()
    harness.transport.list_errors.append(ConnectionError("no route to host"))
    harness.informer.step()
    assert not harness.informer.synced.is_set() and harness.delays == [0.5]
    harness.informer.step()
    assert harness.informer.synced.is_set() and harness.recovered == 1


def test_an_error_event_other_than_gone_backs_off_and_resumes_without_a_list() -> None:
    harness = Harness()
    harness.informer.step()
    error = {"type": "ERROR", "object": {"kind": "Status", "code": 500, "message": "etcd leader changed"}}
    harness.transport.watches.append(FakeStream([error]))
    harness.informer.step()
    assert harness.delays == [0.5]
    harness.informer.step()
    assert [method for method, _ in harness.transport.calls] == ["LIST", "WATCH", "WATCH"]


def test_an_expired_continue_token_restarts_the_list() -> None:
    harness = Harness(page=1)
    harness.transport.store(_child("u1", "a", 10))
    harness.transport.store(_child("u2", "a", 11))
    real_list = harness.transport.list
    expired = [True]

    def list_(path: str, query: dict[str, str], accept: str = informer.JSON) -> dict[str, Any]:
        if "continue" in query and expired:
            expired.clear()
            raise apply.ApiError(410, "GET", path, "The provided continue parameter is too old")
        return real_list(path, query, accept)

    harness.transport.list = list_  # type: ignore[method-assign]
    before = _restarts("expired")
    harness.informer.step()
    assert _restarts("expired") == before + 1
    assert harness.uids() == {"u1", "u2"} and harness.delays == []


def test_verify_relists_only_on_a_lasting_difference() -> None:
    harness = Harness()
    harness.transport.store(_child("u1", "a", 10))
    harness.transport.store(_child("u2", "b", 11))
    harness.informer.step()
    assert harness.informer.verify()  # in sync: one metadata LIST, no relist
    metadata_lists = [q for m, q in harness.transport.calls if m == "LIST"]
    assert len(metadata_lists) == 2
    # A deletion the watch never delivered.
    del harness.transport.objects["u2"]
    assert not harness.informer.verify()
    harness.informer.step()
    assert harness.uids() == {"u1"} and harness.requeued == [{(NS, "b")}]


def test_a_relist_request_interrupts_the_watch_in_progress() -> None:
    harness = Harness()
    harness.informer.step()
    stream = FakeStream(
        [_event("ADDED", _child("u1", "a", 101)), _event("ADDED", _child("u2", "a", 102))],
        during=lambda: harness.informer.request_relist("verify"),
    )
    harness.transport.watches.append(stream)
    harness.informer.step()
    assert stream.interrupted and harness.uids() == {"u1"}  # stopped after the event in hand
    before = _restarts("verify")
    harness.informer.step()
    assert _restarts("verify") == before + 1
    assert harness.transport.calls[-1][0] == "LIST" and harness.uids() == set()  # the server never had them


def test_an_optional_kind_whose_api_is_not_served_is_synced_empty_healthy_and_rechecked() -> None:
    availability = ApiAvailability()
    transport = FakeTransport()
    cache, health, requeued, delays, recovered = ChildCache(), Health(), [], [], []
    lws = informer.Informer(
        apply.LEADER_WORKER_SET,
        NS,
        transport,
        cache,
        requeued.append,
        on_recovered=lambda: recovered.append(1),
        health=health,
        settle=0,
        jitter=lambda: 0.0,
        sleep=delays.append,
        availability=availability,
        absent_recheck=30.0,
    )
    missing = apply.ApiError(404, "GET", "/apis/leaderworkerset.x-k8s.io/v1", "the server could not find it")
    transport.list_errors.extend([missing, missing])
    lws.step()
    assert lws.synced.is_set() and health.ready()[0]
    assert availability.absent(c.LWS_API_VERSION, c.LWS_KIND)
    assert delays == [30.0] and lws.failures == 0  # not an error: no backoff, no failure count
    lws.step()
    assert delays == [30.0, 30.0] and [m for m, _ in transport.calls] == ["LIST", "LIST"]
    transport.store(_child("u1", "a", 101))  # the CRD is installed, and a LeaderWorkerSet exists
    lws.step()
    assert not availability.absent(c.LWS_API_VERSION, c.LWS_KIND)
    assert set(cache.versions(c.LWS_KIND, NS)) == {"u1"} and recovered == [1]
    assert lws.verify()  # listed and in sync


def test_a_required_kind_answering_404_is_a_failure_with_backoff() -> None:
    harness = Harness()
    harness.transport.list_errors.append(apply.ApiError(404, "GET", "/apis/apps/v1", "not found"))
    harness.informer.step()
    assert not harness.informer.synced.is_set() and harness.informer.failures == 1


def test_stop_ends_run() -> None:
    harness = Harness()
    harness.transport.watches.append(FakeStream([], during=None))
    harness.informer.stop()
    harness.informer.run()  # returns at once
    assert harness.transport.calls == []


def test_informers_cover_every_owned_kind_in_every_namespace() -> None:
    made = informer.informers(
        FakeTransport(), ChildCache(), ("x", "y"), lambda owners: None, health=Health(), availability=ApiAvailability()
    )
    assert {(i.kind.kind, i.namespace) for i in made} == {
        (kind.kind, ns) for kind in apply.OWNED_KINDS for ns in ("x", "y")
    }
    made = informer.informers(FakeTransport(), ChildCache(), (), print, health=Health(), availability=ApiAvailability())
    (cluster_wide,) = [i for i in made if i.kind == KIND]
    assert cluster_wide.namespace is None and cluster_wide.component == "watch/deployments"


def test_client_transport_streams_a_watch_line_by_line() -> None:
    class Raw:
        closed = False

        def stream(self, amt: int | None = None, decode_content: bool = True) -> Iterator[bytes]:
            yield b'{"type":"ADDED","object":{"metadata":{"uid":"a"}}}\n{"type":"MOD'
            yield b'IFIED","object":{"metadata":{"uid":"a"}}}\n\n'

        def close(self) -> None:
            self.closed = True

        def release_conn(self) -> None:
            pass

    raw = Raw()
    events = list(informer._HttpStream(raw))
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED"] and raw.closed


# ---- the controller: owner routing, service events, service verification --------------------------------------------


class RecordingQueue:
    def __init__(self) -> None:
        self.added: list[Hashable] = []
        self.resets = 0

    def add(self, key: Hashable) -> None:
        self.added.append(key)

    def reset_backoff(self) -> None:
        self.resets += 1


@pytest.fixture
def runtime(monkeypatch: pytest.MonkeyPatch) -> tuple[Controller, RecordingQueue, FakeClient]:
    client = FakeClient()
    state = Controller(client, OperatorConfig())
    state.reconciler = Reconciler(client, OperatorConfig(), client.post_event, services=state.services)
    queue = RecordingQueue()
    monkeypatch.setattr(state, "queue", queue)
    return state, queue, client


def _service(name: str, version: int, uid: str = "s-1") -> dict[str, Any]:
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "metadata": {"namespace": NS, "name": name, "uid": uid, "resourceVersion": str(version)},
        "spec": {},
    }


def _service_informer(state: Controller, transport: FakeTransport) -> informer.Informer:
    """The controller's DisaggSpecService informer over a scripted transport (driven by hand: no threads)."""
    (made,) = informer.service_informers(
        transport,
        ServiceEvents(state),
        (NS,),
        state.queue_services,
        health=state.health,
        availability=state.availability,
    )
    made._sleep = lambda seconds: None
    return made


def _service_watch(*events: tuple[str, dict[str, Any]]) -> FakeStream:
    return FakeStream([{"type": type_, "object": copy.deepcopy(obj)} for type_, obj in events])


def test_the_service_informer_queues_every_listed_service_then_only_what_is_newer_than_the_cache(
    runtime: tuple[Controller, RecordingQueue, FakeClient],
) -> None:
    state, queue, _ = runtime
    transport = FakeTransport()
    transport.store(_service("a", 5))
    transport.store(_service("b", 6, uid="s-2"))
    watch = _service_informer(state, transport)
    assert watch.component == f"watch/disaggspecservices/{NS}"
    watch.step()  # the first LIST is the resume: every service is queued
    assert sorted(queue.added) == [(NS, "a"), (NS, "b")]
    assert transport.calls[0][1]["labelSelector"] == ""  # every service, not only labelled ones
    queue.added.clear()
    state.services.put(_service("a", 7))  # the response of the operator's own status patch
    transport.watches.append(
        _service_watch(
            ("MODIFIED", _service("a", 7)), ("MODIFIED", _service("a", 8)), ("DELETED", _service("b", 9, uid="s-2"))
        )
    )
    watch.step()
    assert queue.added == [(NS, "a")]  # the echo of the status write queued nothing; the user's edit did
    assert state.services.get(NS, "b") is None and state.services.tombstoned("s-2")
    state.services.put(_service("b", 10, uid="s-2"))  # a status-patch response arriving after the DELETED event
    assert state.services.get(NS, "b") is None


def test_a_service_relist_evicts_ghosts_keeps_what_is_newer_than_the_list_and_queues_what_the_cache_lacks(
    runtime: tuple[Controller, RecordingQueue, FakeClient],
) -> None:
    state, queue, _ = runtime
    transport = FakeTransport()
    transport.store(_service("listed", 20, uid="s-listed"))
    watch = _service_informer(state, transport)
    watch.step()
    state.services.put(_service("ghost", 10, uid="s-ghost"))  # deleted while the watch was down
    state.services.put(_service("fresh", 60, uid="s-fresh"))  # written after the list's snapshot
    transport.store(_service("uncached", 21, uid="s-uncached"))
    queue.added.clear()
    watch.request_relist("verify")
    watch.step()
    assert state.services.keys() == [(NS, "fresh"), (NS, "listed"), (NS, "uncached")]
    assert state.services.tombstoned("s-ghost") and not state.services.tombstoned("s-fresh")
    assert queue.added == [(NS, "uncached")]


def test_a_service_informer_failure_is_unhealthy_and_the_first_informer_through_wakes_the_others(
    runtime: tuple[Controller, RecordingQueue, FakeClient],
) -> None:
    state, queue, _ = runtime
    transport = FakeTransport()
    watch = _service_informer(state, transport)
    watch.step()
    transport.watches.append(ConnectionError("connection refused"))
    watch.step()
    _, lines = state.health.status()
    assert any(line.startswith(watch.component) and "connection refused" in line for line in lines)
    # A real backoff sleep, cut short by `wake` (what `Controller.recovered` calls on every informer).
    sleeper = informer.Informer(
        apply.DEPLOYMENT, NS, FakeTransport(), ChildCache(), print, health=Health(), availability=ApiAvailability()
    )
    sleeper.failures = 3
    started = time.monotonic()
    napping = threading.Thread(target=sleeper._sleep, args=(30.0,))
    napping.start()
    sleeper.wake()
    napping.join(timeout=5)
    assert not napping.is_alive() and time.monotonic() - started < 5
    state.informers = [sleeper]
    sleeper.failures = 2
    napping = threading.Thread(target=sleeper._sleep, args=(30.0,))
    napping.start()
    state.recovered()
    napping.join(timeout=5)
    assert not napping.is_alive() and queue.resets == 1


# ---- reconcile: no children for a dead owner, a 404 on the status write, denied namespaces ---------------------------


def _manifest(namespace: str = NS) -> dict[str, Any]:
    obj = edited({})
    obj["metadata"]["namespace"] = namespace
    return obj


def _reconciler(client: FakeClient, services: DisaggSpecServiceCache, **config: Any) -> Reconciler:
    ticks = itertools.count(1)
    return Reconciler(
        client, OperatorConfig(**config), client.post_event, services=services, clock=lambda: f"T{next(ticks)}"
    )


def test_a_pass_for_a_tombstoned_owner_creates_nothing() -> None:
    client = FakeClient()
    created = client.create(_manifest())
    services = DisaggSpecServiceCache()
    services.put(created)
    services.delete(created)
    _reconciler(client, services).reconcile(NS, created["metadata"]["name"], client.children)
    assert client.writes == []  # the GET found it (a lagging read): its uid is dead all the same


class GoneOnStatus(FakeClient):
    def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        raise apply.ApiError(404, "PATCH", f"{namespace}/{name}/status", "not found")


def test_a_404_on_the_status_write_tombstones_the_service_without_an_error() -> None:
    client = GoneOnStatus()
    created = client.create(_manifest())
    services = DisaggSpecServiceCache()
    services.put(created)
    name = created["metadata"]["name"]
    _reconciler(client, services).reconcile(NS, name, client.children)  # no exception
    assert services.get(NS, name) is None and services.tombstoned(created["metadata"]["uid"])
    assert not services.put(created)  # a late event cannot revive it
    assert client.events == []


def test_a_service_in_a_denied_namespace_gets_no_children_and_says_why() -> None:
    client = FakeClient()
    created = client.create(_manifest("kube-system"))
    name = created["metadata"]["name"]
    reconciler = _reconciler(client, DisaggSpecServiceCache(), denied_namespaces=("kube-system",))
    reconciler.reconcile("kube-system", name, client.children)
    reconciler.reconcile("kube-system", name, client.children)
    assert client.children("kube-system", name) == []
    status_path = f"{apply.DSS_RESOURCE.item('kube-system', name)}/status"
    assert client.writes == [("PATCH", status_path)]  # the status, once
    conditions = {cond["type"]: cond for cond in client.service("kube-system", name)["status"]["conditions"]}
    ready = conditions[c.CONDITION_READY]
    assert (ready["status"], ready["reason"]) == ("False", r.READY_NAMESPACE_DENIED.reason)
    assert "kube-system" in ready["message"] and "deniedNamespaces" in ready["message"]
    assert conditions[c.CONDITION_PROGRESSING]["reason"] == r.PROGRESSING_NAMESPACE_DENIED.reason
    assert [(e.type, e.reason) for e in client.events] == [("Warning", r.EVENT_NAMESPACE_DENIED.reason)]


def test_a_ghost_in_the_cache_gets_no_children_and_is_evicted() -> None:
    client = FakeClient()
    created = client.create(_manifest())
    name = created["metadata"]["name"]
    services = DisaggSpecServiceCache()
    reconciler = _reconciler(client, services)
    reconciler.reconcile(NS, name, client.children)  # converged: children and status exist
    assert services.get(NS, name) is not None
    # Deleted while the operator was cut off: kopf's re-list never says so; the garbage collector took the children.
    del client.objects[apply.DSS_RESOURCE.item(NS, name)]
    for child in client.children(NS, name):
        client.delete(child)
    client.reset()
    reconciler.reconcile(NS, name, lambda namespace, name: [])  # the informer's re-list dropped the children
    assert client.writes == [] and client.requests[-1] == ("GET", apply.DSS_RESOURCE.item(NS, name))
    assert services.get(NS, name) is None and services.tombstoned(created["metadata"]["uid"])


def test_a_cached_service_replaced_by_a_new_object_of_its_name_reconciles_the_new_one() -> None:
    client = FakeClient()
    old = client.create(_manifest())
    name = old["metadata"]["name"]
    services = DisaggSpecServiceCache()
    services.put(old)
    new = client.create(_manifest())  # deleted and created again while the watch was cut off
    _reconciler(client, services).reconcile(NS, name, client.children)
    assert services.tombstoned(old["metadata"]["uid"])
    owners = {o["metadata"]["ownerReferences"][0]["uid"] for o in client.children(NS, name)}
    assert owners == {new["metadata"]["uid"]}


# ---- ClientTransport over real HTTP (a local server playing the API server) -----------------------------------------


class _WatchServer(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        if "watch=true" not in self.path:
            self._json(200, {"metadata": {"resourceVersion": "5"}, "items": []})
        elif "resourceVersion=1&" in self.path:
            self._json(410, {"kind": "Status", "code": 410, "message": "too old resource version"})
        else:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for index in range(2):
                event = {"type": "ADDED", "object": {"metadata": {"uid": f"u{index}", "resourceVersion": "9"}}}
                line = (json.dumps(event) + "\n").encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
            time.sleep(10)  # an idle watch: only an interrupt ends it early

    def _json(self, code: int, payload: dict[str, Any]) -> None:
        body = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


def test_client_transport_lists_watches_and_is_interrupted_from_another_thread() -> None:
    from kubernetes import client as k8s

    server = ThreadingHTTPServer(("127.0.0.1", 0), _WatchServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        configuration = k8s.Configuration(host=f"http://127.0.0.1:{server.server_port}")
        transport = informer.ClientTransport(apply.Client(k8s.ApiClient(configuration)))
        assert transport.list("/api/v1/services", {"limit": "1"})["metadata"]["resourceVersion"] == "5"
        with pytest.raises(apply.ApiError) as gone:
            transport.watch("/api/v1/services", {"watch": "true", "resourceVersion": "1", "x": "y"}, 5)
        assert gone.value.status == 410
        stream = transport.watch("/api/v1/services", {"watch": "true", "resourceVersion": "5"}, 30)
        seen: list[str] = []

        def read() -> None:
            with contextlib.suppress(Exception):  # an interrupted read may raise: the informer expects either
                for event in stream:
                    seen.append(event["object"]["metadata"]["uid"])

        reader = threading.Thread(target=read)
        reader.start()
        deadline = time.monotonic() + 5
        while len(seen) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        stream.interrupt()
        reader.join(timeout=5)
        assert not reader.is_alive() and seen == ["u0", "u1"]
    finally:
        server.shutdown()
        server.server_close()
