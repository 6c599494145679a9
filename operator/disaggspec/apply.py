"""The Kubernetes client, and the writes of a pass: server-side apply of children, pruning, the status patch, Events.

The one module that imports the `kubernetes` client library: every API request of the operator goes through
`Client.request`. What writes through it: this module (children, status, Events, for `reconcile`), `runtime.leader`
(its Lease) and `runtime.webhook_config` (the ValidatingWebhookConfiguration); the informers and the controller only
read (`list_pages`: the one paged-LIST loop).

Children are applied with one field manager and `force=true` (the operator owns every field it renders), each with
a controller owner reference to its DisaggSpecService so deleting the service garbage-collects them. A child is
written only when `drift.needs_apply` says the live object differs, so a resync of unchanged services sends no
write; children are applied in dependency waves (`APPLY_WAVES`: a RoleBinding only once its Role exists). Children
that carry our labels but are no longer rendered are pruned (deleted with a UID precondition, so a recreated object
of the same name is never removed by mistake). Requests go through the `kubernetes` client's `ApiClient`, which
handles every kubeconfig and in-cluster credential form; paths come from a fixed kind table, so no discovery round
trip is needed. A refused request raises `ApiError`, which carries the server's `Retry-After` (429, 503) so the work
queue waits as long as the server asked, and the Status' reason and causes.

Never half-apply: `dry_run` server-side applies a set of children with `dryRun=All` (same field manager, same force)
and collects every refusal (`childrefusal.Refusal`) instead of stopping at the first, so a pass can find out that the
API server would refuse a child before it writes any. What a dry-run cannot see (a ResourceQuota is checked per
request against current usage, so three Deployments each pass a dry-run against a quota of two) is caught by `sync`
itself: when a write is refused, the children this pass created are deleted again and `ChildrenRefused` is raised.

A child refused only because of what another field manager changed in it (its render alone is valid; the merge with
a hand-edited port or one-of field is not) does not stop the pass: `repair_refused` removes the conflicting foreign
fields with one guarded JSON patch (`childrepair` decides which, and why this and not a recreate) and the pass goes
on with every child.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import email.utils
import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from kubernetes import client as k8s

from disaggspec import childrepair, metrics
from disaggspec import constants as c
from disaggspec.childrefusal import Cause, Refusal, is_refusal
from disaggspec.drift import needs_apply, with_applied_hash


@dataclass(frozen=True)
class Kind:
    """A namespaced kind the operator owns, and where its REST collection lives."""

    api_version: str
    kind: str
    plural: str
    optional: bool = False
    """An API a cluster may lack (a CRD another project installs): its absence is a state to report, not an error."""

    def collection(self, namespace: str | None) -> str:
        """The REST collection in `namespace`, or across all namespaces when None."""
        prefix = "/api" if "/" not in self.api_version else "/apis"
        where = f"/namespaces/{namespace}" if namespace is not None else ""
        return f"{prefix}/{self.api_version}{where}/{self.plural}"

    def item(self, namespace: str, name: str) -> str:
        """The REST path of one object."""
        return f"{self.collection(namespace)}/{name}"


SERVICE_ACCOUNT = Kind("v1", "ServiceAccount", "serviceaccounts")
ROLE = Kind("rbac.authorization.k8s.io/v1", "Role", "roles")
ROLE_BINDING = Kind("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings")
SERVICE = Kind("v1", "Service", "services")
DEPLOYMENT = Kind("apps/v1", "Deployment", "deployments")
POD_DISRUPTION_BUDGET = Kind("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets")
JOB = Kind("batch/v1", "Job", "jobs")
LEADER_WORKER_SET = Kind(c.LWS_API_VERSION, c.LWS_KIND, "leaderworkersets", optional=True)
"""Multi-node pools (`spec.<pool>.nodesPerInstance` > 1); the LeaderWorkerSet CRD and controller are a prerequisite."""
SCALE_TARGET = Kind(c.API_VERSION, c.POOL_KIND, c.POOL_PLURAL)
"""The per-pool scale targets of spec.autoscaling (`scaletargets`): created once and never applied (only read and
their status written), so the pass keeps them out of `sync`'s writes; pruned like any child once not wanted."""
# Every kind the operator owns, watches and prunes (all rendered and applied, but the scale targets).
OWNED_KINDS: tuple[Kind, ...] = (
    SERVICE_ACCOUNT,
    ROLE,
    ROLE_BINDING,
    SERVICE,
    POD_DISRUPTION_BUDGET,
    DEPLOYMENT,
    JOB,
    LEADER_WORKER_SET,
    SCALE_TARGET,
)
KINDS_BY_NAME = {(k.api_version, k.kind): k for k in OWNED_KINDS}
DSS_RESOURCE = Kind(c.API_VERSION, c.KIND, c.PLURAL)
"""The DisaggSpecService custom resource (not a core `SERVICE`)."""
EVENT = Kind("v1", "Event", "events")


log = logging.getLogger("disaggspec.apply")

RETRY_AFTER_STATUSES = (429, 503)
"""Responses whose `Retry-After` header the operator honours (too many requests; unavailable, e.g. shutting down)."""


class ApiError(RuntimeError):
    """A request the operator needed was refused; carries the HTTP status and the server's message."""

    def __init__(
        self,
        status: int,
        method: str,
        path: str,
        message: str,
        retry_after: float | None = None,
        reason: str = "",
        causes: tuple[Cause, ...] = (),
    ) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {message}")
        self.status = status
        self.retry_after = retry_after
        """Seconds the server asked the client to wait (`Retry-After` of a 429 or 503), else None."""
        self.message = message
        """The Status' message (or the start of the body)."""
        self.reason = reason
        """The Status' machine reason (Invalid, Forbidden, ...), empty when the body was no Status."""
        self.causes = causes
        """The Status' `details.causes`: which field and what is wrong with it."""

    @property
    def refused(self) -> bool:
        """The request itself is refused (invalid, or denied by admission): retrying it unchanged cannot help."""
        return is_refusal(self.status, self.message)


class ChildrenRefused(Exception):
    """The API server refuses one or more children of a pass; nothing of the pass is left applied."""

    def __init__(self, refusals: list[Refusal], rolled_back: list[str] | None = None) -> None:
        super().__init__("; ".join(f"{r.child}: HTTP {r.status}: {r.message}" for r in refusals))
        self.refusals = refusals
        self.rolled_back = rolled_back or []
        """Children the pass had created before the refusal and deleted again."""
        self.rolled_back_uids: set[str] = set()
        """Their uids: a watch-fed cache may still hold them for a moment."""


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a `Retry-After` header: delay-seconds or an HTTP-date; None when absent or unreadable."""
    if value is None or not value.strip():
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value.strip())
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:  # an HTTP-date is always GMT
            when = when.replace(tzinfo=datetime.UTC)
        seconds = when.timestamp() - (time.time() if now is None else now)
    if not math.isfinite(seconds):
        return None
    return max(seconds, 0.0)


@dataclass
class SyncResult:
    """What one `sync` pass did."""

    applied: list[str] = field(default_factory=list)
    pruned: list[str] = field(default_factory=list)
    rolled_back: list[str] = field(default_factory=list)
    """Children created by this pass and deleted again because another child was refused."""
    repaired: list[childrepair.Repair] = field(default_factory=list)
    """Children whose foreign fields this pass removed because their merged form was invalid (`repair_refused`)."""

    @property
    def changed(self) -> bool:
        return bool(self.applied or self.pruned)


def located(obj: dict[str, Any]) -> tuple[Kind, str]:
    """The owned kind of a manifest or live object, and its REST path."""
    kind = KINDS_BY_NAME[(obj["apiVersion"], obj["kind"])]
    return kind, kind.item(obj["metadata"]["namespace"], obj["metadata"]["name"])


def ref(obj: dict[str, Any]) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


def owner_reference(owner: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _error(status: int, headers: Any, method: str, path: str, raw: bytes) -> ApiError:
    """The ApiError of a refused request: the Status object's message (or the body's start, e.g. a proxy's page)."""
    message = raw[:300].decode(errors="replace")
    try:
        body = json.loads(raw) if raw else {}
    except ValueError:
        body = None
    reason, causes = "", tuple[Cause, ...]()
    if isinstance(body, dict) and "message" in body:
        message = str(body["message"])
        reason = str(body.get("reason") or "")
        details: dict[str, Any] = body["details"] if isinstance(body.get("details"), dict) else {}
        causes = tuple(
            Cause(str(cause.get("field") or ""), str(cause.get("message") or ""))
            for cause in details.get("causes") or []
            if isinstance(cause, dict)
        )
    retry_after = None
    if status in RETRY_AFTER_STATUSES and headers is not None:
        retry_after = parse_retry_after(headers.get("Retry-After"))
    return ApiError(status, method, path, message, retry_after, reason, causes)


def refusal(manifest: dict[str, Any], error: ApiError) -> Refusal:
    """The refusal of `manifest` that `error` reports."""
    return Refusal(
        manifest["kind"], manifest["metadata"]["name"], error.status, error.reason, error.message, error.causes
    )


class NotLeading(RuntimeError):
    """A fenced client refused a write: this replica does not lead (any more). Not an `ApiError`: nothing was sent,
    and no pass may report it as the API server's answer."""


class Client:
    """A thin JSON client over the `kubernetes` ApiClient for the operator's few kinds."""

    def __init__(self, api: k8s.ApiClient, may_write: Callable[[], bool] | None = None) -> None:
        self.api = api
        self.may_write = may_write
        """The write fence (None: unfenced): checked before every write, a dry-run excepted."""

    def fenced(self, may_write: Callable[[], bool]) -> Client:
        """A client on the same connection pool whose writes are refused (`NotLeading`) unless `may_write()` at that
        moment: the reconciler's, fenced by the leader elector's `is_leader`."""
        return Client(self.api, may_write)

    def request(
        self,
        method: str,
        path: str,
        query: dict[str, str] | None = None,
        body: Any = None,
        content_type: str = "",
        accept: str = "application/json",
    ) -> dict[str, Any]:
        writes = method != "GET" and not (query or {}).get("dryRun")  # a dry-run persists nothing: not a write
        if writes and self.may_write is not None and not self.may_write():
            raise NotLeading(f"{method} {path}: refused, this replica does not lead")
        headers = {"Accept": accept}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        full_path = path + ("?" + urlencode(query) if query else "")
        method_, url, headers_, body_, _ = self.api.param_serialize(
            method, full_path, header_params=headers, body=body, auth_settings=["BearerToken"]
        )
        response = self.api.call_api(method_, url, header_params=headers_, body=body_, _request_timeout=30)
        raw: bytes = response.read()  # type: ignore[no-untyped-call]
        if response.status >= 400:
            raise _error(response.status, response.headers, method, path, raw)
        payload: dict[str, Any] = json.loads(raw) if raw else {}
        if writes:
            metrics.API_WRITES.labels(method).inc()
        return payload

    def apply(self, manifest: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
        """Server-side apply `manifest` (force, the operator's field manager); with `dry_run`, persist nothing."""
        _, path = located(manifest)
        query = {"fieldManager": c.FIELD_MANAGER, "force": "true"}
        if dry_run:
            query["dryRun"] = "All"
        return self.request("PATCH", path, query, manifest, "application/apply-patch+yaml")

    def delete(self, obj: dict[str, Any]) -> None:
        _, path = located(obj)
        body = {"propagationPolicy": "Background", "preconditions": {"uid": obj["metadata"]["uid"]}}
        try:
            self.request("DELETE", path, body=body)
        except ApiError as error:
            if error.status not in (404, 409):  # already gone, or replaced by a newer object of the same name
                raise

    def post_event(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None:
        """Record a core/v1 Event about `obj` (best effort: a failed Event never fails a reconcile)."""
        meta = obj["metadata"]
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": obj.get("apiVersion", c.API_VERSION),
                "kind": obj.get("kind", c.KIND),
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": c.MANAGED_BY},
            "reportingComponent": c.MANAGED_BY,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self.request("POST", EVENT.collection(meta["namespace"]), body=event)
        except ApiError as error:
            log.warning("could not record event %s on %s/%s: %s", reason, meta["namespace"], meta["name"], error)

    def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        """Merge-patch the status subresource; returns the whole updated object."""
        path = f"{DSS_RESOURCE.item(namespace, name)}/status"
        return self.request("PATCH", path, body={"status": status}, content_type="application/merge-patch+json")


# Children are applied in dependency waves, in parallel within a wave: a pass costs one round trip of latency per
# wave that has something to write (apply -> all children measured p50 56-69 ms in one parallel batch, 103 ms in two
# waves), and a resync with no drift sends nothing at all. The order matters for RBAC: the API server lets a
# least-privilege ServiceAccount create a RoleBinding only when it already holds every permission the bound Role
# grants (the escalation check), so a RoleBinding applied before its Role is refused (403, or 404 for the missing
# Role), and each new service would flap to Degraded=True/ApplyFailed for a moment. Deployments go last too: their
# pods run as the ServiceAccount and are reached through the Services, and their PodDisruptionBudgets are in place
# before the first pod can be evicted. The model cache's fill Job goes first: the pool pods wait for what it writes.
APPLY_WAVES: tuple[tuple[Kind, ...], ...] = (
    (SERVICE_ACCOUNT, ROLE, SERVICE, POD_DISRUPTION_BUDGET, JOB),
    (ROLE_BINDING, DEPLOYMENT, LEADER_WORKER_SET),
)
_WAVE_OF = {(kind.api_version, kind.kind): index for index, wave in enumerate(APPLY_WAVES) for kind in wave}
_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="apply")
MAX_CONCURRENT_REQUESTS = 32
"""Upper bound of requests in flight at once: the apply pool's 16 threads, the reconcile workers, events, start-up."""


def _apply_wave(
    client: Client,
    manifests: list[dict[str, Any]],
    result: SyncResult,
    created: list[dict[str, Any]],
    known_uids: dict[str, str],
) -> None:
    """Apply `manifests` in parallel; record each success in `result` (and each object the apply created, i.e. whose
    uid is not the one `known_uids` holds for its ref, in `created`), then raise `ChildrenRefused` for every refused
    child, or else the first failure (if any)."""
    futures = [_POOL.submit(client.apply, manifest) for manifest in manifests]
    first: BaseException | None = None
    refusals: list[Refusal] = []
    for manifest, future in zip(manifests, futures, strict=True):
        error = future.exception()  # waits: every apply of the wave finishes before anything is raised
        if error is None:
            result.applied.append(ref(manifest))
            applied = future.result()
            # Judged by uid, not by the cache: a child the cache still holds may have been deleted meanwhile (by
            # the rollback of an earlier pass whose DELETE event has not arrived yet), and this apply created it.
            if applied.get("metadata", {}).get("uid") != known_uids.get(ref(manifest)):
                created.append(applied)
        elif isinstance(error, ApiError) and error.refused:
            refusals.append(refusal(manifest, error))
        elif first is None:
            first = error
    if refusals:
        raise ChildrenRefused(refusals)
    if first is not None:
        raise first


_NOT_DRY_RUN = {(ROLE_BINDING.api_version, ROLE_BINDING.kind)}
"""Kinds `sync` does not dry-run. A RoleBinding's dry-run fails while its Role does not exist yet (under a
least-privilege ServiceAccount the escalation check needs the Role: the reason `APPLY_WAVES` exists), and nothing of
the user's spec reaches it (names, subjects and role are the operator's), so only a quota could refuse it: the
rollback in `sync` covers that."""


def checkable(manifests: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The manifests a dry-run can judge (all but the kinds in `_NOT_DRY_RUN`)."""
    return [m for m in manifests if (m["apiVersion"], m["kind"]) not in _NOT_DRY_RUN]


def _roll_back(client: Client, created: list[dict[str, Any]], result: SyncResult) -> list[dict[str, Any]]:
    """Delete (UID precondition) the children a refused pass created; returns those deleted. Best effort: a failed
    delete is logged and left to the next pass, which finds the child live and the refusal again."""
    deleted: list[dict[str, Any]] = []
    for obj in created:
        obj.setdefault("metadata", {})
        try:
            client.delete(obj)
        except ApiError as error:
            log.warning("could not roll back %s after a refusal: %s", ref(obj), error)
            continue
        deleted.append(obj)
        result.rolled_back.append(ref(obj))
    return deleted


def prepare(
    owner: dict[str, Any], desired: Iterable[dict[str, Any]], live: Iterable[dict[str, Any]]
) -> tuple[list[dict[str, Any]], set[str]]:
    """The manifests a pass must write (stamped with the applied hash and the owner reference), and every wanted ref.

    Only children that differ from `live` (`drift.needs_apply`) are returned, so a steady-state pass has none.
    """
    live_by_ref = {ref(obj): obj for obj in live}
    wanted: set[str] = set()
    writes: list[dict[str, Any]] = []
    for manifest in desired:
        stamped = with_applied_hash(manifest)
        stamped["metadata"]["ownerReferences"] = [owner_reference(owner)]
        key = ref(stamped)
        wanted.add(key)
        if needs_apply(stamped, live_by_ref.get(key)):
            writes.append(stamped)
    return writes, wanted


def dry_run(client: Client, manifests: list[dict[str, Any]], timeout: float | None = None) -> list[Refusal]:
    """Server-side apply each manifest with `dryRun=All` (in parallel); every refusal, in the manifests' order.

    A transient failure (5xx, timeout, 429, an RBAC 403) is raised once every dry-run finished, unless another child
    is refused: the caller cannot tell whether the children would be accepted, and retries the pass as it would a
    failed write. With `timeout` (seconds), dry-runs still running by then raise `TimeoutError` (the webhook must
    answer within its own timeout; the requests finish in the background).
    """

    def attempt(manifest: dict[str, Any]) -> Refusal | None:
        try:
            client.apply(manifest, dry_run=True)
        except ApiError as error:
            if error.refused:
                return refusal(manifest, error)
            raise
        return None

    futures = [_POOL.submit(attempt, manifest) for manifest in manifests]
    _, pending = concurrent.futures.wait(futures, timeout=timeout)
    if pending:
        raise TimeoutError(f"{len(pending)} of {len(futures)} dry-runs took longer than {timeout}s")
    refusals: list[Refusal] = []
    first: BaseException | None = None
    for future in futures:
        error = future.exception()
        if error is not None:
            first = first or error
        elif (found := future.result()) is not None:
            refusals.append(found)
    if first is not None and not refusals:
        raise first
    return refusals


def render_alone_valid(client: Client, manifest: dict[str, Any]) -> bool:
    """Whether the API server accepts `manifest` by itself: a dry-run create answers AlreadyExists (409) only after
    validation and admission accepted the object, so 409 means the refusal of its apply comes from the merge with the
    live object. Any other refusal (the render itself is invalid, or a quota) means it does not; a transient failure
    is raised (the pass is retried)."""
    kind, _ = located(manifest)
    query = {"fieldManager": c.FIELD_MANAGER, "dryRun": "All"}
    try:
        client.request("POST", kind.collection(manifest["metadata"]["namespace"]), query, manifest)
    except ApiError as error:
        if error.status == 409:
            return True
        if error.refused:
            return False
        raise
    return False  # created: the live object is gone meanwhile, the next pass creates it


def repair_refused(
    client: Client, refusals: list[Refusal], writes: list[dict[str, Any]], live: Iterable[str], result: SyncResult
) -> list[Refusal]:
    """Repair each refused child whose render alone is valid but whose merge with fields of another field manager is
    not (`childrepair`): read it (with managedFields, which the caches drop), remove the conflicting foreign fields
    with one JSON patch that tests each removed value first and puts the operator's values back next to them
    (`childrepair.ROUNDS`: the fields the refusal points at, then every foreign field of its spec) and dry-run it
    again after each round. Returns the refusals that remain; each repair
    is recorded in `result.repaired`. A child that is still refused keeps whatever the rounds removed (foreign
    fields only: its operator-owned fields were never touched). `live` names the children that exist: a child to be
    created has nothing to merge with, so its refusal is the render's own."""
    by_ref = {ref(manifest): manifest for manifest in writes}
    existing = set(live)
    remaining: list[Refusal] = []
    for refused in refusals:
        manifest = by_ref.get(f"{refused.kind}/{refused.name}")
        if manifest is None or ref(manifest) not in existing or not render_alone_valid(client, manifest):
            remaining.append(refused)
            continue
        _, path = located(manifest)
        current: Refusal | None = refused
        for round_ in childrepair.ROUNDS:
            if current is None:
                break
            try:
                child = client.request("GET", path)
            except ApiError as error:
                if error.status == 404:
                    current = None  # deleted meanwhile: nothing to merge with, the apply creates it (render valid)
                    break
                raise
            repair = childrepair.decide(child, manifest, current, c.FIELD_MANAGER, round_)
            if repair is None:
                continue
            # A failed `test` (the child changed since it was read) is refused like an invalid request, but it is
            # no refusal of the child: raised as a conflict (transient), the pass is retried against the new object.
            try:
                client.request(
                    "PATCH",
                    path,
                    {"fieldManager": childrepair.REPAIR_FIELD_MANAGER},
                    list(repair.patch),
                    "application/json-patch+json",
                )
            except ApiError as error:
                raise ApiError(
                    error.status if error.status >= 500 else 409, "PATCH", path, f"repair: {error.message}"
                ) from error
            log.warning("repaired a foreign edit: %s", repair.message)
            result.repaired.append(repair)
            again = dry_run(client, [manifest])
            current = again[0] if again else None
        if current is not None:
            remaining.append(current)
    return remaining


def sync(
    client: Client,
    owner: dict[str, Any],
    desired: Iterable[dict[str, Any]],
    live: Iterable[dict[str, Any]],
    result: SyncResult | None = None,
    verify: bool = True,
    keep: Iterable[dict[str, Any]] = (),
) -> SyncResult:
    """Apply what differs from `live` (wave by wave), prune owned objects no longer desired; returns what it did.

    With `verify` (the default), the children to write are first dry-run (`dry_run`); if any would be refused,
    `ChildrenRefused` is raised before anything is written or pruned. A steady-state pass has nothing to write and
    sends no dry-run either.

    Every successful write is recorded in `result` (a new one when None) as soon as it is known, so a caller that
    passes its own sees the writes of a pass that then failed. On a failure the wave in hand finishes, later waves
    are not started (they may depend on what failed), nothing is pruned, and the first error is raised. When the
    failure is a refusal (`ChildrenRefused`), the children this pass created are deleted again first (their names in
    `rolled_back`), so a service is never left with some of its new children. Children in `keep` are neither
    written nor pruned (a revision whose spec the operator cannot render again, `rollout`).
    """
    result = SyncResult() if result is None else result
    live = list(live)
    live_by_ref = {ref(obj): obj for obj in live}
    writes, wanted = prepare(owner, desired, live)
    wanted |= {ref(obj) for obj in keep}
    if verify and writes:
        refusals = dry_run(client, checkable(writes))
        if refusals:
            # A child refused because of another field manager's edit is repaired first; only what is still
            # refused stops the pass.
            refusals = repair_refused(client, refusals, writes, live_by_ref, result)
        if refusals:
            raise ChildrenRefused(refusals)
    waves: list[list[dict[str, Any]]] = [[] for _ in APPLY_WAVES]
    for stamped in writes:
        waves[_WAVE_OF[(stamped["apiVersion"], stamped["kind"])]].append(stamped)
    known_uids = {key: str(obj["metadata"].get("uid")) for key, obj in live_by_ref.items()}
    created: list[dict[str, Any]] = []
    for wave in waves:
        if wave:
            try:
                _apply_wave(client, wave, result, created, known_uids)
            except ChildrenRefused as refused:
                deleted = _roll_back(client, created, result)
                refused.rolled_back = [ref(obj) for obj in deleted]
                refused.rolled_back_uids = {str(obj["metadata"].get("uid")) for obj in deleted}
                raise
    for key, obj in live_by_ref.items():
        owners = obj["metadata"].get("ownerReferences", [])
        ours = any(o.get("uid") == owner["metadata"]["uid"] for o in owners)
        if key not in wanted and ours:
            client.delete(obj)
            result.pruned.append(key)
    return result


def fetch_unseen(
    client: Client, desired: Iterable[dict[str, Any]], seen: Iterable[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Read (GET, in parallel) each desired child that `seen` lacks; returns those that exist.

    For a cache that may lag: a child it has not seen yet is unknown, not absent, and applying it blindly would be a
    write (after a restart, thousands of them). A warm cache misses nothing and this sends no request.
    """
    known = {ref(obj) for obj in seen}
    unseen = [manifest for manifest in desired if ref(manifest) not in known]

    def get(manifest: dict[str, Any]) -> dict[str, Any] | None:
        kind, path = located(manifest)
        try:
            obj = client.request("GET", path)
        except ApiError as error:
            if error.status == 404:
                return None
            raise
        obj.setdefault("apiVersion", kind.api_version)
        obj.setdefault("kind", kind.kind)
        return obj

    return [obj for obj in _POOL.map(get, unseen) if obj is not None]


# Lists of object metadata only: a fraction of the bytes of full objects when only names and UIDs are needed.
METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"


ListPage = Callable[[dict[str, str]], dict[str, Any]]
"""(query) -> one LIST response: a GET of one collection with that query string."""


def list_pages(get: ListPage, query: Mapping[str, str], page: int) -> Iterator[dict[str, Any]]:
    """Every page of a paged LIST: `get` with `query` and `limit=page`, then again with each `continue` token the
    server hands back, until a page comes without one. Pages are yielded as they arrive (a caller may stop early).

    An empty page (also the last one, when the count is a multiple of the page size) says `items: null`.
    """
    current = {**query, "limit": str(page)}
    while True:
        response = get(current)
        yield response
        token = (response.get("metadata") or {}).get("continue")
        if not token:
            return
        current = {**current, "continue": str(token)}


def list_uids(client: Client, kind: Kind, namespace: str | None, selector: str, page: int = 500) -> set[str]:
    """UIDs of every object of `kind` matching `selector`, in `namespace` or in all (paged, metadata-only LISTs)."""
    path = kind.collection(namespace)
    pages = list_pages(
        lambda query: client.request("GET", path, query, accept=METADATA_ONLY), {"labelSelector": selector}, page
    )
    return {str(item["metadata"]["uid"]) for response in pages for item in response.get("items") or []}
