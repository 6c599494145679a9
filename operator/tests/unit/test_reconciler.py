"""Reconciler passes against an in-memory API server (`fakes.FakeClient`): what a pass writes, and what it does not.

No cluster: each case runs in milliseconds. The integration suite covers the same flows against a real API server.
"""

from __future__ import annotations

import copy
import time
from typing import Any, cast

import kopf
import pytest

from disaggspec import apply, childrefusal, handlers, metrics, render
from disaggspec import conditions as r
from disaggspec import constants as c
from disaggspec.api import DisaggSpecServiceStatus, parse_service
from disaggspec.api.v1alpha1 import RevisionPoolStatus, RevisionStatus
from disaggspec.config import OperatorConfig
from disaggspec.reconcile import ROLLBACK_HOLD_SECONDS, ApiMissing, HeldOff, Reconciler, events
from disaggspec.render import names
from disaggspec.revision import revision_name
from disaggspec.runtime.availability import ApiAvailability
from disaggspec.runtime.controller import Controller
from disaggspec.servinghealth.judge import Judgement, Verdict
from tests.unit.dss_cases import edited
from tests.unit.fakes import RECONCILER_START, Event, FakeClient, reconciler_for

NAMESPACE = "team"
NAME = "base"
CHILD_COUNT = 12
"""ServiceAccount, Role, RoleBinding, three Services, three PodDisruptionBudgets and three Deployments."""

INVALID = {"spec.decode.speculative": {"algorithm": "EAGLE"}}
"""Breaks spec-algorithm-match: decode would propose with EAGLE while prefill runs EAGLE3."""


def _manifest(edits: dict[str, Any] | None = None) -> dict[str, Any]:
    obj = edited(edits or {})
    obj["metadata"]["namespace"] = NAMESPACE
    return obj


START = RECONCILER_START
_reconciler = reconciler_for


def _deployment(role: str, edits: dict[str, Any] | None = None) -> str:
    """The name of the Deployment of `role` that the spec with `edits` renders: `<service>-<role>-<revision>`."""
    service = parse_service(_manifest(edits))
    return names.deployment_name(service, role, render.fingerprint(service))


def _pass(reconciler: Reconciler, client: FakeClient) -> None:
    reconciler.reconcile(NAMESPACE, NAME, client.children)


def _conditions(client: FakeClient) -> dict[str, dict[str, Any]]:
    return {cond["type"]: cond for cond in client.service(NAMESPACE, NAME)["status"]["conditions"]}


def _body(obj: dict[str, Any]) -> kopf.Body:
    """`obj` as kopf hands it to an admission handler."""
    return kopf.Body(cast(kopf.RawBody, copy.deepcopy(obj)))


def _status_path() -> str:
    return f"{apply.DSS_RESOURCE.item(NAMESPACE, NAME)}/status"


def _converged(edits: dict[str, Any] | None = None) -> tuple[FakeClient, Reconciler]:
    """A service whose children exist and whose status counts them; the records are cleared."""
    client = FakeClient()
    client.create(_manifest(edits))
    reconciler = _reconciler(client)
    _pass(reconciler, client)  # applies the children
    _pass(reconciler, client)  # sees them: the status now counts the pools' replicas
    client.reset()
    return client, reconciler


def test_a_new_service_gets_every_child_and_a_progressing_status() -> None:
    client = FakeClient()
    client.create(_manifest())
    _pass(_reconciler(client), client)

    child_writes = [path for method, path in client.writes if path != _status_path()]
    assert len(child_writes) == CHILD_COUNT
    # Every owned kind but the model cache's fill Job, which only a claim-backed spec.model.cache renders, the
    # LeaderWorkerSet, which only a multi-node pool renders, and the scale targets, which only spec.autoscaling makes.
    owned = {k.kind for k in apply.OWNED_KINDS} - {
        apply.JOB.kind,
        apply.LEADER_WORKER_SET.kind,
        apply.SCALE_TARGET.kind,
    }
    assert {obj["kind"] for obj in client.children(NAMESPACE, NAME)} == owned
    assert client.writes[-1] == ("PATCH", _status_path())
    # A service without status never had children: the only read is the service itself (the cache was cold).
    assert [path for method, path in client.requests if method == "GET"] == [apply.DSS_RESOURCE.item(NAMESPACE, NAME)]
    status = client.service(NAMESPACE, NAME)["status"]
    assert status["observedGeneration"] == 1 and status["specFingerprint"] and status["endpoint"]
    conditions = _conditions(client)
    assert (conditions["Progressing"]["status"], conditions["Progressing"]["reason"]) == ("True", "RollingOut")
    assert (conditions["Ready"]["status"], conditions["Ready"]["reason"]) == ("False", "RolloutInProgress")
    assert conditions["SpecConfigConsistent"]["status"] == "True"
    assert conditions["Degraded"]["status"] == "False"
    assert [(e.type, e.reason) for e in client.events] == [("Normal", r.EVENT_CHILDREN_APPLIED.reason)]


def test_a_pass_over_unchanged_children_sends_no_request() -> None:
    client = FakeClient()
    client.create(_manifest())
    reconciler = _reconciler(client)
    _pass(reconciler, client)
    before = client.service(NAMESPACE, NAME)["status"]
    # The status counts the spec's replicas from the first pass on (the revisions' sum during a rollout), not the
    # live Deployments'.
    assert [before[pool]["ready"] for pool in ("prefill", "decode", "router")] == ["0/1", "0/1", "0/1"]
    for _ in range(2):
        client.reset()
        _pass(reconciler, client)
        # The children are seen now and none is ready yet: no child and no status to write.
        assert client.requests == []  # service and children from the caches, nothing to write
        assert client.events == []
        assert client.service(NAMESPACE, NAME)["status"] == before


def test_an_invalid_spec_changes_no_child_and_is_reported_once() -> None:
    client = FakeClient()
    client.create(_manifest(INVALID))
    reconciler = _reconciler(client)
    _pass(reconciler, client)

    assert client.writes == [("PATCH", _status_path())]
    assert client.children(NAMESPACE, NAME) == []
    consistent = _conditions(client)["SpecConfigConsistent"]
    assert (consistent["status"], consistent["reason"]) == ("False", r.CONSISTENT_RULE_VIOLATED.reason)
    assert consistent["message"].startswith("[spec-algorithm-match] spec.decode.speculative.algorithm: ")
    assert _conditions(client)["Ready"]["reason"] == r.READY_INVALID_SPEC.reason
    assert client.events == [Event(NAME, "Warning", r.EVENT_SPEC_REJECTED.reason, consistent["message"])]

    client.reset()
    _pass(reconciler, client)
    assert client.requests == [] and client.events == []


def test_an_invalid_edit_keeps_the_children_and_what_they_run() -> None:
    client, reconciler = _converged()
    before = client.service(NAMESPACE, NAME)["status"]
    # The user's edit, as the service watch delivers it to the cache.
    reconciler.services.put(client.update_spec(NAMESPACE, NAME, _manifest(INVALID)["spec"]))
    client.reset()
    _pass(reconciler, client)
    assert client.writes == [("PATCH", _status_path())]
    after = client.service(NAMESPACE, NAME)["status"]
    assert after["observedGeneration"] == 2
    assert (after["specFingerprint"], after["endpoint"]) == (before["specFingerprint"], before["endpoint"])
    assert [e.reason for e in client.events] == [r.EVENT_SPEC_REJECTED.reason]


def test_a_spec_the_models_refuse_is_a_schema_rejection() -> None:
    client = FakeClient()
    client.create(_manifest({"spec.decode.noSuchField": 1}))
    _pass(_reconciler(client), client)
    consistent = _conditions(client)["SpecConfigConsistent"]
    assert consistent["status"] == "False"
    assert consistent["message"].startswith("[schema] spec.decode.noSuchField: ")
    assert client.children(NAMESPACE, NAME) == []


def test_admission_refuses_with_the_message_reconcile_reports() -> None:
    client = FakeClient()
    manifest = _manifest(INVALID)
    client.create(manifest)
    _pass(_reconciler(client), client)
    with pytest.raises(kopf.AdmissionError) as refused:
        handlers.admit(body=_body(manifest), operation="CREATE", memo=kopf.Memo())
    assert str(refused.value) == _conditions(client)["SpecConfigConsistent"]["message"]
    handlers.admit(body=_body(_manifest()), operation="CREATE", memo=kopf.Memo())  # a valid spec passes


def test_an_apply_error_is_degraded_and_announced_once() -> None:
    client = FakeClient()
    client.create(_manifest())
    decode = apply.DEPLOYMENT.item(NAMESPACE, _deployment("decode"))
    # A transient failure of the real write (the dry-run passed): today's retry behaviour, nothing rolled back.
    client.refuse_writes[decode] = apply.ApiError(500, "PATCH", decode, "etcdserver: request timed out")
    reconciler = _reconciler(client)
    # The failed pass is handed back to the work queue (raised) after status and Events are written.
    with pytest.raises(apply.ApiError):
        _pass(reconciler, client)

    degraded = _conditions(client)["Degraded"]
    assert (degraded["status"], degraded["reason"]) == ("True", r.DEGRADED_APPLY_FAILED.reason)
    assert degraded["message"] == f"PATCH {decode}: HTTP 500: etcdserver: request timed out"
    # Every child but the refused one was written (and is counted); the first wave went before the second.
    applied = [e for e in client.events if e.reason == r.EVENT_CHILDREN_APPLIED.reason]
    assert len(applied) == 1 and f"Deployment/{_deployment('decode')}" not in applied[0].message
    assert f"Deployment/{_deployment('prefill')}" in applied[0].message
    assert [e for e in client.events if e.reason != r.EVENT_CHILDREN_APPLIED.reason] == [
        Event(NAME, "Warning", r.EVENT_APPLY_FAILED.reason, degraded["message"])
    ]

    client.reset()
    with pytest.raises(apply.ApiError):
        _pass(reconciler, client)  # fails the same way: no new Degraded Event
    assert [e.reason for e in client.events if e.reason != r.EVENT_CHILDREN_APPLIED.reason] == []

    del client.refuse_writes[decode]
    _pass(reconciler, client)
    assert _conditions(client)["Degraded"]["status"] == "False"


LABELLED = {"spec.prefill.podLabels": {"team": "infra"}}
"""A spec every rule passes; the tests make the (fake) API server refuse its prefill Deployment's pod labels, as a
cluster's admission policy could."""


def _invalid_labels(path: str) -> apply.ApiError:
    message = 'Invalid value: "infra": not allowed by policy'
    cause = childrefusal.Cause("spec.template.labels", message)
    return apply.ApiError(422, "PATCH", path, "invalid", None, "Invalid", (cause,))


def test_a_refused_child_applies_nothing_names_the_child_and_retries() -> None:
    client = FakeClient()
    client.create(_manifest(LABELLED))
    prefill = apply.DEPLOYMENT.item(NAMESPACE, _deployment("prefill", LABELLED))
    client.refuse[prefill] = _invalid_labels(prefill)
    reconciler = _reconciler(client)
    with pytest.raises(apply.ChildrenRefused):  # handed back to the work queue: retried with backoff
        _pass(reconciler, client)

    assert client.children(NAMESPACE, NAME) == []
    assert client.writes == [("PATCH", _status_path())]  # no child write, no prune: the status only
    conditions = _conditions(client)
    degraded = conditions["Degraded"]
    assert (degraded["status"], degraded["reason"]) == ("True", r.DEGRADED_CHILD_REFUSED.reason)
    assert degraded["message"] == (
        f"the API server refuses Deployment {_deployment('prefill', LABELLED)}: spec.template.labels: Invalid value: "
        '"infra": not allowed by policy (from spec.prefill.podLabels); nothing was applied'
    )
    assert (conditions["Ready"]["reason"], conditions["Progressing"]["reason"]) == ("ChildRefused", "ChildRefused")
    assert "specFingerprint" not in client.service(NAMESPACE, NAME)["status"]  # nothing of this spec runs
    assert client.events == [Event(NAME, "Warning", r.EVENT_CHILD_REFUSED.reason, degraded["message"])]

    client.reset()
    with pytest.raises(apply.ChildrenRefused):
        _pass(reconciler, client)  # refused the same way: no status write, no second Event
    assert client.writes == [] and client.events == []

    del client.refuse[prefill]  # the refusal cleared: the retry converges
    _pass(reconciler, client)
    assert len(client.children(NAMESPACE, NAME)) == CHILD_COUNT
    assert _conditions(client)["Degraded"]["status"] == "False"


def test_a_refused_edit_keeps_the_children_and_what_they_run() -> None:
    client, reconciler = _converged()
    before = {apply.ref(obj): obj["metadata"]["resourceVersion"] for obj in client.children(NAMESPACE, NAME)}
    fingerprint = client.service(NAMESPACE, NAME)["status"]["specFingerprint"]
    reconciler.services.put(client.update_spec(NAMESPACE, NAME, _manifest(LABELLED)["spec"]))
    prefill = apply.DEPLOYMENT.item(NAMESPACE, _deployment("prefill", LABELLED))
    client.refuse[prefill] = _invalid_labels(prefill)
    with pytest.raises(apply.ChildrenRefused):
        _pass(reconciler, client)
    assert {apply.ref(o): o["metadata"]["resourceVersion"] for o in client.children(NAMESPACE, NAME)} == before
    assert client.service(NAMESPACE, NAME)["status"]["specFingerprint"] == fingerprint


def test_a_render_that_raises_becomes_render_failed_without_a_retry(monkeypatch: pytest.MonkeyPatch) -> None:
    client = FakeClient()
    client.create(_manifest())
    reconciler = _reconciler(client)

    def broken(*_: Any) -> list[dict[str, Any]]:
        raise KeyError("gpu0")

    monkeypatch.setattr(render, "render", broken)
    failures = metrics.RENDER_FAILURES._value.get()
    _pass(reconciler, client)  # not raised: the work queue must not retry a bug hot

    assert client.children(NAMESPACE, NAME) == []
    consistent = _conditions(client)["SpecConfigConsistent"]
    expected = "rendering the children failed: KeyError: 'gpu0'; this is a bug in the operator, please report it"
    assert (consistent["status"], consistent["reason"], consistent["message"]) == ("False", "RenderFailed", expected)
    assert client.events == [Event(NAME, "Warning", r.EVENT_RENDER_FAILED.reason, expected)]
    assert metrics.RENDER_FAILURES._value.get() == failures + 1

    client.reset()
    _pass(reconciler, client)  # a resync fails the same way: no write, no second Event
    assert client.writes == [] and client.events == []

    monkeypatch.undo()  # the fixed operator converges
    _pass(reconciler, client)
    assert len(client.children(NAMESPACE, NAME)) == CHILD_COUNT
    assert _conditions(client)["SpecConfigConsistent"]["reason"] == r.CONSISTENT_ALL_RULES_PASSED.reason


def test_admission_refuses_a_spec_whose_child_would_be_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    client = FakeClient()
    controller = Controller(client, OperatorConfig())
    memo = handlers.memo_for(controller)
    manifest = _manifest(LABELLED)
    manifest["metadata"]["uid"] = "incoming-uid"
    prefill = apply.DEPLOYMENT.item(NAMESPACE, _deployment("prefill", LABELLED))
    client.refuse[prefill] = _invalid_labels(prefill)
    with pytest.raises(kopf.AdmissionError) as refused:
        handlers.admit(body=_body(manifest), operation="CREATE", memo=memo)
    assert str(refused.value).startswith(f"the API server refuses Deployment {_deployment('prefill', LABELLED)}: ")
    assert "(from spec.prefill.podLabels)" in str(refused.value)
    assert client.writes == []  # dry-runs only
    assert len([m for m, _ in client.requests if m == "DRYRUN"]) == CHILD_COUNT - 1  # all but the RoleBinding

    # Fail-safe: a dry-run the API server cannot answer admits the spec (reconcile checks again before writing).
    client.refuse[prefill] = apply.ApiError(503, "PATCH", prefill, "unavailable")
    handlers.admit(body=_body(manifest), operation="CREATE", memo=memo)
    # A denied namespace gets no children: nothing to dry-run.
    monkeypatch.setattr(controller, "config", OperatorConfig(denied_namespaces=(NAMESPACE,)))
    client.refuse[prefill] = _invalid_labels(prefill)
    client.reset()
    handlers.admit(body=_body(manifest), operation="CREATE", memo=memo)
    assert client.requests == []


def test_ready_is_announced_only_on_the_transition() -> None:
    client, reconciler = _converged()
    client.roll_out(NAMESPACE)
    _pass(reconciler, client)
    ready = _conditions(client)["Ready"]
    assert (ready["status"], ready["reason"]) == ("True", r.READY_ALL_REPLICAS.reason)
    assert client.events == [Event(NAME, "Normal", r.EVENT_READY.reason, ready["message"])]
    assert client.writes == [("PATCH", _status_path())]

    client.reset()
    _pass(reconciler, client)
    assert client.requests == [] and client.events == []


def test_a_child_no_longer_rendered_is_pruned_and_a_foreign_one_kept() -> None:
    client, reconciler = _converged()
    owner_uid = client.service(NAMESPACE, NAME)["metadata"]["uid"]
    labels = {c.LABEL_MANAGED_BY: c.MANAGED_BY, c.LABEL_SERVICE: NAME}

    def service(name: str, owner: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": name,
                "namespace": NAMESPACE,
                "labels": labels,
                "ownerReferences": [{"apiVersion": c.API_VERSION, "kind": c.KIND, "name": NAME, "uid": owner}],
            },
            "spec": {},
        }

    client.create(service(f"{NAME}-old", owner_uid))
    client.create(service(f"{NAME}-foreign", "someone-else"))
    _pass(reconciler, client)

    stale = apply.SERVICE.item(NAMESPACE, f"{NAME}-old")
    assert client.writes == [("DELETE", stale)]
    assert stale not in client.objects
    assert apply.SERVICE.item(NAMESPACE, f"{NAME}-foreign") in client.objects
    assert client.events == [
        Event(NAME, "Normal", r.EVENT_CHILDREN_APPLIED.reason, "applied [], pruned ['Service/base-old']")
    ]


def test_a_deleted_service_is_left_alone() -> None:
    client = FakeClient()
    _pass(_reconciler(client), client)
    assert client.requests == [("GET", apply.DSS_RESOURCE.item(NAMESPACE, NAME))]


def test_a_pass_refused_after_writing_rolls_back_and_holds_off_the_event_driven_retries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = FakeClient()
    client.create(_manifest())
    router_name = _deployment("router")
    router = apply.DEPLOYMENT.item(NAMESPACE, router_name)
    # A quota each Deployment fits alone: the dry-run passes, the real create of the third is refused.
    quota = f'deployments.apps "{router_name}" is forbidden: exceeded quota: q, used: count/deployments.apps=2'
    client.refuse_writes[router] = apply.ApiError(403, "PATCH", router, quota, None, "Forbidden")
    reconciler = _reconciler(client)
    with pytest.raises(apply.ChildrenRefused):
        _pass(reconciler, client)
    assert client.children(NAMESPACE, NAME) == []  # what the pass created is deleted again
    degraded = _conditions(client)["Degraded"]
    assert degraded["reason"] == r.DEGRADED_CHILD_REFUSED.reason
    assert degraded["message"] == (
        f"the API server refuses Deployment {router_name}: exceeded quota: q, used: count/deployments.apps=2; the "
        "children this pass had created were deleted again, so nothing is half-applied"
    )

    # The rollback's own DELETE events queue the service again at once: that pass writes nothing and asks the work
    # queue to come back when the hold ends.
    client.reset()
    with pytest.raises(HeldOff) as held:
        _pass(reconciler, client)
    assert client.writes == [] and 0 < held.value.retry_after <= ROLLBACK_HOLD_SECONDS[0]

    del client.refuse_writes[router]  # the quota was raised; once the hold ends, the retry converges
    now = time.monotonic()
    monkeypatch.setattr(time, "monotonic", lambda: now + ROLLBACK_HOLD_SECONDS[0] + 1)
    _pass(reconciler, client)
    assert len(client.children(NAMESPACE, NAME)) == CHILD_COUNT
    assert _conditions(client)["Degraded"]["status"] == "False"


def _verdict(spec: r.ConditionReason, transfer: r.ConditionReason) -> Verdict:
    return Verdict(Judgement(spec, f"{spec.reason} here"), Judgement(transfer, f"{transfer.reason} there"), None, None)


def test_runtime_health_is_written_with_the_status_and_announced_on_transitions_only() -> None:
    client, reconciler = _converged()
    current = {"verdict": _verdict(r.SPEC_DECODE_NO_TRAFFIC, r.TRANSFER_NO_TRAFFIC)}
    reconciler.runtime_health = lambda namespace, name: current["verdict"]
    _pass(reconciler, client)
    conditions = _conditions(client)
    ready_before = conditions["Ready"]
    assert (conditions["SpecDecodeHealthy"]["status"], conditions["SpecDecodeHealthy"]["reason"]) == (
        "Unknown",
        "NoTraffic",
    )
    assert client.events == []

    current["verdict"] = _verdict(r.SPEC_DECODE_LOW_ACCEPT, r.TRANSFER_FAILING)
    client.reset()
    _pass(reconciler, client)
    assert client.writes == [("PATCH", _status_path())]  # one status write carries both conditions
    assert sorted((e.type, e.reason, e.message) for e in client.events) == [
        ("Warning", "LowAcceptLength", "LowAcceptLength here"),
        ("Warning", "TransferFailures", "TransferFailures there"),
    ]
    assert _conditions(client)["Ready"] == ready_before  # Ready stays about serving

    client.reset()
    _pass(reconciler, client)  # same verdict: no write, no Event
    assert client.writes == [] and client.events == []

    current["verdict"] = _verdict(r.SPEC_DECODE_ACCEPTING, r.TRANSFER_OK)
    _pass(reconciler, client)
    assert sorted((e.type, e.reason) for e in client.events) == [
        ("Normal", "AcceptLengthRecovered"),
        ("Normal", "TransferRecovered"),
    ]
    assert (
        metrics.REGISTRY.get_sample_value(
            "disaggspec_pool_replicas", {"namespace": NAMESPACE, "service": NAME, "pool": "decode", "state": "desired"}
        )
        == 1
    )
    reconciler.forget(NAMESPACE, NAME)
    assert (
        metrics.REGISTRY.get_sample_value(
            "disaggspec_pool_replicas", {"namespace": NAMESPACE, "service": NAME, "pool": "decode", "state": "desired"}
        )
        is None
    )


CACHE = {"spec.model.cache": {"persistentVolumeClaim": {"claimName": "hf-cache"}}}


def _set_job_status(client: FakeClient, job_status: dict[str, Any]) -> str:
    """Give the service's one fill Job `job_status` (as the Job controller would); returns the Job's name."""
    (job,) = [obj for obj in client.children(NAMESPACE, NAME) if obj["kind"] == apply.JOB.kind]
    client.objects[apply.located(job)[1]]["status"] = job_status
    return str(job["metadata"]["name"])


def test_model_cached_follows_the_fill_job_with_events_on_transitions() -> None:
    client = FakeClient()
    client.create(_manifest(CACHE))
    reconciler = _reconciler(client)
    _pass(reconciler, client)
    cached = _conditions(client)["ModelCached"]
    assert (cached["status"], cached["reason"]) == ("False", r.MODEL_CACHED_FILLING.reason)

    complete = [{"type": "SuccessCriteriaMet", "status": "True"}, {"type": "Complete", "status": "True"}]
    job = _set_job_status(client, {"succeeded": 1, "conditions": complete})
    client.reset()
    _pass(reconciler, client)
    cached = _conditions(client)["ModelCached"]
    assert (cached["status"], cached["reason"], cached["message"]) == ("True", "Filled", f"Job {job} completed")
    assert [e.reason for e in client.events] == [r.EVENT_MODEL_CACHE_FILLED.reason]
    client.reset()
    _pass(reconciler, client)
    assert client.events == []  # a resync repeats no Event


def test_a_failed_fill_job_is_reported_once() -> None:
    client = FakeClient()
    client.create(_manifest(CACHE))
    reconciler = _reconciler(client)
    _pass(reconciler, client)
    failed = {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "backoff limit"}
    _set_job_status(client, {"failed": 5, "conditions": [failed]})
    client.reset()
    _pass(reconciler, client)
    _pass(reconciler, client)
    cached = _conditions(client)["ModelCached"]
    assert (cached["status"], cached["reason"]) == ("False", r.MODEL_CACHED_FILL_FAILED.reason)
    assert [e.reason for e in client.events] == [r.EVENT_MODEL_CACHE_FILL_FAILED.reason]


def test_a_new_revision_prunes_the_old_fill_job() -> None:
    client = FakeClient()
    client.create(_manifest(CACHE))
    reconciler = _reconciler(client)
    _pass(reconciler, client)
    (old,) = [o["metadata"]["name"] for o in client.children(NAMESPACE, NAME) if o["kind"] == apply.JOB.kind]
    reconciler.services.put(
        client.update_spec(NAMESPACE, NAME, _manifest({**CACHE, "spec.model.revision": "v2"})["spec"])
    )
    client.reset()
    _pass(reconciler, client)
    (new,) = [o["metadata"]["name"] for o in client.children(NAMESPACE, NAME) if o["kind"] == apply.JOB.kind]
    assert new != old
    assert ("DELETE", apply.JOB.item(NAMESPACE, old)) in client.writes


def _deployments(client: FakeClient) -> dict[str, int]:
    """name -> spec.replicas of the service's live Deployments."""
    return {
        obj["metadata"]["name"]: obj["spec"]["replicas"]
        for obj in client.children(NAMESPACE, NAME)
        if obj["kind"] == apply.DEPLOYMENT.kind
    }


def test_a_must_match_edit_rolls_out_a_new_revision_beside_the_serving_one() -> None:
    client, reconciler = _converged()
    client.roll_out(NAMESPACE)
    _pass(reconciler, client)
    old = {role: _deployment(role) for role in ("prefill", "decode", "router")}
    edits = {"spec.model.revision": "v2"}  # a must-match setting: a new fingerprint
    new = {role: _deployment(role, edits) for role in ("prefill", "decode", "router")}
    assert set(old.values()).isdisjoint(new.values())
    revision = revision_name(render.fingerprint(parse_service(_manifest(edits))))
    old_name = revision_name(render.fingerprint(parse_service(_manifest())))
    assert reconciler.reconcile(NAMESPACE, NAME, client.children) is None  # no rollout: nothing to look at later
    reconciler.services.put(client.update_spec(NAMESPACE, NAME, _manifest(edits)["spec"]))
    client.reset()
    wake_after = reconciler.reconcile(NAMESPACE, NAME, client.children)
    # A rollout runs: the pass asks to run again by the progress deadline, even if nothing else happens.
    deadline = render.rollout_timing(parse_service(_manifest(edits))).progress_deadline_seconds
    assert wake_after is not None and 0 < wake_after <= deadline + 1
    # The new revision starts beside the old one, which keeps every pod (maxUnavailable 0) and serves meanwhile.
    assert _deployments(client) == {**{name: 1 for name in old.values()}, **{name: 1 for name in new.values()}}
    assert not any(method == "DELETE" for method, _ in client.writes)
    created = [e for e in client.events if e.reason == r.EVENT_REVISION_CREATED.reason]
    assert len(created) == 1 and f"revision {revision} started" in created[0].message
    assert _conditions(client)["Ready"]["status"] == "False"
    for _ in range(4):  # the new revision becomes ready, the old one drains: router first, then its pools
        client.roll_out(NAMESPACE)
        _pass(reconciler, client)
    assert _deployments(client) == {name: 1 for name in new.values()}
    status = client.service(NAMESPACE, NAME)["status"]
    assert [(entry["name"], entry["traffic"]) for entry in status["revisions"]] == [(revision, "Active")]
    assert [e.reason for e in client.events].count(r.EVENT_REVISION_RETIRED.reason) == 1
    # The split, each time it changed: the old revision alone first, then the new one (pools of 1, so one router
    # slot) while the old one's router goes.
    shifted = [e.message for e in client.events if e.reason == r.EVENT_TRAFFIC_SHIFTED.reason]
    assert shifted == [
        f"revision {revision} 0% (0/1 routers, capacity 0.00), revision {old_name} 100% (1/1 routers, capacity 1.00)",
        f"revision {revision} 100% (1/1 routers, capacity 1.00), revision {old_name} 0% (0/1 routers)",
    ]
    assert _conditions(client)["Ready"]["status"] == "True"
    assert reconciler.reconcile(NAMESPACE, NAME, client.children) is None  # rolled out


def _split_status(*entries: tuple[str, int, int, float | None, float]) -> DisaggSpecServiceStatus:
    """status.revisions of a rollout: per revision (name, router replicas, ready router pods, capacity share,
    traffic share)."""
    return DisaggSpecServiceStatus(
        revisions=[
            RevisionStatus(
                fingerprint=name * 2,
                name=name,
                traffic="Rolling" if index == 0 else "Draining",
                serving=ready > 0,
                router=RevisionPoolStatus(replicas=replicas, ready_replicas=ready),
                capacity_share=capacity,
                traffic_share=traffic,
            )
            for index, (name, replicas, ready, capacity, traffic) in enumerate(entries)
        ]
    )


def test_traffic_shifted_says_each_revisions_share_when_the_split_changes() -> None:
    before = _split_status(("abc12345", 1, 1, 0.25, 0.2), ("def67890", 4, 4, 0.75, 0.8))
    after = _split_status(("abc12345", 2, 2, 0.5, 0.4), ("def67890", 3, 3, 0.5, 0.6))
    assert events._traffic_events(before, after) == [
        events.Event(
            r.EVENT_TRAFFIC_SHIFTED,
            "revision abc12345 40% (2/5 routers, capacity 0.50), revision def67890 60% (3/5 routers, capacity 0.50)",
        )
    ]
    assert events._traffic_events(after, after) == []  # a resync that changed nothing
    single = DisaggSpecServiceStatus(revisions=[after.revisions[0].model_copy(update={"traffic_share": None})])
    assert events._traffic_events(after, single) == []  # the rollout ended: RevisionRetired says so


def test_an_operator_upgrade_keeps_the_deployments_without_a_revision_until_the_revision_serves() -> None:
    client = FakeClient()
    owner = client.create(_manifest())
    service = parse_service(_manifest())
    # The children as the operator before revisions rendered them: Deployments `<service>-<role>`, the fingerprint
    # in their labels but neither in their name nor in their selector, no stored spec.
    for manifest in render.render(service, OperatorConfig()):
        if manifest["kind"] == apply.DEPLOYMENT.kind:
            role = manifest["metadata"]["labels"][c.LABEL_ROLE]
            manifest["metadata"]["name"] = f"{NAME}-{role}"
            del manifest["metadata"]["annotations"]
            del manifest["spec"]["selector"]["matchLabels"][c.LABEL_FINGERPRINT]
        manifest["metadata"]["ownerReferences"] = [apply.owner_reference(owner)]
        client.create(manifest)
    client.roll_out(NAMESPACE)
    _pass(_reconciler(client), client)
    # Nothing of the new revision is ready yet: the old Deployments must still serve, and Ready cannot be True.
    assert {f"{NAME}-prefill", f"{NAME}-decode", f"{NAME}-router"} <= set(_deployments(client))
    assert _conditions(client)["Ready"]["status"] == "False"


def test_ready_is_never_true_while_a_pool_has_fewer_ready_pods_than_the_spec_s_replicas() -> None:
    edits = {
        "spec.prefill.replicas": 2,
        "spec.decode.replicas": 2,
        "spec.rollout": {"maxSurge": 0, "maxUnavailable": 1},
    }
    client, reconciler = _converged(edits)
    client.roll_out(NAMESPACE)
    _pass(reconciler, client)
    assert _conditions(client)["Ready"]["status"] == "True"
    reconciler.services.put(
        client.update_spec(NAMESPACE, NAME, _manifest({**edits, "spec.model.revision": "v2"})["spec"])
    )
    for _ in range(8):
        _pass(reconciler, client)
        status = client.service(NAMESPACE, NAME)["status"]
        if _conditions(client)["Ready"]["status"] == "True":
            assert [status[pool]["ready"] for pool in ("prefill", "decode")] == ["2/2", "2/2"], _deployments(client)
        client.roll_out(NAMESPACE)
    replicas = {"prefill": 2, "decode": 2, "router": 1}
    assert _deployments(client) == {
        _deployment(role, {**edits, "spec.model.revision": "v2"}): replicas[role] for role in replicas
    }


def _roll_out_before_1_35(client: FakeClient) -> None:
    """The Deployment controller of an API server that does not count terminating pods (before Kubernetes 1.35)."""
    client.roll_out(NAMESPACE)
    for obj in client.objects.values():
        if obj["kind"] == apply.DEPLOYMENT.kind:
            obj["status"].pop("terminatingReplicas", None)


def test_before_1_35_the_old_pools_go_when_the_last_router_pod_is_listed_no_more() -> None:
    client, reconciler = _converged()
    _roll_out_before_1_35(client)
    _pass(reconciler, client)
    old_fp = render.fingerprint(parse_service(_manifest()))
    old = {role: _deployment(role) for role in ("prefill", "decode", "router")}
    pods_path = f"/api/v1/namespaces/{NAMESPACE}/pods"
    stopping = {
        "metadata": {
            "name": f"{old['router']}-x",
            "deletionTimestamp": "2026-01-01T00:00:01Z",
            "labels": {c.LABEL_SERVICE: NAME, c.LABEL_ROLE: "router", c.LABEL_FINGERPRINT: old_fp},
        }
    }
    client.objects[pods_path] = {"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": [stopping]}
    edits = {"spec.model.revision": "v2"}
    reconciler.services.put(client.update_spec(NAMESPACE, NAME, _manifest(edits)["spec"]))
    for _ in range(30):  # a minute of the reconciler's clock: far past the fixed 15 s
        _pass(reconciler, client)
        _roll_out_before_1_35(client)
    # The old router was scaled to zero, but one of its pods is still stopping: the old pools stay for it.
    deployments = _deployments(client)
    assert deployments[old["router"]] == 0 and deployments[old["prefill"]] == deployments[old["decode"]] == 1
    assert ("GET", pods_path) in client.requests
    client.objects[pods_path]["items"] = []  # the pod is gone
    _pass(reconciler, client)
    assert not set(old.values()) & set(_deployments(client))
    assert set(_deployments(client)) == {_deployment(role, edits) for role in ("prefill", "decode", "router")}


MULTI_NODE_PREFILL = {
    "spec.prefill.nodesPerInstance": 2,
    "spec.prefill.gpusPerNode": 8,
    "spec.prefill.tensorParallelSize": 16,
}


def test_a_multi_node_pool_without_the_leaderworkerset_api_applies_nothing_and_says_what_to_install() -> None:
    client = FakeClient()
    client.create(_manifest(MULTI_NODE_PREFILL))
    availability = ApiAvailability()
    availability.mark(apply.LEADER_WORKER_SET, present=False)
    reconciler = _reconciler(client)
    reconciler.availability = availability
    with pytest.raises(ApiMissing) as missing:
        _pass(reconciler, client)
    assert missing.value.retry_after == 30.0
    assert [path for _, path in client.writes] == [_status_path()]  # the status only: no child, no dry-run
    conditions = _conditions(client)
    degraded = conditions["Degraded"]
    assert (degraded["status"], degraded["reason"]) == ("True", "ApiMissing")
    assert degraded["message"].startswith("spec.prefill.nodesPerInstance is 2: a multi-node pool is a LeaderWorkerSet")
    assert "v0.9.0" in degraded["message"] and "set nodesPerInstance to 1" in degraded["message"]
    assert conditions["Ready"]["reason"] == conditions["Progressing"]["reason"] == "ApiMissing"
    assert "ApiMissing" in [event.reason for event in client.events]

    availability.mark(apply.LEADER_WORKER_SET, present=True)  # installed: the next pass applies everything
    _pass(reconciler, client)
    kinds = {obj["kind"] for obj in client.children(NAMESPACE, NAME)}
    assert {"LeaderWorkerSet", "Deployment"} <= kinds
    assert _conditions(client)["Degraded"]["reason"] == "AsExpected"


def test_a_single_node_service_never_needs_the_leaderworkerset_api() -> None:
    client = FakeClient()
    client.create(_manifest())
    availability = ApiAvailability()
    availability.mark(apply.LEADER_WORKER_SET, present=False)
    reconciler = _reconciler(client)
    reconciler.availability = availability
    _pass(reconciler, client)
    assert _conditions(client)["Degraded"]["reason"] == "AsExpected"
    assert len([p for _, p in client.writes if p != _status_path()]) == CHILD_COUNT
