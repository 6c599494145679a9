"""The planner's runtime (`runtime.autoscaler`) on the fake API: a round's scrapes of a saturated decode pool scale
its target through /scale, with an Event, a requeue and the decision in the pass's view; the learned state seeds
from status; a service not in mode Planner is never scaled."""

from __future__ import annotations

from typing import Any

from disaggspec import apply
from disaggspec import conditions as r
from disaggspec import constants as c
from disaggspec.api import parse_service
from disaggspec.runtime.autoscaler import Autoscaler, settings_of
from tests.unit.dss_cases import edited
from tests.unit.fakes import FakeClient
from tests.unit.test_planner import decode_pool, pod

NAMESPACE, NAME = "team", "base"
PLANNER = {
    "mode": "Planner",
    "prefill": {"maxReplicas": 4},
    "decode": {"maxReplicas": 6},
    "planner": {"ttftMilliseconds": 500, "itlMilliseconds": 20, "scaleDownStabilizationSeconds": 300},
}
NOW = 10_000.0


def _service(scaling: dict[str, Any]) -> dict[str, Any]:
    obj = edited({"spec.autoscaling": scaling})
    obj["metadata"].update(namespace=NAMESPACE, uid="uid-1", generation=1)
    obj["status"] = {"autoscaling": {"prefill": {"target": 1}, "decode": {"target": 1}}}
    return obj


def _targets(client: FakeClient) -> None:
    for role in c.POOLS:
        client.create(
            {
                "apiVersion": c.API_VERSION,
                "kind": c.POOL_KIND,
                "metadata": {
                    "name": f"{NAME}-{role}",
                    "namespace": NAMESPACE,
                    "labels": {c.LABEL_SERVICE: NAME, c.LABEL_ROLE: role},
                },
                "spec": {"replicas": 1},
            }
        )


def _saturated_round() -> dict[str, dict[str, Any]]:
    """One prefill server keeping up, one decode server with 40 waiting requests at every scrape."""
    decode = decode_pool(NOW, 1, running=64.0, queued=40.0)
    return {
        c.ROLE_PREFILL: {"prefill-0": pod(NOW, prompt=1000.0, requests=1.0)},
        c.ROLE_DECODE: dict(decode.series),
    }


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []
        self.requeued: list[tuple[str, str]] = []

    def emit(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None:
        self.events.append((type_, reason, message))

    def requeue(self, keys: Any) -> None:
        self.requeued.extend(keys)


def _autoscaler(body: dict[str, Any], client: FakeClient, recorder: Recorder) -> Autoscaler:
    return Autoscaler(
        client,
        recorder.emit,
        lookup=lambda namespace, name: body,
        children=client.children,
        requeue=recorder.requeue,
        wall=lambda: "2026-12-06T20:00:00Z",
    )


def test_a_saturated_decode_pool_is_scaled_through_its_target() -> None:
    client, recorder = FakeClient(), Recorder()
    _targets(client)
    planner = _autoscaler(_service(PLANNER), client, recorder)
    planner.observe((NAMESPACE, NAME), _saturated_round(), NOW)
    decode = client.objects[apply.SCALE_TARGET.item(NAMESPACE, f"{NAME}-decode")]["spec"]["replicas"]
    assert 1 < decode <= 6
    assert client.objects[apply.SCALE_TARGET.item(NAMESPACE, f"{NAME}-prefill")]["spec"]["replicas"] == 1
    assert ("PATCH", apply.SCALE_TARGET.item(NAMESPACE, f"{NAME}-decode") + "/scale") in client.requests
    [(type_, reason, message)] = recorder.events
    assert (type_, reason) == (r.EVENT_POOL_SCALED.type, r.EVENT_POOL_SCALED.reason)
    assert message.startswith(f"decode 1 -> {decode}")
    assert recorder.requeued == [(NAMESPACE, NAME)]
    decision, learned = planner.view(NAMESPACE, NAME)
    assert decision is not None and decision.message == message and decision.time == "2026-12-06T20:00:00Z"
    assert learned is not None and learned["version"] == 1


def test_the_next_round_reads_the_size_it_set_not_a_stale_status() -> None:
    client, recorder = FakeClient(), Recorder()
    _targets(client)
    planner = _autoscaler(_service(PLANNER), client, recorder)
    planner.observe((NAMESPACE, NAME), _saturated_round(), NOW)
    planner.observe((NAMESPACE, NAME), _saturated_round(), NOW + 15)
    scales = [path for method, path in client.writes if path.endswith("/scale")]
    # The second round starts from the new size (status still says 1): no second "1 -> n" decision.
    assert len(recorder.events) == len(set(recorder.events))
    assert all(not message.startswith("decode 1 ->") for _, _, message in recorder.events[1:])
    assert len(scales) == len(recorder.events)


def test_external_mode_is_never_planned() -> None:
    client, recorder = FakeClient(), Recorder()
    _targets(client)
    external = {key: value for key, value in PLANNER.items() if key != "planner"} | {"mode": "External"}
    planner = _autoscaler(_service(external), client, recorder)
    planner.observe((NAMESPACE, NAME), _saturated_round(), NOW)
    assert client.writes == [] and recorder.events == []
    assert planner.view(NAMESPACE, NAME) == (None, None)


def test_settings_follow_the_spec() -> None:
    service = parse_service(_service(PLANNER | {"planner": {**PLANNER["planner"], "prefillDecodeRatio": {"min": 0.5}}}))
    assert service.spec.autoscaling is not None
    settings = settings_of(service.spec.autoscaling)
    assert settings is not None
    assert (settings.ttft_seconds, settings.itl_seconds) == (0.5, 0.02)
    assert (settings.decode.min_replicas, settings.decode.max_replicas) == (1, 6)
    assert (settings.ratio_min, settings.ratio_max) == (0.5, 64.0)
    assert (settings.lead_seconds, settings.stabilization_seconds) == (60.0, 300.0)
