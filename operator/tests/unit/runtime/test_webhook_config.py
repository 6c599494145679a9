"""The operator-owned ValidatingWebhookConfiguration: the entry it builds, and the server that applies it."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from typing import Any

import kopf
import pytest
from kopf._core.engines.admission import _inject_handler_id

from disaggspec import apply
from disaggspec.runtime import webhook_config
from disaggspec.runtime.health import Health

URL_CONFIG = {"url": "https://rel-disaggspec-operator-webhook.ops.svc:9443", "caBundle": "Q0E="}
SERVICE_CONFIG = {"service": {"namespace": "ops", "name": "hook", "port": 443}, "caBundle": "Q0E="}


def test_the_entry_validates_creates_and_updates_of_services_within_a_short_timeout() -> None:
    entry = webhook_config.webhook_entry(URL_CONFIG)
    assert entry == {
        "name": "validate.disaggspec.io",
        "rules": [
            {
                "apiGroups": ["disaggspec.io"],
                "apiVersions": ["v1alpha1"],
                "resources": ["disaggspecservices"],
                "operations": ["CREATE", "UPDATE"],
                "scope": "Namespaced",
            }
        ],
        "clientConfig": {"url": "https://rel-disaggspec-operator-webhook.ops.svc:9443/validate", "caBundle": "Q0E="},
        "failurePolicy": "Ignore",
        "sideEffects": "None",
        "matchPolicy": "Equivalent",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 5,
    }
    assert webhook_config.webhook_entry(URL_CONFIG, 30)["timeoutSeconds"] == 30
    assert URL_CONFIG["url"].endswith(":9443")  # the input is not modified


@pytest.mark.parametrize("timeout", [0, 31, -1])
def test_a_timeout_outside_1_to_30_seconds_is_refused(timeout: int) -> None:
    with pytest.raises(ValueError, match="within 1-30"):
        webhook_config.webhook_entry(URL_CONFIG, timeout)


@pytest.mark.parametrize(
    "config",
    [
        URL_CONFIG,
        {"url": "https://127.0.0.1:9443/"},
        {"url": "https://host:1/root"},
        SERVICE_CONFIG,
        {"service": {"namespace": "ops", "name": "hook", "path": "/root"}},
    ],
)
def test_the_handler_id_goes_where_kopf_routes_it(config: dict[str, Any]) -> None:
    """kopf's server dispatches `<root>/<id>` to the handler `id`: the path must be built the way kopf builds it."""
    assert webhook_config.with_handler_id(config) == _inject_handler_id(config, "validate")  # type: ignore[arg-type]


def test_the_configuration_is_server_side_applied_by_the_operator() -> None:
    client = RecordingClient()
    manifest = webhook_config.configuration(SERVICE_CONFIG, 7)
    assert manifest["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert manifest["kind"] == "ValidatingWebhookConfiguration"
    assert manifest["metadata"] == {"name": "disaggspec.io"}
    assert [w["clientConfig"]["service"]["path"] for w in manifest["webhooks"]] == ["/validate"]
    webhook_config.apply_configuration(client, manifest)
    assert client.calls == [
        (
            "PATCH",
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/disaggspec.io",
            {"fieldManager": "disaggspec-operator", "force": "true"},
            manifest,
            "application/apply-patch+yaml",
        )
    ]


class RecordingClient(apply.Client):
    """Records every request; the first `failures` requests fail with HTTP 503."""

    def __init__(self, failures: int = 0) -> None:  # no ApiClient
        self.calls: list[tuple[str, str, dict[str, str] | None, Any, str]] = []
        self.failures = failures

    def request(
        self,
        method: str,
        path: str,
        query: dict[str, str] | None = None,
        body: Any = None,
        content_type: str = "",
        accept: str = "application/json",
    ) -> dict[str, Any]:
        self.calls.append((method, path, query, body, content_type))
        if self.failures:
            self.failures -= 1
            raise apply.ApiError(503, method, path, "unavailable")
        return dict(body or {})


@pytest.fixture
def registry() -> Health:
    return Health()


def _post(url: str, review: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        url, data=json.dumps(review).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        result: dict[str, Any] = json.loads(response.read())
        return result


async def _serve_once(server: webhook_config.ConfiguringWebhookServer) -> tuple[dict[str, Any], list[Any], Any]:
    """Start `server`, take its first client config, send one admission request to the registered URL."""
    seen: list[Any] = []

    async def fn(data: Any, *, webhook: Any = None, **_: Any) -> Any:
        seen.append((webhook, data["request"]["uid"]))
        return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"allowed": True}}

    async with server:
        iterator = server(fn).__aiter__()
        client_config = await asyncio.wait_for(iterator.__anext__(), 10)
        # The validating entry (the last apply is the mutating one's, see the test below).
        registered = next(
            call[3]["webhooks"][0]["clientConfig"]["url"]
            for call in server.client.calls
            if "validatingwebhookconfigurations" in call[1] and call[3]
        )
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u1"}}
        answer = await asyncio.to_thread(_post, registered, review)
        await iterator.aclose()
    return dict(client_config), seen, answer


def test_the_server_registers_each_client_config_before_yielding_it(registry: Health) -> None:
    registry_ready_before = registry.ready()
    client = RecordingClient()
    server = webhook_config.ConfiguringWebhookServer(
        client=client, health=registry, timeout_seconds=3, addr="127.0.0.1", host="127.0.0.1", insecure=True
    )
    assert isinstance(server, kopf.WebhookServer)
    assert registry.ready() == (False, ["webhook: not ready"])
    assert registry_ready_before == (True, [])
    client_config, seen, answer = asyncio.run(_serve_once(server))
    assert len(client.calls) == 2
    entry = client.calls[0][3]["webhooks"][0]
    assert entry["timeoutSeconds"] == 3
    assert entry["clientConfig"]["url"] == f"{client_config['url'].rstrip('/')}/validate"
    # The host-port webhook of pool pods goes into the MutatingWebhookConfiguration, at its own handler's path.
    method, path, _, mutating, _ = client.calls[1]
    assert (method, path) == (
        "PATCH",
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/disaggspec.io",
    )
    ports_entry = mutating["webhooks"][0]
    assert ports_entry["clientConfig"]["url"] == f"{client_config['url'].rstrip('/')}/host-ports"
    assert ports_entry["failurePolicy"] == "Fail" and ports_entry["timeoutSeconds"] == 3
    assert ports_entry["objectSelector"] == {"matchLabels": {"disaggspec.io/host-ports": "allocate"}}
    # The request reached kopf's dispatch with the handler id taken from the registered path.
    assert seen == [("validate", "u1")]
    assert answer["response"] == {"allowed": True}
    assert registry.ready() == (True, [])
    assert registry.status() == (True, ["webhook: ok serving"])


def test_a_failed_registration_is_retried_and_counts_against_liveness(
    registry: Health, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(webhook_config, "RETRY_SECONDS", (0.01,))
    states: list[tuple[bool, list[str]]] = []
    original = registry.report

    def record(component: str, healthy: bool, detail: str = "") -> None:
        original(component, healthy, detail)
        states.append(registry.status())

    monkeypatch.setattr(registry, "report", record)
    client = RecordingClient(failures=2)
    server = webhook_config.ConfiguringWebhookServer(
        client=client, health=registry, addr="127.0.0.1", host="127.0.0.1", insecure=True
    )
    asyncio.run(_serve_once(server))
    assert len(client.calls) == 4  # two failed applies, then the validating and the mutating configuration
    assert [lines[0].split(":")[1].strip() for _, lines in states] == ["failing for 0s (grace 60s)"] * 2 + [
        "ok serving"
    ]
    assert registry.ready() == (True, [])


def test_a_bad_timeout_is_refused_when_the_server_is_built() -> None:
    with pytest.raises(ValueError, match="within 1-30"):
        webhook_config.ConfiguringWebhookServer(client=RecordingClient(), health=Health(), timeout_seconds=60)
