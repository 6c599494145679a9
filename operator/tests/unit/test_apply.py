"""apply.sync writes in dependency waves and reports every write that succeeded; ApiError carries Retry-After."""

from __future__ import annotations

import email.utils
from pathlib import Path
from typing import Any

import pytest
import yaml

from disaggspec import apply
from tests.unit.fakes import FakeClient

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "rdma-multus" / "expected.yaml"
OWNER = {"apiVersion": "x/v1", "kind": "DisaggSpecService", "metadata": {"name": "qwen-rdma", "uid": "owner-uid"}}


def _desired() -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(GOLDEN.read_text()) if doc]


def _path(kind: apply.Kind, name: str) -> str:
    return kind.item("golden", name)


class EscalationCheckingClient(FakeClient):
    """Refuses a RoleBinding whose Role does not exist yet, as the RBAC escalation check of a least-privilege
    ServiceAccount does (the API server cannot tell the binding grants nothing the applier lacks)."""

    def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        if manifest["kind"] == apply.ROLE_BINDING.kind:
            role = apply.ROLE.item(manifest["metadata"]["namespace"], manifest["roleRef"]["name"])
            if role not in self.objects:
                _, path = apply.located(manifest)
                raise apply.ApiError(403, "PATCH", path, "attempting to grant RBAC permissions not currently held")
        return super().apply(manifest)


def test_a_new_service_is_applied_in_dependency_order_in_one_pass() -> None:
    client = EscalationCheckingClient()
    result = apply.sync(client, OWNER, _desired(), [])
    assert len(result.applied) == len(_desired())
    kinds = [path.split("/")[-2] for _, path in client.writes]
    first_wave = {"serviceaccounts", "roles", "services"}
    assert set(kinds[:5]) == first_wave  # SA, Role, three Services, in any order
    assert set(kinds[5:]) == {"rolebindings", "deployments"}

    client.reset()  # converged: a second pass writes nothing
    assert not apply.sync(client, OWNER, _desired(), client.children("golden", "qwen-rdma")).changed
    assert client.writes == []


def test_a_failed_write_in_the_first_wave_keeps_the_writes_that_succeeded_and_stops_the_rest() -> None:
    client = FakeClient()
    refused = _path(apply.SERVICE, "qwen-rdma-decode")
    client.refuse[refused] = apply.ApiError(422, "PATCH", refused, "invalid")
    result = apply.SyncResult()
    with pytest.raises(apply.ApiError):
        apply.sync(client, OWNER, _desired(), [], result=result)
    assert sorted(result.applied) == [
        "Role/qwen-rdma-router",
        "Service/qwen-rdma-prefill",
        "Service/qwen-rdma-router",
        "ServiceAccount/qwen-rdma-router",
    ]
    assert all("/rolebindings/" not in path and "/deployments/" not in path for _, path in client.writes)


def test_a_failed_write_in_the_last_wave_reports_every_other_write_and_prunes_nothing() -> None:
    client = FakeClient()
    stale = client.create(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "qwen-rdma-old", "namespace": "golden", "ownerReferences": [{"uid": "owner-uid"}]},
        }
    )
    refused = _path(apply.DEPLOYMENT, "qwen-rdma-decode")
    client.refuse[refused] = apply.ApiError(403, "PATCH", refused, "denied by policy")
    result = apply.SyncResult()
    with pytest.raises(apply.ApiError, match="denied by policy"):
        apply.sync(client, OWNER, _desired(), [stale], result=result)
    assert len(result.applied) == len(_desired()) - 1
    assert "Deployment/qwen-rdma-decode" not in result.applied
    assert result.pruned == []
    assert ("DELETE", _path(apply.SERVICE, "qwen-rdma-old")) not in client.writes

    del client.refuse[refused]
    result = apply.sync(client, OWNER, _desired(), [stale, *client.children("golden", "qwen-rdma")])
    assert result.applied == ["Deployment/qwen-rdma-decode"]
    assert result.pruned == ["Service/qwen-rdma-old"]


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
