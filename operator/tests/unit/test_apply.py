"""apply.sync writes in dependency waves and reports every write that succeeded; it dry-runs first and never leaves a
refused pass half-applied; ApiError carries Retry-After and the Status' reason and causes."""

from __future__ import annotations

import email.utils
from pathlib import Path
from typing import Any

import pytest
import yaml

from disaggspec import apply, childrefusal
from tests.unit.deployments import deployment
from tests.unit.fakes import FakeClient

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "rdma-multus" / "expected.yaml"
OWNER = {"apiVersion": "x/v1", "kind": "DisaggSpecService", "metadata": {"name": "qwen-rdma", "uid": "owner-uid"}}


def _desired() -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(GOLDEN.read_text()) if doc]


def _path(kind: apply.Kind, name: str) -> str:
    return kind.item("golden", name)


def _deployment(role: str) -> str:
    """The name of the golden service's Deployment of `role`: `qwen-rdma-<role>-<revision>`."""
    return str(deployment(_desired(), "qwen-rdma", role)["metadata"]["name"])


class EscalationCheckingClient(FakeClient):
    """Refuses a RoleBinding whose Role does not exist yet, as the RBAC escalation check of a least-privilege
    ServiceAccount does (the API server cannot tell the binding grants nothing the applier lacks)."""

    def apply(self, manifest: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
        if manifest["kind"] == apply.ROLE_BINDING.kind:
            role = apply.ROLE.item(manifest["metadata"]["namespace"], manifest["roleRef"]["name"])
            if role not in self.objects:
                _, path = apply.located(manifest)
                raise apply.ApiError(403, "PATCH", path, "attempting to grant RBAC permissions not currently held")
        return super().apply(manifest, dry_run)


def test_a_new_service_is_applied_in_dependency_order_in_one_pass() -> None:
    client = EscalationCheckingClient()
    result = apply.sync(client, OWNER, _desired(), [])
    assert len(result.applied) == len(_desired())
    kinds = [path.split("/")[-2] for _, path in client.writes]
    first_wave = {"serviceaccounts", "roles", "services", "poddisruptionbudgets"}
    assert set(kinds[:8]) == first_wave  # SA, Role, three Services, three PodDisruptionBudgets, in any order
    assert set(kinds[8:]) == {"rolebindings", "deployments"}

    client.reset()  # converged: a second pass writes nothing
    assert not apply.sync(client, OWNER, _desired(), client.children("golden", "qwen-rdma")).changed
    assert client.writes == []


def test_a_transient_failure_in_the_first_wave_keeps_the_writes_that_succeeded_and_stops_the_rest() -> None:
    client = FakeClient()
    refused = _path(apply.SERVICE, "qwen-rdma-decode")
    client.refuse_writes[refused] = apply.ApiError(500, "PATCH", refused, "etcdserver: request timed out")
    result = apply.SyncResult()
    with pytest.raises(apply.ApiError):
        apply.sync(client, OWNER, _desired(), [], result=result)
    assert sorted(result.applied) == [
        "PodDisruptionBudget/qwen-rdma-decode",
        "PodDisruptionBudget/qwen-rdma-prefill",
        "PodDisruptionBudget/qwen-rdma-router",
        "Role/qwen-rdma-router",
        "Service/qwen-rdma-prefill",
        "Service/qwen-rdma-router",
        "ServiceAccount/qwen-rdma-router",
    ]
    assert all("/rolebindings/" not in path and "/deployments/" not in path for _, path in client.writes)


def test_a_transient_failure_in_the_last_wave_reports_every_other_write_and_prunes_nothing() -> None:
    client = FakeClient()
    stale = client.create(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "qwen-rdma-old", "namespace": "golden", "ownerReferences": [{"uid": "owner-uid"}]},
        }
    )
    decode = _deployment("decode")
    refused = _path(apply.DEPLOYMENT, decode)
    client.refuse_writes[refused] = apply.ApiError(503, "PATCH", refused, "shutting down")
    result = apply.SyncResult()
    with pytest.raises(apply.ApiError, match="shutting down"):
        apply.sync(client, OWNER, _desired(), [stale], result=result)
    assert len(result.applied) == len(_desired()) - 1
    assert f"Deployment/{decode}" not in result.applied
    assert result.pruned == []
    assert ("DELETE", _path(apply.SERVICE, "qwen-rdma-old")) not in client.writes

    del client.refuse_writes[refused]
    result = apply.sync(client, OWNER, _desired(), [stale, *client.children("golden", "qwen-rdma")])
    assert result.applied == [f"Deployment/{decode}"]
    assert result.pruned == ["Service/qwen-rdma-old"]


def _invalid(path: str, field: str = "spec.template.spec.containers[0].env[0].name") -> apply.ApiError:
    causes = (childrefusal.Cause(field, 'Invalid value: "MY-VAR": a valid C identifier must ...'),)
    return apply.ApiError(422, "PATCH", path, 'Deployment.apps "x" is invalid: ...', None, "Invalid", causes)


def test_a_refused_dry_run_writes_nothing_and_names_every_refused_child() -> None:
    client = FakeClient()
    stale = client.create(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "qwen-rdma-old", "namespace": "golden", "ownerReferences": [{"uid": "owner-uid"}]},
        }
    )
    decode, router = _path(apply.DEPLOYMENT, _deployment("decode")), _path(apply.SERVICE, "qwen-rdma-router")
    client.refuse[decode] = _invalid(decode)
    quota = 'services "qwen-rdma-router" is forbidden: exceeded quota: q, requested: services.nodeports=1'
    client.refuse[router] = apply.ApiError(403, "PATCH", router, quota, None, "Forbidden")
    result = apply.SyncResult()
    with pytest.raises(apply.ChildrenRefused) as refused:
        apply.sync(client, OWNER, _desired(), [stale], result=result)
    assert sorted(r.child for r in refused.value.refusals) == [
        f"Deployment {_deployment('decode')}",
        "Service qwen-rdma-router",
    ]
    assert client.writes == [] and not result.changed  # not even the stale Service was pruned
    # Every child but the RoleBinding (see apply._NOT_DRY_RUN) was dry-run, once.
    dry_runs = [path for method, path in client.requests if method == "DRYRUN"]
    assert len(dry_runs) == len(_desired()) - 1 and not any("/rolebindings/" in p for p in dry_runs)

    client.reset()  # the refusal cleared (the quota was raised, say): the same pass applies everything
    client.refuse.clear()
    result = apply.sync(client, OWNER, _desired(), [stale])
    assert len(result.applied) == len(_desired()) and result.pruned == ["Service/qwen-rdma-old"]


def test_a_write_refused_after_a_clean_dry_run_rolls_back_what_the_pass_created() -> None:
    client = FakeClient()
    client.create(_desired()[0])  # the ServiceAccount exists already: a rollback must never delete it
    live = client.children("golden", "qwen-rdma")
    assert [obj["kind"] for obj in live] == ["ServiceAccount"]
    router_name = _deployment("router")
    router = _path(apply.DEPLOYMENT, router_name)
    # Each Deployment fits a quota of two alone (the dry-run passes); the third real create does not.
    quota = f'deployments.apps "{router_name}" is forbidden: exceeded quota: q, used: count/deployments.apps=2'
    client.refuse_writes[router] = apply.ApiError(403, "PATCH", router, quota, None, "Forbidden")
    result = apply.SyncResult()
    with pytest.raises(apply.ChildrenRefused) as refused:
        apply.sync(client, OWNER, _desired(), live, result=result)
    assert [r.child for r in refused.value.refusals] == [f"Deployment {router_name}"]
    assert sorted(refused.value.rolled_back) == sorted(result.rolled_back)
    assert len(result.rolled_back) == len(_desired()) - 2  # everything but the ServiceAccount and the refused one
    assert [path.rsplit("/", 1)[-1] for path in client.objects] == ["qwen-rdma-router"]  # the ServiceAccount only
    assert apply.SERVICE_ACCOUNT.item("golden", "qwen-rdma-router") in client.objects


def test_a_transient_dry_run_failure_writes_nothing_and_is_raised_as_it_is() -> None:
    client = FakeClient()
    decode = _path(apply.DEPLOYMENT, _deployment("decode"))
    client.refuse[decode] = apply.ApiError(503, "PATCH", decode, "unavailable", retry_after=2)
    with pytest.raises(apply.ApiError) as raised:
        apply.sync(client, OWNER, _desired(), [])
    assert not isinstance(raised.value, apply.ChildrenRefused) and raised.value.retry_after == 2
    assert client.writes == []


def test_a_converged_pass_sends_no_dry_run() -> None:
    client = FakeClient()
    apply.sync(client, OWNER, _desired(), [])
    client.reset()
    apply.sync(client, OWNER, _desired(), client.children("golden", "qwen-rdma"))
    assert client.requests == []


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("7", 7.0),
        (" 2.5 ", 2.5),
        ("-3", 0.0),
        (email.utils.formatdate(1_000_030, usegmt=True), 30.0),
        (email.utils.formatdate(999_000, usegmt=True), 0.0),  # a date already past: retry now
        ("soon", None),
        ("", None),
        (None, None),
        ("nan", None),
    ],
)
def test_retry_after_header(header: str | None, seconds: float | None) -> None:
    assert apply.parse_retry_after(header, now=1_000_000) == seconds


class _Response:
    def __init__(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.status = status
        self.headers = headers
        self._body = body

    def read(self) -> bytes:
        return self._body


class _ApiClient:
    """Just the two calls `apply.Client.request` makes of the `kubernetes` ApiClient."""

    def __init__(self, response: _Response) -> None:
        self.response = response

    def param_serialize(self, method: str, path: str, **_: Any) -> tuple[str, str, dict[str, str], Any, None]:
        return method, f"https://api{path}", {}, None, None

    def call_api(self, *_: Any, **__: Any) -> _Response:
        return self.response


def _refusal(status: int, body: bytes, headers: dict[str, str]) -> apply.ApiError:
    client = apply.Client(_ApiClient(_Response(status, body, headers)))  # type: ignore[arg-type]
    with pytest.raises(apply.ApiError) as raised:
        client.request("GET", "/api/v1/namespaces/x/services/y")
    return raised.value


def test_a_throttled_request_carries_the_servers_retry_after() -> None:
    error = _refusal(429, b'{"kind":"Status","message":"too many requests"}', {"Retry-After": "3"})
    assert (error.status, error.retry_after) == (429, 3.0)
    assert str(error) == "GET /api/v1/namespaces/x/services/y: HTTP 429: too many requests"


def test_an_unavailable_server_with_a_non_json_page_is_still_an_api_error() -> None:
    error = _refusal(503, b"<html>upstream connect error</html>", {"Retry-After": "10"})
    assert (error.status, error.retry_after) == (503, 10.0)
    assert "upstream connect error" in str(error)


def test_other_refusals_carry_no_retry_after() -> None:
    error = _refusal(500, b'{"message":"boom"}', {"Retry-After": "10"})
    assert (error.status, error.retry_after) == (500, None)
    assert _refusal(429, b"{}", {}).retry_after is None


def test_an_invalid_child_carries_the_status_reason_and_causes() -> None:
    body = (
        b'{"kind":"Status","status":"Failure","reason":"Invalid","code":422,'
        b'"message":"Deployment.apps \\"x\\" is invalid: spec.template.spec.tolerations[0].operator: Invalid value",'
        b'"details":{"name":"x","causes":[{"reason":"FieldValueInvalid","field":"spec.template.spec.tolerations[0]'
        b'.operator","message":"Invalid value: \\"v\\": value must be empty when `operator` is \'Exists\'"}]}}'
    )
    error = _refusal(422, body, {})
    assert error.refused and error.reason == "Invalid"
    assert error.causes == (
        childrefusal.Cause(
            "spec.template.spec.tolerations[0].operator",
            "Invalid value: \"v\": value must be empty when `operator` is 'Exists'",
        ),
    )
    assert not _refusal(500, b'{"message":"boom"}', {}).refused
