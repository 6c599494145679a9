"""The operator's own informers for the kinds it owns and for DisaggSpecServices: paged LIST, then WATCH from the
list's resourceVersion.

They only read the API (LIST, WATCH); the `Controller` owns them, with the `Store`s they fill (the `ChildCache`, and
the service events), the `Health` they report to and the `ApiAvailability` they record. One `Informer` per owned kind
(`apply.OWNED_KINDS`) and watched namespace (or one cluster-wide) keeps the `ChildCache` equal to what the API server
holds, and tells the caller which owning services to re-queue; one more per namespace watches the services
themselves (`service_informers`), so every watch the operator depends on backs off, recovers and reports to
/healthz the same way:

- LIST, in pages of `PAGE` with a server-side label selector (only the operator's children ever reach it), is
  authoritative: `ChildCache.replace` drops what the cache holds of that kind and scope but the list lacks (what
  was deleted while nobody watched, as client-go's informers do with DeletedFinalStateUnknown). The first list is the
  start-up sync; `synced` is set after it.
- WATCH from the list's resourceVersion, with bookmarks and a server-side timeout, applies each event. A DELETED
  event also arrives when an object stops matching the selector (its managed-by label removed by hand): the child
  leaves the cache, its owner is re-queued, and the pass re-applies it with its label.
- 410 Gone (as the watch's HTTP status or as an ERROR event), or an expired continue token while listing: list
  again. Any other failure: retry with capped exponential backoff, resuming the watch from the last resourceVersion
  seen; the first informer through after a failure wakes the others (`wake`). Each informer reports to its `Health`
  as `watch/<plural>[/<namespace>]`; restarts are counted in `metrics.WATCH_RESTARTS`.
- `verify` (called on the resync period) compares a metadata-only LIST with the cache by uid and resourceVersion;
  a difference that persists past a short settle time makes the informer list again.

Events are parsed once, from the HTTP stream, and packed into the cache: no per-event handler machinery. The HTTP
layer sits behind `Transport`, so tests drive the state machine without a cluster; `ClientTransport` uses the
`kubernetes` ApiClient that `apply.Client` holds (this module never imports the client library itself).
"""

from __future__ import annotations

import json
import logging
import random
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol
from urllib.parse import urlencode

from disaggspec import apply, metrics
from disaggspec import constants as c
from disaggspec.runtime.availability import ApiAvailability
from disaggspec.runtime.caches import OwnerKey
from disaggspec.runtime.health import Health

log = logging.getLogger("disaggspec.informer")

SELECTOR = f"{c.LABEL_MANAGED_BY}={c.MANAGED_BY}"
"""Server-side label selector of every child LIST and WATCH."""
PAGE = 100
"""Objects per LIST page."""
WATCH_TIMEOUT_SECONDS = 300
"""Server-side timeout of one WATCH request (the server ends it cleanly; the informer watches again)."""
CONNECT_TIMEOUT_SECONDS = 10.0
READ_SLACK_SECONDS = 30.0
"""A WATCH read times out this long after the server should have ended it: a dead connection is noticed."""
BACKOFF_BASE_SECONDS = 0.5
BACKOFF_CAP_SECONDS = 5.0
"""Short: a long outage must not leave the informers waiting out a long backoff once the API server is back (and an
informer that gets through wakes the others, `Informer.wake`); one LIST or WATCH per informer every 5 s is no load."""
VERIFY_SETTLE_SECONDS = 2.0
"""A difference between the cache and a metadata LIST must still be there this much later (events in flight)."""
EXPIRED_LIST_RETRIES = 3
"""Consecutive 410s while listing (continue token expired) before it counts as a failure (with backoff)."""
ABSENT_RECHECK_SECONDS = 30.0
"""How often the informer of an optional kind whose API is not served lists again (it may be installed later)."""

JSON = "application/json"


class Gone(Exception):
    """The watch's resourceVersion is too old (410 Gone): only a new LIST can resume."""


class WatchStream(Protocol):
    """The events of one WATCH request, as parsed JSON objects, until the server ends it."""

    def __iter__(self) -> Iterator[dict[str, Any]]: ...

    def interrupt(self) -> None:
        """End the stream from another thread (the reading thread's iteration stops or raises)."""


class Store(Protocol):
    """What an informer keeps equal to the API server: the `ChildCache` for children, the controller's service
    events (`runtime.controller.ServiceEvents`) for DisaggSpecServices. Each call returns the services to queue."""

    def put(self, obj: dict[str, Any]) -> set[OwnerKey]:
        """An object was added or changed."""
        ...

    def discard(self, obj: dict[str, Any]) -> set[OwnerKey]:
        """An object was deleted (or stopped matching the selector)."""
        ...

    def replace(self, kind_name: str, namespace_scope: str | None, objects: Iterable[dict[str, Any]]) -> set[OwnerKey]:
        """`objects` is a complete LIST of the kind in the scope (None: every namespace)."""
        ...

    def versions(self, kind_name: str, namespace_scope: str | None) -> dict[str, str]:
        """uid -> resourceVersion of what is held of the kind in the scope (for `Informer.verify`)."""
        ...


class Transport(Protocol):
    """The two requests an informer sends; errors: `apply.ApiError` for HTTP errors, anything else for the wire."""

    def list(self, path: str, query: dict[str, str], accept: str = JSON) -> dict[str, Any]: ...

    def watch(self, path: str, query: dict[str, str], timeout: float) -> WatchStream: ...


class _HttpStream:
    """A WATCH response body read line by line (one JSON event per line) from an unbuffered urllib3 response."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw

    def __iter__(self) -> Iterator[dict[str, Any]]:
        pending = b""
        try:
            for chunk in self._raw.stream(amt=None, decode_content=True):
                pending += chunk
                while (end := pending.find(b"\n")) >= 0:
                    line, pending = pending[:end], pending[end + 1 :]
                    if line.strip():
                        yield json.loads(line)
            if pending.strip():
                yield json.loads(pending)
        finally:
            self._raw.close()
            self._raw.release_conn()

    def interrupt(self) -> None:
        shutdown = getattr(self._raw, "shutdown", None)  # urllib3 >= 2.3: wakes a read blocked in another thread
        if shutdown is not None:
            shutdown()
        else:
            self._raw.close()


class ClientTransport:
    """`Transport` over the `kubernetes` ApiClient of an `apply.Client` (same credentials, same connection pool)."""

    def __init__(self, client: apply.Client) -> None:
        self.client = client

    def list(self, path: str, query: dict[str, str], accept: str = JSON) -> dict[str, Any]:
        return self.client.request("GET", path, query, accept=accept)

    def watch(self, path: str, query: dict[str, str], timeout: float) -> WatchStream:
        api = self.client.api
        full_path = f"{path}?{urlencode(query)}"
        method, url, headers, body, _ = api.param_serialize(
            "GET", full_path, header_params={"Accept": JSON}, auth_settings=["BearerToken"]
        )
        # The ApiClient never preloads: the body stays on the socket and is read as it arrives.
        response = api.call_api(
            method, url, header_params=headers, body=body, _request_timeout=(CONNECT_TIMEOUT_SECONDS, timeout)
        )
        if response.status >= 400:
            raw: bytes = response.read()  # type: ignore[no-untyped-call]
            try:
                message = str(json.loads(raw).get("message", raw[:300]))
            except ValueError:
                message = str(raw[:300])
            raise apply.ApiError(response.status, "WATCH", path, message)
        return _HttpStream(response.response)


def list_metadata(
    transport: Transport, path: str, selector: str | None = None, page: int = 500
) -> tuple[list[dict[str, Any]], str]:
    """Every object's metadata at `path` (paged, metadata-only LISTs) and the list's resourceVersion."""
    query = {"labelSelector": selector} if selector else {}
    items: list[dict[str, Any]] = []
    version = ""
    for response in apply.list_pages(lambda q: transport.list(path, q, accept=apply.METADATA_ONLY), query, page):
        items += [item.get("metadata") or {} for item in response.get("items") or ()]
        version = version or str((response.get("metadata") or {}).get("resourceVersion", ""))
    return items, version


def _status_code(obj: dict[str, Any]) -> int:
    try:
        return int(obj.get("code", 0))
    except (TypeError, ValueError):
        return 0


class Informer:
    """Keeps a `Store` (the `ChildCache`, or the service events) equal to the API server's objects of one kind in
    one namespace (or all)."""

    def __init__(
        self,
        kind: apply.Kind,
        namespace: str | None,
        transport: Transport,
        cache: Store,
        on_change: Callable[[set[OwnerKey]], None],
        *,
        health: Health,
        availability: ApiAvailability,
        on_recovered: Callable[[], None] = lambda: None,
        selector: str = SELECTOR,
        page: int = PAGE,
        watch_timeout: int = WATCH_TIMEOUT_SECONDS,
        backoff_base: float = BACKOFF_BASE_SECONDS,
        backoff_cap: float = BACKOFF_CAP_SECONDS,
        settle: float = VERIFY_SETTLE_SECONDS,
        jitter: Callable[[], float] = random.random,
        sleep: Callable[[float], object] | None = None,
        absent_recheck: float = ABSENT_RECHECK_SECONDS,
        report_first_list: bool = False,
    ) -> None:
        self.kind = kind
        self.namespace = namespace
        self.transport = transport
        self.cache = cache
        self.on_change = on_change
        """Called with the owners whose children changed (from the informer's thread)."""
        self.on_recovered = on_recovered
        """Called when a list or watch works again after failing (e.g. to cut the work queue's retry delays)."""
        self.health = health
        self.selector = selector
        self.page = page
        self.watch_timeout = watch_timeout
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.settle = settle
        self._jitter = jitter
        self.availability = availability
        self.absent_recheck = absent_recheck
        self.report_first_list = report_first_list
        """Hand the first LIST's changes to `on_change` too (the service informer: its first list queues every
        service; a child informer's first list is the start-up sync, and every service is queued anyway)."""
        self._stop = threading.Event()
        self._wake = threading.Event()
        """Set by `stop` and `wake`: cuts a backoff sleep short."""
        self._sleep: Callable[[float], object] = sleep if sleep is not None else self._nap
        self.component = f"watch/{kind.plural}" + (f"/{namespace}" if namespace else "")
        self.synced = threading.Event()
        """Set once the first LIST is in the cache."""
        self.resource_version = ""
        """Where the next WATCH resumes (the last list's, then each event's or bookmark's)."""
        self.failures = 0
        """Consecutive failed requests (the backoff exponent); 0 while things work."""
        self._need_list = True
        self._relist_reason: str | None = None
        self._stream: WatchStream | None = None
        self._guard = threading.Lock()
        self._thread: threading.Thread | None = None
        health.expect(self.component)

    # ---- lifecycle ---------------------------------------------------------------------------------------------

    def start(self) -> threading.Thread:
        self._thread = threading.Thread(target=self.run, name=f"informer-{self.component}", daemon=True)
        self._thread.start()
        return self._thread

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._interrupt()

    def wake(self) -> None:
        """Retry now if sleeping in a backoff (from any thread): another informer reached the API server again, so
        waiting out this one's backoff would only delay the recovery (after a long outage, by up to the cap)."""
        if self.failures:
            self._wake.set()

    def _nap(self, seconds: float) -> None:
        self._wake.wait(seconds)
        self._wake.clear()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def run(self) -> None:
        while not self._stop.is_set():
            self.step()

    def request_relist(self, reason: str) -> None:
        """List again as soon as possible (from any thread): the watch in progress is interrupted."""
        with self._guard:
            self._relist_reason = reason
        self._interrupt()

    # ---- one step of the state machine -------------------------------------------------------------------------

    def step(self) -> None:
        """One LIST (when needed) or one WATCH request, to its end; failures back off here."""
        try:
            with self._guard:
                reason, self._relist_reason = self._relist_reason, None
            if reason is not None:
                metrics.WATCH_RESTARTS.labels(self.kind.kind, reason).inc()
                self._need_list = True
            if self._need_list:
                self._list()
            else:
                self._watch()
        except Gone as gone:
            log.info("%s: %s: listing again", self.component, gone)
            metrics.WATCH_RESTARTS.labels(self.kind.kind, "gone").inc()
            self._need_list = True
        except Exception as error:
            if self._stop.is_set():
                return
            if isinstance(error, apply.ApiError) and error.status == 404 and self.kind.optional:
                self._need_list = True  # the CRD went away under the watch: the next LIST finds out and says so
            self.failures += 1
            delay = self._delay()
            log.warning("%s failed (%d in a row), retrying in %.1fs: %s", self.component, self.failures, delay, error)
            metrics.WATCH_RESTARTS.labels(self.kind.kind, "error").inc()
            self.health.report(self.component, False, f"{type(error).__name__}: {error}")
            self._sleep(delay)

    def _delay(self) -> float:
        exponent = min(self.failures - 1, 30)
        delay: float = min(self.backoff_cap, self.backoff_base * 2.0**exponent)
        return delay * (1.0 - 0.2 * self._jitter())

    def _working(self, detail: str) -> None:
        self.health.report(self.component, True, detail)
        if self.failures:
            self.failures = 0
            self.on_recovered()

    # ---- LIST --------------------------------------------------------------------------------------------------

    def _pages(self, versions: list[str]) -> Iterator[dict[str, Any]]:
        """Every object of the kind, page by page (each given `apiVersion` and `kind`, which list items lack)."""
        path = self.kind.collection(self.namespace)
        for response in apply.list_pages(
            lambda q: self.transport.list(path, q), {"labelSelector": self.selector}, self.page
        ):
            if not versions:
                versions.append(str((response.get("metadata") or {}).get("resourceVersion", "")))
            for item in response.get("items") or ():
                item.setdefault("apiVersion", self.kind.api_version)
                item.setdefault("kind", self.kind.kind)
                yield item

    def _absent(self) -> None:
        """The API of an optional kind is not served: nothing of it exists (the cache holds none), the informer is
        synced and healthy, and it lists again after `absent_recheck` (the CRD may be installed later)."""
        changed = self.cache.replace(self.kind.kind, self.namespace, ())
        if self.availability.mark(self.kind, present=False):
            log.info("%s: %s is not served by the API server", self.component, self.kind.api_version)
        first = not self.synced.is_set()
        self.synced.set()
        self._working(f"{self.kind.api_version} {self.kind.kind} is not installed")
        if changed and (self.report_first_list or not first):
            self.on_change(changed)
        self._sleep(self.absent_recheck)

    def _list(self) -> None:
        for attempt in range(EXPIRED_LIST_RETRIES + 1):
            versions: list[str] = []
            try:
                changed = self.cache.replace(self.kind.kind, self.namespace, self._pages(versions))
            except apply.ApiError as error:
                if error.status == 404 and self.kind.optional:
                    self._absent()
                    return
                if error.status != 410 or attempt == EXPIRED_LIST_RETRIES:
                    raise
                # The continue token expired (the list took longer than the server keeps its snapshot): start over.
                metrics.WATCH_RESTARTS.labels(self.kind.kind, "expired").inc()
                continue
            self.resource_version = versions[0] if versions else ""
            self._need_list = False
            if self.kind.optional and self.availability.mark(self.kind, present=True):
                log.info("%s: %s is served now", self.component, self.kind.api_version)
                self.on_recovered()
            first = not self.synced.is_set()
            self.synced.set()
            self._working(f"listed at resourceVersion {self.resource_version}")
            if changed and (self.report_first_list or not first):
                self.on_change(changed)
            return

    # ---- WATCH -------------------------------------------------------------------------------------------------

    def _watch(self) -> None:
        query = {
            "watch": "true",
            "labelSelector": self.selector,
            "resourceVersion": self.resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(self.watch_timeout),
        }
        try:
            stream = self.transport.watch(
                self.kind.collection(self.namespace), query, self.watch_timeout + READ_SLACK_SECONDS
            )
        except apply.ApiError as error:
            if error.status == 410:
                raise Gone(str(error)) from None
            raise
        with self._guard:
            if self._relist_reason is not None or self._stop.is_set():
                stream.interrupt()
            self._stream = stream
        self._working(f"watching from resourceVersion {self.resource_version}")
        try:
            for event in stream:
                self._event(event)
                if self._relist_reason is not None or self._stop.is_set():
                    break
        except Exception:
            if self._relist_reason is not None or self._stop.is_set():
                return  # interrupted on purpose
            raise
        finally:
            with self._guard:
                self._stream = None
        if self._relist_reason is None and not self._stop.is_set():
            metrics.WATCH_RESTARTS.labels(self.kind.kind, "timeout").inc()

    def _event(self, event: dict[str, Any]) -> None:
        type_ = event.get("type")
        obj = event.get("object") or {}
        if type_ == "ERROR":
            code = _status_code(obj)
            if code == 410:
                raise Gone(str(obj.get("message", "resourceVersion too old")))
            raise apply.ApiError(code, "WATCH", self.kind.collection(self.namespace), str(obj.get("message", obj)))
        meta = obj.get("metadata") or {}
        version = meta.get("resourceVersion")
        if type_ == "BOOKMARK":
            if version:
                self.resource_version = str(version)
            return
        if type_ not in ("ADDED", "MODIFIED", "DELETED") or not meta.get("uid"):
            log.debug("%s: ignoring event %s", self.component, type_)
            return
        obj.setdefault("apiVersion", self.kind.api_version)
        obj.setdefault("kind", self.kind.kind)
        # DELETED: deleted, or no longer matching the selector (a label removed by hand): the pass puts it back.
        changed = self.cache.discard(obj) if type_ == "DELETED" else self.cache.put(obj)
        if version:
            self.resource_version = str(version)
        if changed:
            self.on_change(changed)

    def _interrupt(self) -> None:
        with self._guard:
            stream = self._stream
        if stream is not None:
            try:
                stream.interrupt()
            except Exception as error:  # already closed
                log.debug("%s: interrupting the watch: %s", self.component, error)

    # ---- periodic verification ---------------------------------------------------------------------------------

    def _difference(self) -> set[str]:
        """uids whose listed resourceVersion differs from the cached one (either side missing included)."""
        items, _ = list_metadata(self.transport, self.kind.collection(self.namespace), self.selector, self.page)
        listed = {str(meta.get("uid")): str(meta.get("resourceVersion", "")) for meta in items}
        cached = self.cache.versions(self.kind.kind, self.namespace)
        return {uid for uid in listed.keys() | cached.keys() if listed.get(uid) != cached.get(uid)}

    def verify(self) -> bool:
        """Compare the cache with a metadata-only LIST; on a lasting difference, list again. True when in sync.

        Raises what the LIST raises (the caller logs it; the next period tries again).
        """
        if not self.synced.is_set() or self._need_list:
            return True  # a full list is due anyway (also while an optional kind's API is not served)
        first = self._difference()
        if not first:
            return True
        if self.settle > 0:
            self._stop.wait(self.settle)
        lasting = first & self._difference()
        if not lasting:
            return True
        log.warning("%s: cache differs from the API server for %d objects: listing again", self.component, len(lasting))
        self.request_relist("verify")
        return False


def informers(
    transport: Transport,
    cache: Store,
    namespaces: Iterable[str],
    on_change: Callable[[set[OwnerKey]], None],
    *,
    health: Health,
    availability: ApiAvailability,
    on_recovered: Callable[[], None] = lambda: None,
    kinds: Iterable[apply.Kind] = apply.OWNED_KINDS,
    selector: str = SELECTOR,
    report_first_list: bool = False,
) -> list[Informer]:
    """One informer per kind and namespace (one cluster-wide per kind when `namespaces` is empty); by default the
    owned kinds' informers, filling the `ChildCache`."""
    scopes: tuple[str | None, ...] = tuple(namespaces) or (None,)
    return [
        Informer(
            kind,
            namespace,
            transport,
            cache,
            on_change,
            health=health,
            availability=availability,
            on_recovered=on_recovered,
            selector=selector,
            report_first_list=report_first_list,
        )
        for kind in kinds
        for namespace in scopes
    ]


def service_informers(
    transport: Transport,
    store: Store,
    namespaces: Iterable[str],
    on_change: Callable[[set[OwnerKey]], None],
    *,
    health: Health,
    availability: ApiAvailability,
    on_recovered: Callable[[], None] = lambda: None,
) -> list[Informer]:
    """The DisaggSpecService watch: one informer per namespace (or one cluster-wide), every service (no selector),
    its first LIST queueing every service (the resume after a restart)."""
    return informers(
        transport,
        store,
        namespaces,
        on_change,
        health=health,
        availability=availability,
        on_recovered=on_recovered,
        kinds=(apply.DSS_RESOURCE,),
        selector="",
        report_first_list=True,
    )
