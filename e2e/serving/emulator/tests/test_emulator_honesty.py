"""Honesty: every route, metric, message and environment variable the emulator claims is in the pinned wheel, where
facts.py cites it; and the emulator serves exactly the routes of its release (others are 404, as FastAPI answers)."""

from __future__ import annotations

import re

import pytest
from aiohttp import web

from e2e.serving.emulator import dp, facts
from e2e.serving.emulator.metrics import Metrics
from e2e.serving.emulator.options import parse_options
from e2e.serving.emulator.pd import BootstrapServer
from e2e.serving.emulator.server import EmulatorServer
from e2e.serving.emulator.sglang_args import server_config
from e2e.serving.emulator.tests.harness import REPO, sglang_args
from e2e.serving.emulator.tests.sglang_sources import read, sglang_tree

VERSIONS = facts.VERSIONS


@pytest.fixture(autouse=True)
def _trees() -> None:
    for version in VERSIONS:
        if sglang_tree(version) is None:
            pytest.skip(f"no SGLang {version} wheel tree (images/sglang/check-patches.sh --print-tree {version})")


def _line(version: str, citation: str) -> str:
    path, _, number = citation.rpartition(":")
    first = int(number.split("-")[0])
    lines = read(version, path).splitlines()
    return "\n".join(lines[first - 1 : first + 4])


def _declares_route(text: str, path: str) -> bool:
    quoted = re.escape(f'"{path}"')
    return (
        re.search(
            rf"(@(app|router)\.(get|post|put|api_route|route)\(\s*{quoted}|add_(route|get|post)\([^)]*{quoted}|Mount\({quoted})",
            text,
        )
        is not None
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_http_routes_are_where_facts_says(version: str) -> None:
    version_facts = facts.facts_for(version)
    for route in (*version_facts.http_routes, version_facts.metrics_route):
        window = _line(version, route.source)
        assert _declares_route(window, route.path), f"{version}: {route.path} not declared at {route.source}:\n{window}"


@pytest.mark.parametrize("version", VERSIONS)
def test_worker_node_routes_are_where_facts_says(version: str) -> None:
    """The dummy health-check server of a node with rank >= 1: every route facts lists is declared where it says, and
    launch_dummy_health_check_server declares no other (it adds the metrics exporter with --enable-metrics)."""
    routes = facts.facts_for(version).worker_routes
    for route in routes:
        window = _line(version, route.source)
        assert _declares_route(window, route.path), f"{version}: {route.path} not at {route.source}:\n{window}"
    path = routes[0].source.rpartition(":")[0]
    source = read(version, path)
    body = source[source.index("def launch_dummy_health_check_server") :]
    body = body[: body.index("\ndef ", 1)]
    assert sorted(re.findall(r'@app\.get\("([^"]+)"\)', body)) == sorted(r.path for r in routes)
    assert "if enable_metrics:\n        add_prometheus_middleware(app)" in body


@pytest.mark.parametrize("version", VERSIONS)
def test_worker_node_serves_exactly_those_routes(version: facts.Version) -> None:
    args = [*sglang_args("decode"), "--tp-size", "2", "--nnodes", "2", "--node-rank", "1"]
    cfg = server_config(version, [*args, "--dist-init-addr", "h:20000"])
    server = EmulatorServer(cfg, parse_options([]), bind="127.0.0.1", pod_name="p", drain_timeout=1)
    app = server._build_worker_app()
    served = {(r.method, r.resource.canonical) for r in app.router.routes() if r.resource is not None}
    expected = {(m, rt.path) for rt in facts.facts_for(version).worker_routes for m in rt.methods}
    assert served == expected | {("GET", "/metrics"), ("GET", "/metrics/{rest}")}


@pytest.mark.parametrize("version", VERSIONS)
def test_bootstrap_routes_are_where_facts_says(version: str) -> None:
    for route in facts.facts_for(version).bootstrap_routes:
        window = _line(version, route.source)
        assert _declares_route(window, route.path), f"{version}: {route.path} not at {route.source}:\n{window}"


def test_routes_absent_from_a_release_are_really_absent() -> None:
    """What the emulator answers 404 for, because the release has no such route."""
    http_052 = read("0.5.2", facts.HTTP_SERVER)
    http_0523 = read("0.5.23", facts.HTTP_SERVER) + read("0.5.23", "sglang/srt/entrypoints/v1_loads.py")
    for path in ("/ready", "/model_info", "/server_info", "/v1/loads", "/loads"):
        assert not _declares_route(http_052, path), path
    for path in ("/get_load", "/loads"):
        assert not _declares_route(http_0523, path), path


@pytest.mark.parametrize("version", VERSIONS)
def test_metrics_are_defined_where_facts_says(version: str) -> None:
    for metric in facts.facts_for(version).metrics:
        window = _line(version, metric.source)
        assert f'name="{metric.defined_as}"' in window, f"{version}: {metric.defined_as} not at {metric.source}"


@pytest.mark.parametrize("version", VERSIONS)
def test_exported_metric_names_exist_in_the_release(version: str) -> None:
    """Every sample family the emulator's /metrics shows is one SGLang defines (collector sources of that release)."""
    collector = (
        "sglang/srt/metrics/collector.py" if version == "0.5.2" else "sglang/srt/observability/metrics_collector.py"
    )
    source = read(version, collector)
    defined = set(re.findall(r'name="(sglang:[A-Za-z0-9_]+)"', source))
    metrics = Metrics(facts.facts_for(version), "m", "decode")
    exposition = metrics.exposition().decode()
    families = set(re.findall(r"^# TYPE (\S+) ", exposition, flags=re.M))
    assert families, exposition
    for family in families:
        # prometheus_client (SGLang's exporter too) shows a counter as <name>_total whether or not name= had it.
        known = {family, family + "_total", family.removesuffix("_total")}
        assert known & defined, f"{version}: {family} is not an SGLang metric"
    for sample in re.findall(r"^(sglang:[a-z_]+)\{", exposition, flags=re.M):
        assert any(sample == f or sample.startswith(f + "_") for f in families), sample


@pytest.mark.parametrize("version", VERSIONS)
def test_served_routes_are_the_release_routes(version: facts.Version) -> None:
    cfg = server_config(version, sglang_args("decode"))
    server = EmulatorServer(cfg, parse_options([]), bind="127.0.0.1", pod_name="p", drain_timeout=1)
    served = {
        (method, r.resource.canonical)
        for r in server.app.router.routes()
        if r.resource is not None and not r.resource.canonical.startswith(facts.EMULATOR_PREFIX)
        for method in [r.method]
    }
    expected = {
        (m, rt.path.replace("{model:path}", "{model}"))
        for rt in facts.facts_for(version).http_routes
        for m in rt.methods
    }
    expected |= {("GET", "/metrics"), ("GET", "/metrics/{rest}")}
    assert served == expected
    bootstrap = BootstrapServer(version, "127.0.0.1", 1)
    real = {
        (r.method, r.resource.canonical)
        for r in bootstrap.app.router.routes()
        if r.resource is not None and not r.resource.canonical.startswith(facts.EMULATOR_PREFIX)
    }
    claimed = {(m, rt.path) for rt in facts.facts_for(version).bootstrap_routes for m in rt.methods}
    assert {path for _, path in real} == {path for _, path in claimed}
    assert isinstance(server.app, web.Application)


_MC = "sglang/srt/disaggregation/mooncake/conn.py"
_CC = "sglang/srt/disaggregation/common/conn.py"
_DEC = "sglang/srt/disaggregation/decode.py"
_PRE = "sglang/srt/disaggregation/prefill.py"
_ENV = "sglang/srt/environ.py"
NEEDLES = [
    ("0.5.2", _MC, "Could not fetch prefill parallel info from bootstrap_addr"),
    ("0.5.2", _MC, "Could not fetch bootstrap info for engine rank"),
    ("0.5.2", _MC, "in KVPoll.WaitingForInput"),
    ("0.5.2", _MC, "in KVPoll.Bootstrapping"),
    ("0.5.2", _MC, "Losing connection with prefill instance"),
    ("0.5.2", _MC, "Failed to get kvcache from prefill instance, it might be dead"),
    ("0.5.2", _MC, "Failed to send kv chunk of"),
    ("0.5.2", _MC, "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT"),
    ("0.5.2", _MC, "SGLANG_DISAGGREGATION_WAITING_TIMEOUT"),
    ("0.5.2", _MC, "SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL"),
    ("0.5.2", _MC, "SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE"),
    ("0.5.2", _DEC, "Decode handshake failed for request rank="),
    ("0.5.2", _DEC, "Decode transfer failed for request rank="),
    ("0.5.2", _PRE, "Prefill bootstrap failed for request rank="),
    ("0.5.2", _PRE, "Prefill transfer failed for request rank="),
    ("0.5.2", "sglang/srt/disaggregation/utils.py", 'FAKE_BOOTSTRAP_HOST = "2.2.2.2"'),
    ("0.5.2", "sglang/srt/managers/scheduler.py", "boostrap room id"),
    ("0.5.2", facts.HTTP_SERVER, "Health check request received during shutdown. Returning 503."),
    ("0.5.2", "sglang/srt/managers/tokenizer_manager.py", "Draining requests and shutting down"),
    ("0.5.23", _CC, "Could not fetch prefill parallel info from bootstrap_addr"),
    ("0.5.23", _CC, "Prefill server not fully registered yet"),
    ("0.5.23", _CC, "in KVPoll.WaitingForInput"),
    ("0.5.23", _CC, "Failed to get kvcache from prefill instance, it might be dead"),
    ("0.5.23", _CC, "Page size mismatch: prefill server has page_size="),
    ("0.5.23", _DEC, "Could not fetch prefill parallel info from {bootstrap_addr} after"),
    ("0.5.23", _DEC, "self._max_ensure_retries: int = 15"),
    ("0.5.23", _DEC, "self._ensure_retry_interval: float = 1.0"),
    ("0.5.23", _ENV, "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT = EnvInt(300)"),
    ("0.5.23", _ENV, "SGLANG_DISAGGREGATION_WAITING_TIMEOUT = EnvInt(300)"),
    ("0.5.23", _ENV, "SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL = EnvFloat(5.0)"),
    ("0.5.23", _ENV, "SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE = EnvInt(2)"),
    ("0.5.23", _ENV, "SGLANG_DISAGGREGATION_ZMQ_SEND_TIMEOUT = EnvInt(1)"),
    ("0.5.23", _CC, "SGLANG_DISAGGREGATION_ZMQ_SEND_TIMEOUT.get() * 1000"),
    ("0.5.23", _CC, 'operation: Literal["_register_kv_args", "send_metadata"]'),
    ("0.5.23", _ENV, "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION = EnvBool(True)"),
    ("0.5.23", "sglang/srt/managers/scheduler.py", "bootstrap room id"),
    # fail=load-failure and fail=crash: the loader's error, the scheduler's report and the server's SIGQUIT handler.
    *(
        (version, path, needle)
        for version in ("0.5.2", "0.5.23")
        for path, needle in (
            ("sglang/srt/model_loader/loader.py", "Cannot find any model weights with"),
            ("sglang/srt/managers/scheduler.py", "Scheduler hit an exception: {traceback}"),
            ("sglang/srt/entrypoints/engine.py", "Received sigquit from a child process. It usually means the child"),
        )
    ),
]


# Multi-node (group.py, server.py, cli.py): the code the comments cite is where they say (the cited line and the
# four after it contain the needle), and the messages the emulator logs are SGLang's.
CITED = [
    ("0.5.2", "sglang/srt/entrypoints/engine.py:805", "if server_args.node_rank >= 1:"),
    ("0.5.2", "sglang/srt/entrypoints/engine.py:817", "launch_dummy_health_check_server("),
    ("0.5.2", "sglang/srt/entrypoints/engine.py:695", "def launch_phase_sigquit_handler"),
    ("0.5.2", "sglang/srt/managers/scheduler.py:1094", "broadcast_pyobj("),
    ("0.5.2", "sglang/srt/model_executor/model_runner.py:619", 'dist_init_method = f"tcp://{self.server_args.dist_'),
    ("0.5.2", "sglang/srt/managers/tokenizer_manager.py:1042", "signal.SIGTERM, signal_handler.sigterm_handler"),
    ("0.5.2", "sglang/srt/server_args.py:2251", '% self.nnodes == 0, "tp_size must be divisible by number of nodes"'),
    ("0.5.2", "sglang/srt/server_args.py:2623", 'elif server_args.dist_init_addr.startswith("["):'),
    ("0.5.2", "sglang/srt/server_args.py:233", "nnodes: int = 1"),
    ("0.5.2", "sglang/srt/server_args.py:1414", '"--dist-init-addr",'),
    ("0.5.2", "sglang/srt/server_args.py:1421", '"--nnodes", type=int'),
    ("0.5.2", "sglang/srt/server_args.py:1424", '"--node-rank", type=int'),
    ("0.5.23", "sglang/srt/entrypoints/engine.py:1234", "if get_parallel().node_rank >= 1:"),
    ("0.5.23", "sglang/srt/entrypoints/engine.py:1281", "launch_dummy_health_check_server("),
    ("0.5.23", "sglang/srt/entrypoints/engine.py:1264", "def sigterm_handler(signum, frame):"),
    ("0.5.23", "sglang/srt/entrypoints/engine.py:1976", "def launch_phase_sigquit_handler"),
    ("0.5.23", "sglang/srt/managers/scheduler_components/request_receiver.py:204", "broadcast_pyobj("),
    ("0.5.23", "sglang/srt/managers/tokenizer_manager.py:3544", "self._dispatch_to_scheduler(ShutdownReq())"),
    ("0.5.23", "sglang/srt/distributed/bootstrap.py:241", "elif get_parallel().dist_init_addr:"),
    ("0.5.23", "sglang/srt/arg_groups/validation_hook.py:179", "% cfg.nnodes == 0"),
    ("0.5.23", "sglang/srt/arg_groups/fields/parallel.py:43", "nnodes: A[int"),
    ("0.5.23", "sglang/srt/arg_groups/fields/parallel.py:32", "dist_init_addr: A["),
]


@pytest.mark.parametrize(("version", "citation", "needle"), CITED)
def test_multi_node_citations_point_at_the_code(version: str, citation: str, needle: str) -> None:
    window = _line(version, citation)
    assert needle in window, f"{version} {citation}:\n{window}"


NEEDLES += [
    ("0.5.2", "sglang/srt/utils.py", 'logger.info(f"Starting dummy health check server at {host}:{port}")'),
    ("0.5.23", "sglang/srt/utils/common.py", 'f"Dummy health check server started in background thread at '),
    ("0.5.23", "sglang/srt/entrypoints/engine.py", 'f"SIGTERM received on node_rank {get_parallel().node_rank}; "'),
    ("0.5.23", "sglang/srt/entrypoints/engine.py", '"waiting for the rank-0 ShutdownReq broadcast to stop "'),
    ("0.5.23", "sglang/srt/arg_groups/validation_hook.py", '"tp_size must be divisible by number of nodes"'),
]


@pytest.mark.parametrize(("version", "path", "needle"), NEEDLES)
def test_messages_and_environment_variables_exist(version: str, path: str, needle: str) -> None:
    assert needle in read(version, path), needle


def test_fingerprint_fields_and_messages_are_patch_0001s() -> None:
    from e2e.serving.emulator import fingerprint

    patch = (REPO / "images/sglang/patches/0.5.23/0001-topk-row-follows-config-and-spec-fingerprint.patch").read_text()
    fields = re.search(r"SPEC_FINGERPRINT_FIELDS = \((.*?)\)", patch, flags=re.S)
    assert fields is not None
    draft_probs = REPO / "images/sglang/patches/0.5.23/0003-carry-draft-proposal-for-rejection-sampling.patch"
    added = re.search(r'     "topk_buffer_width",\n((?:\+    "[a-z_]+",\n)+) \)', draft_probs.read_text())
    assert added is not None, "patch 0003 no longer appends to SPEC_FINGERPRINT_FIELDS"
    expected = (*re.findall(r'"([a-z_]+)"', fields.group(1)), *re.findall(r'"([a-z_]+)"', added.group(1)))
    assert expected == fingerprint.FIELDS
    assert "Speculative config mismatch between prefill and decode (" in patch
    handshake = (REPO / "images/sglang/patches/0.5.23/0002-handshake-refuses-mismatched-prefill.patch").read_text()
    assert '"spec_fingerprint": self.spec_fingerprint' in handshake
    assert 'f"Prefill server {bootstrap_addr} refused: {mismatch}"' in handshake
    assert "refusing it for %.0f s." in handshake and "self._refused_prefill_backoff: float = 30.0" in handshake
    assert f"{fingerprint.DRAFT_PROBS_ENV} = EnvBool(False)" in draft_probs.read_text()
    for patch_file in (REPO / "images/sglang/patches/0.5.2").glob("*.patch"):
        assert "fingerprint" not in patch_file.read_text(), f"{patch_file.name}: 0.5.2 is documented as having none"


# facts.EVERY_RANK: each rank builds a labelled collector (no rank test around it), the KV polls are all-reduced, and
# each failure is counted behind `enable_metrics` alone.
COLLECTOR_CITED = [
    ("0.5.2", "sglang/srt/managers/scheduler_metrics_mixin.py:52", "if self.enable_metrics:"),
    ("0.5.2", "sglang/srt/managers/scheduler_metrics_mixin.py:57", '"tp_rank": tp_rank,'),
    ("0.5.2", "sglang/srt/managers/scheduler_metrics_mixin.py:62", "= SchedulerMetricsCollector(labels=labels)"),
    ("0.5.2", "sglang/srt/disaggregation/utils.py:39", "def poll_and_all_reduce(pollers, gloo_group):"),
    ("0.5.2", "sglang/srt/disaggregation/utils.py:51", "dist.all_reduce(tensor_to_reduce, op=dist.ReduceOp.MIN"),
    ("0.5.23", "sglang/srt/observability/metrics_collector.py:1375", "if enable_metrics:"),
    ("0.5.23", "sglang/srt/observability/metrics_collector.py:1385", '"tp_rank": parallel.tp_rank,'),
]
EVERY_RANK_CITED = [
    ("0.5.2", "sglang/srt/disaggregation/prefill.py:243", "metrics_collector.increment_bootstrap_failed_reqs()"),
    ("0.5.2", "sglang/srt/disaggregation/prefill.py:529", "metrics_collector.increment_transfer_failed_reqs()"),
    ("0.5.2", "sglang/srt/disaggregation/decode.py:339", "metrics_collector.increment_bootstrap_failed_reqs()"),
    ("0.5.2", "sglang/srt/disaggregation/decode.py:602", "metrics_collector.increment_transfer_failed_reqs()"),
    ("0.5.23", "sglang/srt/disaggregation/prefill.py:1311", "metrics_collector.increment_transfer_failed_reqs()"),
    ("0.5.23", "sglang/srt/disaggregation/prefill.py:1376", "metrics_collector.increment_bootstrap_failed_reqs()"),
    ("0.5.23", "sglang/srt/disaggregation/decode.py:1176", "metrics_collector.increment_bootstrap_failed_reqs()"),
    ("0.5.23", "sglang/srt/disaggregation/decode.py:2826", "metrics_collector.increment_transfer_failed_reqs()"),
    ("0.5.23", "sglang/srt/disaggregation/decode.py:3372", "metrics_collector.increment_transfer_failed_reqs()"),
]


@pytest.mark.parametrize(("version", "citation", "needle"), COLLECTOR_CITED)
def test_every_rank_builds_a_labelled_collector_where_facts_says(version: str, citation: str, needle: str) -> None:
    window = _line(version, citation)
    assert needle in window, f"{version} {citation}:\n{window}"


@pytest.mark.parametrize(("version", "citation", "needle"), EVERY_RANK_CITED)
def test_failure_counters_are_counted_on_every_rank_where_facts_says(version: str, citation: str, needle: str) -> None:
    window = _line(version, citation)
    assert needle in window, f"{version} {citation}:\n{window}"
    assert "enable_metrics" in window.splitlines()[0], f"{version} {citation}: not gated by enable_metrics"
    for word in ("attn_tp_rank", "tp_rank == 0", "current_scheduler_metrics_enabled"):
        assert word not in window.splitlines()[0], f"{version} {citation}: gated by the rank"


def test_the_emulator_exports_the_failure_counters_per_rank() -> None:
    metrics = Metrics(facts.facts_for("0.5.23"), "m", "prefill", tp_ranks=range(8))
    metrics.increment_transfer_failed_reqs()
    text = metrics.exposition().decode()
    ranks = re.findall(r'^sglang:num_transfer_failed_reqs_total\{.*tp_rank="(\d+)".*\} 1\.0$', text, flags=re.M)
    assert sorted(ranks, key=int) == [str(rank) for rank in range(8)]
    for version in VERSIONS:
        assert facts.EVERY_RANK.issubset(metric.exposed for metric in facts.facts_for(version).metrics)


DP_LABEL_CITED = [
    ("0.5.2", "sglang/srt/managers/scheduler_metrics_mixin.py:60", 'labels["dp_rank"] = dp_rank'),
    ("0.5.23", "sglang/srt/observability/metrics_collector.py:1391", 'labels["dp_rank"] = parallel.dp_rank'),
    ("0.5.2", "sglang/srt/managers/scheduler.py:2483", "return self.attn_tp_rank == 0"),
]


@pytest.mark.parametrize(("version", "citation", "needle"), DP_LABEL_CITED)
def test_dp_schedulers_label_their_series_where_the_metrics_module_says(
    version: str, citation: str, needle: str
) -> None:
    window = _line(version, citation)
    assert needle in window, f"{version} {citation}:\n{window}"


def _label(labels: str, name: str) -> str:
    found = re.search(rf'{name}="([^"]*)"', labels)
    assert found is not None, (name, labels)
    return found[1]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_dp_server_exports_gauges_per_dp_rank_and_counts_failures_per_dp_group(version: str) -> None:
    """tp 8, DP attention 4: the gauges of each DP group's attention-TP rank 0 (tp_rank 0, 2, 4, 6) with its
    dp_rank; a failed request of DP group 1 counted by its two TP ranks only."""
    metrics = Metrics(facts.facts_for(version), "m", "decode", tp_ranks=range(8), dp_size=4, attn_tp_size=2)
    metrics.set_queues(running=3, queued=1, prefill_bootstrap=0, prefill_inflight=0, dp_rank=2)
    metrics.increment_transfer_failed_reqs(1)
    text = metrics.exposition().decode()
    running = re.findall(r"^sglang:num_running_reqs\{(.*)\} (\S+)$", text, flags=re.M)
    ranks = sorted((_label(labels, "tp_rank"), _label(labels, "dp_rank"), value) for labels, value in running)
    assert ranks == [("0", "0", "0.0"), ("2", "1", "0.0"), ("4", "2", "3.0"), ("6", "3", "0.0")]
    failed = re.findall(r"^sglang:num_transfer_failed_reqs_total\{(.*)\} 1\.0$", text, flags=re.M)
    assert sorted(_label(labels, "tp_rank") for labels in failed) == ["2", "3"]
    assert all('dp_rank="1"' in labels for labels in failed)
    single = Metrics(facts.facts_for(version), "m", "decode").exposition().decode()
    assert "dp_rank" not in single  # without data parallelism SGLang passes dp_rank None: no such label


# DP attention (dp.py): every rule the emulator follows is where DP_FACTS cites it, and the messages it prints for a
# refused layout are SGLang's.
@pytest.mark.parametrize("fact", dp.DP_FACTS, ids=lambda f: f"{f.version}:{f.source}")
def test_dp_facts_point_at_the_code(fact: dp.Fact) -> None:
    window = _line(fact.version, fact.source)
    assert fact.needle in window, f"{fact.version} {fact.source} ({fact.claim}):\n{window}"


DP_MESSAGES = [
    ("0.5.2", "sglang/srt/server_args.py", '"Prefill round robin balance is required when dp size > 1. "'),
    (
        "0.5.2",
        "sglang/srt/server_args.py",
        '"Different tp size is supported only when one tp is multiple of the other. "',
    ),
    ("0.5.2", "sglang/srt/server_args.py", '"Cannot set --disaggregation-decode-dp for the decode engine."'),
    ("0.5.2", "sglang/srt/server_args.py", '"Cannot set --disaggregation-decode-tp for the decode engine."'),
    ("0.5.23", "sglang/srt/arg_groups/parallel_hook.py", '"are not supported."'),
    (
        "0.5.23",
        "sglang/srt/arg_groups/parallel_hook.py",
        'f"--attn-dp-size must be positive (got {cfg.attn_dp_size}).")',
    ),
    (
        "0.5.23",
        "sglang/srt/disaggregation/common/conn.py",
        'f"Set SGLANG_DISAGGREGATION_FORCE_QUERY_PREFILL_DP_RANK=1 "',
    ),
    ("0.5.23", "sglang/srt/disaggregation/common/conn.py", 'self.app.router.add_post("/query_dp_ranks"'),
]


@pytest.mark.parametrize(("version", "path", "needle"), DP_MESSAGES)
def test_dp_messages_are_sglangs(version: str, path: str, needle: str) -> None:
    assert needle in read(version, path), needle


def test_dp_layouts_resolve_like_each_release() -> None:
    """The layout each spelling resolves to (dp.layout), for the cases the operator renders."""
    base = ["--model-path", "m", "--disaggregation-mode", "prefill", "--tp-size", "8"]
    old = dp.layout(server_config("0.5.2", [*base, "--enable-dp-attention", "--dp-size", "8"]))
    assert (old.attn_dp_size, old.system_dp_size, old.attn_tp_size, old.load_balance_method) == (8, 1, 1, "round_robin")
    new = dp.layout(server_config("0.5.23", [*base, "--attn-dp-size", "4"]))
    assert (new.attn_dp_size, new.attn_tp_size, new.load_balance_method) == (4, 2, "follow_bootstrap_room")
    deprecated = dp.layout(server_config("0.5.23", [*base, "--enable-dp-attention", "--dp-size", "4"]))
    assert (deprecated.attn_dp_size, deprecated.system_dp_size) == (4, 1)
    off = dp.layout(server_config("0.5.2", [*base, "--enable-dp-attention", "--dp-size", "1"]))
    assert (off.attn_dp_size, off.attn_tp_size) == (1, 8)  # dp_size 1 turns DP attention off
