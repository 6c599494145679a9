"""Runtime health (issue 20): metric texts of each release, the judgement, the Prometheus queries, the monitor loop.

`recorded/sglang-<version>-<role>.prom` are expositions of the SGLang emulator's metrics (the names, kinds and labels
of each pinned wheel, checked against the wheels by `e2e/serving/emulator/tests/test_emulator_honesty.py`) after
three requests: a decode with 16 verify steps each at accept length 1.94, a prefill with 1 bootstrap and 2 transfer
failures.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from disaggspec import metrics
from disaggspec.config import HealthSettings, health_from_env
from disaggspec.revision import revision_name
from disaggspec.servinghealth import prometheus, samples
from disaggspec.servinghealth.judge import PENDING, PodWindow, judge, reduce
from disaggspec.servinghealth.monitor import Monitor
from disaggspec.servinghealth.samples import PodSample, parse

RECORDED = Path(__file__).parent / "recorded"
SETTINGS = HealthSettings(window_seconds=60, min_verify_steps=50, min_failures=3, max_failures_per_second=0.05)


def _recorded(version: str, role: str) -> str:
    return (RECORDED / f"sglang-{version}-{role}.prom").read_text()


# ---- metric texts ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["0.5.2", "0.5.23"])
def test_each_release_s_decode_metrics_are_read(version: str) -> None:
    sample = parse(_recorded(version, "decode"))
    assert sample.accept_length == pytest.approx(31 / 16)
    assert sample.generation_tokens == 96 and sample.requests == 3  # 0.5.23: both is_streaming series summed
    assert sample.failures == 0
    # Only 0.5.23 counts verify steps and exports the accept rate (metrics_collector.py:1866, :518).
    assert sample.verify_calls == (48 if version == "0.5.23" else None)
    assert (sample.accept_rate is not None) == (version == "0.5.23")


@pytest.mark.parametrize("version", ["0.5.2", "0.5.23"])
def test_each_release_s_failure_counters_are_read(version: str) -> None:
    sample = parse(_recorded(version, "prefill"))
    assert (sample.bootstrap_failed, sample.transfer_failed, sample.failures) == (1, 2, 3)


@pytest.mark.parametrize("name", sorted(p.name for p in RECORDED.glob("*.prom")))
def test_the_reader_agrees_with_prometheus_client_s_parser(name: str) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    text = (RECORDED / name).read_text()
    totals: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            totals.setdefault(sample.name, []).append(sample.value)
    sample = parse(text)
    assert sample.accept_length == statistics.mean(totals["sglang:spec_accept_length"])
    assert sample.requests == sum(totals["sglang:num_requests_total"])
    # The failure counters per server: the largest rank's series (issue 29).
    assert sample.failures == max(totals["sglang:num_bootstrap_failed_reqs_total"]) + max(
        totals["sglang:num_transfer_failed_reqs_total"]
    )


def _ranks(name: str, values: list[float]) -> str:
    return "".join(
        f'{name}{{engine_type="prefill",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="{rank}"}} {value}\n'
        for rank, value in enumerate(values)
    )


def test_failure_counters_are_read_per_server_not_per_rank() -> None:
    """Issue 29: every TP rank counts each failed request in its own series; a tp8 server with 5 failures is 5."""
    text = _ranks(samples.TRANSFER_FAILED, [5.0] * 8) + _ranks(samples.BOOTSTRAP_FAILED, [2.0] * 8)
    sample = parse(text + 'sglang:num_requests_total{is_streaming="false"} 4\nsglang:num_requests_total 3\n')
    assert (sample.transfer_failed, sample.bootstrap_failed, sample.failures) == (5, 2, 7)
    assert sample.requests == 7  # other counters are still summed over their series
    # A scrape between two ranks' increments reads the newer count; a rank never counted is absent.
    assert parse(_ranks(samples.TRANSFER_FAILED, [6.0, 5.0, 6.0, 5.0])).failures == 6
    assert parse(_ranks(samples.REQUESTS, [1.0])).transfer_failed is None


def test_with_dp_attention_each_dp_group_counts_its_own_failures() -> None:
    """tp 4 with DP attention 2: ranks 0-1 (dp_rank 0) counted 3 failures, ranks 2-3 (dp_rank 1) counted 2: the
    server failed 5 requests, not the largest group's 3 nor every rank's 10."""
    counted = {0: 3.0, 1: 3.0, 2: 2.0, 3: 2.0}
    text = "".join(
        f'{samples.TRANSFER_FAILED}{{model_name="m",tp_rank="{rank}",dp_rank="{rank // 2}"}} {value}\n'
        for rank, value in counted.items()
    )
    assert parse(text).transfer_failed == 5


def test_every_name_read_is_a_metric_of_the_release_and_the_recordings_name_only_real_ones() -> None:
    """The names in `samples` against the emulator's facts (tied to the wheels by the emulator's honesty test): a
    rename in a new release fails here rather than leaving a condition Unknown forever."""
    from e2e.serving.emulator import facts

    kinds = {samples.ACCEPT_LENGTH: "gauge", samples.ACCEPT_RATE: "gauge"}
    counters = (samples.VERIFY_CALLS, samples.GENERATION_TOKENS, samples.REQUESTS)
    kinds |= dict.fromkeys((*counters, samples.BOOTSTRAP_FAILED, samples.TRANSFER_FAILED), "counter")
    only_0_5_23 = {samples.ACCEPT_RATE, samples.VERIFY_CALLS}
    for version in facts.VERSIONS:
        exported = {m.exposed: m.kind for m in facts.facts_for(version).metrics}
        for name, kind in kinds.items():
            if version == "0.5.2" and name in only_0_5_23:
                assert name not in exported, (version, name)
                continue
            assert exported.get(name) == kind, (version, name)
        for role in ("prefill", "decode"):
            recorded = {
                line.split("{")[0].split(" ")[0]
                for line in _recorded(version, role).splitlines()
                if line and not line.startswith("#")
            }
            series = {n + suffix for n in exported for suffix in ("", "_bucket", "_sum", "_count")}
            assert recorded and recorded <= series, (version, role, sorted(recorded - series))


def test_text_that_is_not_an_exposition_is_an_error() -> None:
    with pytest.raises(ValueError):
        parse("<html>not metrics</html>\n{")


# ---- reducing a window ----------------------------------------------------------------------------------------------


def _decode(t: float, tokens: float, accept: float, verify: float | None = None, requests: float = 0) -> tuple:
    return (t, PodSample(accept_length=accept, generation_tokens=tokens, verify_calls=verify, requests=requests))


def test_idle_samples_weigh_nothing_and_steps_come_from_the_verify_counter() -> None:
    scrapes = [
        _decode(0, 0, 2.0, verify=0),
        _decode(15, 0, 2.0, verify=0),  # idle: the gauge holds its last value, no step ran
        _decode(30, 100, 1.0, verify=100),
        _decode(45, 300, 2.0, verify=200),
    ]
    window = reduce("d-1", "decode", scrapes)
    assert window.verify_steps == 200
    assert window.accept_length == pytest.approx((100 * 1.0 + 100 * 2.0) / 200)


def test_without_a_verify_counter_steps_are_estimated_from_tokens() -> None:
    window = reduce("d-1", "decode", [_decode(0, 0, 1.5), _decode(15, 300, 1.5)])  # 0.5.2
    assert window.verify_steps == pytest.approx(200)
    assert window.accept_length == 1.5


def test_a_restarted_server_counts_from_zero() -> None:
    scrapes = [
        (0, PodSample(requests=50, transfer_failed=9)),
        (15, PodSample(requests=4, transfer_failed=2)),  # restarted: counters went down
        (30, PodSample(requests=6, transfer_failed=2)),
    ]
    window = reduce("p-1", "prefill", scrapes)
    assert (window.requests, window.failures) == (6, 2)


def test_one_scrape_shows_no_increase() -> None:
    window = reduce("d-1", "decode", [_decode(0, 1000, 2.0, verify=500, requests=10)])
    assert (window.verify_steps, window.requests, window.accept_length) == (0, 0, None)


# ---- the judgement --------------------------------------------------------------------------------------------------


def _pod(name: str, role: str = "decode", accept: float | None = 2.0, steps: float = 100, **kw: float) -> PodWindow:
    return PodWindow(name, role, accept, steps, kw.get("requests", 10), kw.get("failures", 0))  # type: ignore[arg-type]


def test_low_accept_length_under_traffic_is_false_and_names_pods_and_numbers() -> None:
    verdict = judge([_pod("x-decode-a-1", accept=1.0, steps=80), _pod("x-prefill-b-1", "prefill")], [], 60, SETTINGS)
    assert (verdict.spec_decode.reason.status, verdict.spec_decode.reason.reason) == ("False", "LowAcceptLength")
    assert verdict.spec_decode.message == (
        "mean accept length 1.00 < 1.1 over the last 60s: x-decode-a-1 1.00 (80 steps)"
    )
    assert verdict.accept_length == 1.0


def test_the_mean_is_weighted_by_verify_steps_across_decode_pods() -> None:
    verdict = judge([_pod("d-1", accept=1.0, steps=100), _pod("d-2", accept=3.0, steps=300)], [], 60, SETTINGS)
    assert verdict.accept_length == pytest.approx(2.5)
    assert verdict.spec_decode.reason.reason == "LearningBaseline"  # no expectation: the floor only


def test_too_few_verify_steps_is_unknown_no_traffic() -> None:
    verdict = judge([_pod("d-1", accept=1.0, steps=49)], [], 60, SETTINGS)
    assert (verdict.spec_decode.reason.status, verdict.spec_decode.reason.reason) == ("Unknown", "NoTraffic")
    assert "49 verify steps" in verdict.spec_decode.message and verdict.accept_length is None


def test_no_answering_decode_pod_is_unknown_and_names_the_silent_pods() -> None:
    verdict = judge([_pod("p-1", "prefill")], ["d-1"], 60, SETTINGS)
    assert verdict.spec_decode.reason.reason == "NoMetrics"
    assert "d-1" in verdict.spec_decode.message


def test_transfer_failures_above_the_rate_are_false() -> None:
    pods = [_pod("p-1", "prefill", failures=4), _pod("d-1", failures=2)]
    verdict = judge(pods, [], 60, SETTINGS)
    assert (verdict.transfer.reason.status, verdict.transfer.reason.reason) == ("False", "TransferFailures")
    assert verdict.transfer.message == ("6 bootstrap/transfer failures in the last 60s (0.10/s > 0.05/s): d-1 2, p-1 4")
    assert verdict.failures_per_second == pytest.approx(0.1)


def test_a_few_failures_or_a_low_rate_are_healthy() -> None:
    assert judge([_pod("p-1", "prefill", failures=2)], [], 10, SETTINGS).transfer.reason.reason == "NoTransferFailures"
    slow = judge([_pod("p-1", "prefill", failures=5)], [], 600, SETTINGS)  # 0.008/s
    assert slow.transfer.reason.status == "True"


def test_no_request_and_no_failure_is_unknown() -> None:
    verdict = judge([_pod("p-1", "prefill", requests=0), _pod("d-1", requests=0, steps=0)], [], 60, SETTINGS)
    assert (verdict.transfer.reason.status, verdict.spec_decode.reason.status) == ("Unknown", "Unknown")


# ---- Prometheus -----------------------------------------------------------------------------------------------------


def test_queries_select_one_service_s_pods_by_namespace_and_name() -> None:
    queries = {q.signal: q.promql for q in prometheus.queries("team-a", "llama", SETTINGS)}
    assert queries["accept_length"] == (
        'avg by (pod) (avg_over_time(sglang:spec_accept_length{namespace="team-a",'
        'pod=~"llama-(decode)-[0-9a-f]{8}(-[a-z0-9]+-[a-z0-9]+|-[0-9]+)",'
        'pod!~"llama-(decode)-[0-9a-f]{8}-[0-9]+-[0-9]{1,4}"}[60s]))'
    )
    # Per server (issue 29): each rank's bootstrap + transfer increase, the largest rank per DP group of a pod, summed
    # over the groups; no worker pod.
    pools = (
        'namespace="team-a",pod=~"llama-(prefill|decode)-[0-9a-f]{8}(-[a-z0-9]+-[a-z0-9]+|-[0-9]+)",'
        'pod!~"llama-(prefill|decode)-[0-9a-f]{8}-[0-9]+-[0-9]{1,4}"'
    )
    bootstrap = f"increase(sglang:num_bootstrap_failed_reqs_total{{{pools}}}[60s])"
    transfer = f"increase(sglang:num_transfer_failed_reqs_total{{{pools}}}[60s])"
    per_group = f"max by (pod, dp_rank) ({bootstrap} + {transfer} or {bootstrap} or {transfer})"
    assert queries["failures"] == f"sum by (pod) ({per_group})"
    assert set(queries) == set(prometheus.SIGNALS)


def _vector(values: dict[str, float]) -> dict[str, Any]:
    """A recorded `/api/v1/query` answer (Prometheus 3 JSON)."""
    result = [{"metric": {"pod": pod}, "value": [1733270000.123, str(value)]} for pod, value in values.items()]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def test_answers_become_windows_and_a_verdict() -> None:
    answers = {
        "accept_length": prometheus.per_pod(_vector({"llama-decode-0a1b2c3d-5d9f-x2": 1.02})),
        "verify_calls": prometheus.per_pod(_vector({})),  # 0.5.2: no such counter
        "generation_tokens": prometheus.per_pod(_vector({"llama-decode-0a1b2c3d-5d9f-x2": 510})),
        "requests": prometheus.per_pod(
            _vector({"llama-decode-0a1b2c3d-5d9f-x2": 16, "llama-prefill-0a1b2c3d-77aa-q1": 16})
        ),
        "failures": prometheus.per_pod(
            _vector({"llama-decode-0a1b2c3d-5d9f-x2": 0, "llama-prefill-0a1b2c3d-77aa-q1": 0})
        ),
    }
    windows = prometheus.windows("llama", answers)
    assert [(w.pod, w.role) for w in windows] == [
        ("llama-decode-0a1b2c3d-5d9f-x2", "decode"),
        ("llama-prefill-0a1b2c3d-77aa-q1", "prefill"),
    ]
    assert windows[0].verify_steps == pytest.approx(500)
    verdict = judge(windows, [], 60, SETTINGS)
    assert verdict.spec_decode.reason.reason == "LowAcceptLength"
    assert verdict.transfer.reason.reason == "NoTransferFailures"


def test_another_service_s_pods_are_not_taken() -> None:
    answers = {"requests": {"llama-decode-decode-0a1b2c3d-5d9f-x2": 3.0, "llama-decode-0a1b2c3d-5d9f-x2": 1.0}}
    assert [w.pod for w in prometheus.windows("llama", answers)] == ["llama-decode-0a1b2c3d-5d9f-x2"]


def test_the_pods_of_each_revision_s_deployments_are_taken() -> None:
    # A Deployment `<service>-<role>-<revision>` (names.deployment_name) names its pods `<deployment>-<hash>-<suffix>`.
    new, old = revision_name("9c20c58d5e553f62"), revision_name("3d810168411e2b52")
    pods = {f"llama-decode-{new}-5d9f8c7b6-x2x7q": 1.0, f"llama-decode-{old}-6c8d9f7b5-q1w2e": 1.0}
    windows = prometheus.windows("llama", {"requests": {**pods, f"llama-decode-decode-{new}-5d9f8c7b6-x2x7q": 3.0}})
    assert [(w.pod, w.role) for w in windows] == [(pod, "decode") for pod in sorted(pods)]


def test_leaderworkerset_workers_are_not_taken_their_leaders_are() -> None:
    """A multi-node server's worker pods (`<lws>-<group>-<worker>`) export their own ranks' failure counters (issue
    29); the leader (`<lws>-<group>`) speaks for the server. A Deployment's pod always ends in 5 random characters,
    digits included."""
    rev = revision_name("9c20c58d5e553f62")
    leaders = {f"llama-prefill-{rev}-0": 3.0, f"llama-decode-{rev}-1": 3.0}
    deployment = {f"llama-decode-{rev}-5984766-42957": 3.0}  # an all-digit hash and suffix
    workers = {f"llama-prefill-{rev}-0-1": 3.0, f"llama-decode-{rev}-1-1": 3.0, f"llama-decode-{rev}-12-3": 3.0}
    windows = prometheus.windows("llama", {"failures": {**leaders, **deployment, **workers}})
    assert sorted(w.pod for w in windows) == sorted({**leaders, **deployment})


def test_an_error_answer_is_refused() -> None:
    answer = {"status": "error", "errorType": "bad_data", "error": "parse error at char 5"}
    with pytest.raises(prometheus.BadAnswer, match="bad_data: parse error"):
        prometheus.per_pod(answer)
    with pytest.raises(prometheus.BadAnswer):
        prometheus.per_pod({"status": "success", "data": {"resultType": "matrix", "result": []}})


# ---- the monitor ----------------------------------------------------------------------------------------------------


def _pod_object(namespace: str, service: str, name: str, role: str, ip: str, ready: bool = True) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": namespace,
            "name": name,
            "labels": {"disaggspec.io/service": service, "disaggspec.io/role": role},
        },
        "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


class _Pods:
    """Fake pods whose `/metrics` answers are built from counters the test advances."""

    def __init__(self) -> None:
        self.tokens = 0.0
        self.accept = 2.0
        self.failures = 0.0
        self.silent: set[str] = set()
        self.requested: list[str] = []

    def fetch(self, url: str, timeout: float) -> bytes:
        self.requested.append(url)
        if any(ip in url for ip in self.silent):
            raise TimeoutError("timed out")
        steps = self.tokens / self.accept
        if "10.0.0.2" in url:
            text = f"sglang:num_requests_total 0\nsglang:num_transfer_failed_reqs_total {self.failures}\n"
        else:
            text = (
                f"sglang:spec_accept_length {self.accept}\nsglang:spec_verify_calls_total {steps}\n"
                f"sglang:generation_tokens_total {self.tokens}\nsglang:num_requests_total {self.tokens / 30}\n"
            )
        return text.encode()


def _monitor(pods: _Pods, requeued: list[Any], clock: list[float], **settings: Any) -> Monitor:
    listed = [
        _pod_object("ns", "llama", "llama-decode-a-1", "decode", "10.0.0.1"),
        _pod_object("ns", "llama", "llama-prefill-b-1", "prefill", "10.0.0.2"),
        _pod_object("ns", "llama", "llama-decode-a-2", "decode", "10.0.0.3", ready=False),
        _pod_object("ns", "other", "other-decode-a-1", "decode", "10.0.0.9"),  # no such service: not scraped
    ]
    return Monitor(
        HealthSettings(**{"window_seconds": 60, "min_verify_steps": 50, **settings}),
        list_pods=lambda: listed,
        services=lambda: [("ns", "llama")],
        requeue=requeued.extend,
        fetch=pods.fetch,
        clock=lambda: clock[0],
    )


def _gauge(name: str) -> float | None:
    return metrics.REGISTRY.get_sample_value(name, {"namespace": "ns", "service": "llama"})


def test_the_monitor_judges_requeues_on_change_only_and_sets_the_gauges() -> None:
    pods, requeued, clock = _Pods(), [], [0.0]
    monitor = _monitor(pods, requeued, clock)
    assert monitor.verdict("ns", "llama") is PENDING  # no verdict of this process yet: status keeps its conditions
    monitor.run_once()
    assert {url.split("/")[2] for url in pods.requested} == {"10.0.0.1:30000", "10.0.0.2:30000"}  # ready pods only
    first = monitor.verdict("ns", "llama").spec_decode
    assert first.reason.reason == "NoTraffic" and first.provisional  # one scrape, history shorter than the window
    assert requeued == [("ns", "llama")]
    assert _gauge("disaggspec_spec_accept_length") is None

    pods.accept, pods.tokens, clock[0] = 1.0, 300.0, 15.0
    monitor.run_once()
    verdict = monitor.verdict("ns", "llama")
    assert verdict.spec_decode.reason.reason == "LowAcceptLength", verdict
    assert "llama-decode-a-1 1.00 (300 steps)" in verdict.spec_decode.message
    assert requeued == [("ns", "llama")] * 2
    assert _gauge("disaggspec_spec_accept_length") == 1.0

    pods.tokens, clock[0] = 600.0, 30.0  # still low: no requeue
    monitor.run_once()
    assert len(requeued) == 2

    pods.failures, clock[0] = 10.0, 45.0
    monitor.run_once()
    assert monitor.verdict("ns", "llama").transfer.reason.reason == "TransferFailures"
    assert _gauge("disaggspec_transfer_failures_per_second") == pytest.approx(10 / 45)
    assert len(requeued) == 3

    metrics.record_runtime_conditions("ns", "llama", {"SpecDecodeHealthy": "False", "TransferHealthy": "True"})
    assert (_gauge("disaggspec_spec_decode_healthy"), _gauge("disaggspec_transfer_healthy")) == (0, 1)
    monitor.forget("ns", "llama")
    assert _gauge("disaggspec_spec_decode_healthy") is None and _gauge("disaggspec_transfer_healthy") is None
    assert _gauge("disaggspec_transfer_failures_per_second") is None


def test_a_silent_pod_is_named_and_costs_only_its_own_measurement() -> None:
    pods, requeued, clock = _Pods(), [], [0.0]
    pods.silent = {"10.0.0.1"}
    monitor = _monitor(pods, requeued, clock)
    monitor.run_once()
    verdict = monitor.verdict("ns", "llama")
    assert verdict.spec_decode.reason.reason == "NoMetrics"
    assert "no answer from llama-decode-a-1" in verdict.spec_decode.message


def test_the_prometheus_source_asks_prometheus_not_the_pods() -> None:
    asked: list[str] = []

    def fetch(url: str, timeout: float) -> bytes:
        asked.append(url)
        if "failed_reqs" in url:
            return json.dumps(_vector({"llama-prefill-0a1b2c3d-77aa-q1": 30})).encode()
        return json.dumps(_vector({})).encode()

    monitor = Monitor(
        HealthSettings(source="prometheus", prometheus_url="http://prom:9090", window_seconds=60),
        list_pods=lambda: pytest.fail("the Prometheus source lists no pods"),
        services=lambda: [("ns", "llama")],
        requeue=lambda keys: None,
        fetch=fetch,
    )
    monitor.run_once()
    assert len(asked) == len(prometheus.SIGNALS) and all(
        u.startswith("http://prom:9090/api/v1/query?query=") for u in asked
    )
    verdict = monitor.verdict("ns", "llama")
    assert (
        verdict.transfer.reason.reason == "TransferFailures"
        and "llama-prefill-0a1b2c3d-77aa-q1 30" in verdict.transfer.message
    )
    assert verdict.spec_decode.reason.reason == "NoMetrics"  # no decode pod in any answer


def test_a_failing_prometheus_is_unknown_with_the_error() -> None:
    def fetch(url: str, timeout: float) -> bytes:
        raise OSError("connection refused")

    monitor = Monitor(
        HealthSettings(source="prometheus", prometheus_url="http://prom:9090"),
        list_pods=list,
        services=lambda: [("ns", "llama")],
        requeue=lambda keys: None,
        fetch=fetch,
    )
    monitor.run_once()
    verdict = monitor.verdict("ns", "llama")
    assert verdict.transfer.reason.reason == "NoMetrics" and "connection refused" in verdict.transfer.message


# ---- settings -------------------------------------------------------------------------------------------------------


def test_settings_come_from_the_environment() -> None:
    assert health_from_env({}) == HealthSettings()
    assert health_from_env({"DISAGGSPEC_HEALTH_PROMETHEUS_URL": "http://p:9090/"}).source == "prometheus"
    assert health_from_env({"DISAGGSPEC_HEALTH_SOURCE": "off", "DISAGGSPEC_HEALTH_PROMETHEUS_URL": "x"}).source == "off"
    tuned = health_from_env({"DISAGGSPEC_HEALTH_WINDOW_SECONDS": "20", "DISAGGSPEC_HEALTH_MIN_ACCEPT_LENGTH": "1.3"})
    assert (tuned.window_seconds, tuned.min_accept_length) == (20, 1.3)
    with pytest.raises(ValueError, match="INTERVAL_SECONDS"):
        health_from_env({"DISAGGSPEC_HEALTH_INTERVAL_SECONDS": "0"})
    with pytest.raises(ValueError, match="SOURCE"):
        health_from_env({"DISAGGSPEC_HEALTH_SOURCE": "prometheus"})


def test_the_scrape_source_reads_a_multi_node_server_from_its_leader_only() -> None:
    """Issue 29: a LeaderWorkerSet worker's /metrics carries its own ranks' failure counters (each failure again);
    the monitor scrapes leaders (worker-index 0) and single-node pods only, and counts each failure once."""
    leader = _pod_object("ns", "llama", "llama-prefill-0a1b2c3d-0", "prefill", "10.0.1.1")
    worker = _pod_object("ns", "llama", "llama-prefill-0a1b2c3d-0-1", "prefill", "10.0.1.2")
    leader["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"] = "0"
    worker["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"] = "1"
    failed, clock, requested = [0.0], [0.0], []

    def fetch(url: str, timeout: float) -> bytes:
        """Eight ranks' series on either pod (the worker's would be ranks 8-15: the same counts)."""
        requested.append(url)
        return (_ranks(samples.REQUESTS, [failed[0]]) + _ranks(samples.TRANSFER_FAILED, [failed[0]] * 8)).encode()

    monitor = Monitor(
        HealthSettings(window_seconds=60),
        list_pods=lambda: [leader, worker],
        services=lambda: [("ns", "llama")],
        requeue=lambda keys: None,
        fetch=fetch,
        clock=lambda: clock[0],
    )
    monitor.run_once()
    failed[0], clock[0] = 6.0, 15.0
    monitor.run_once()
    assert {url.split("/")[2] for url in requested} == {"10.0.1.1:30000"}
    message = monitor.verdict("ns", "llama").transfer.message
    assert message.startswith("6 bootstrap/transfer failures") and "llama-prefill-0a1b2c3d-0 6" in message, message
