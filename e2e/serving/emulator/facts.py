"""Per-release facts the emulator mirrors: HTTP routes, bootstrap-server routes, metric names, argparse program name.

Every entry cites `file:line` inside the pinned wheel (`sglang==0.5.2`, `sglang==0.5.23`, unpacked by
images/sglang/check-patches.sh); tests/test_emulator_honesty.py reads those sources and fails when a route or metric
listed here is not where it says. Paths are relative to the wheel root (`sglang/...`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

Version = Literal["0.5.2", "0.5.23"]
VERSIONS: Final[tuple[Version, ...]] = ("0.5.2", "0.5.23")

HTTP_SERVER: Final = "sglang/srt/entrypoints/http_server.py"
FAKE_BOOTSTRAP_HOST: Final = "2.2.2.2"
"""sglang/srt/disaggregation/utils.py:22 (0.5.2; same value in 0.5.23): a request with this bootstrap host uses the
fake transfer backend (warmup and health-check requests of a PD server)."""

EMULATOR_PREFIX: Final = "/emulator/"
"""Routes under this prefix exist only in the emulator (the per-room handshake SGLang carries over ZMQ)."""


@dataclass(frozen=True)
class Route:
    """One route of a real SGLang server: its methods, path and where the real one is declared."""

    methods: tuple[str, ...]
    path: str
    source: str
    """`file:line` of the decorator (or add_route call) in the wheel."""


@dataclass(frozen=True)
class Metric:
    """One Prometheus metric family as SGLang defines it."""

    defined_as: str
    """The `name=` string in the source (prometheus_client appends `_total` to a counter without it)."""
    kind: Literal["counter", "gauge", "histogram"]
    scope: Literal["tokenizer", "scheduler"]
    """Which collector owns it, hence its base labels (see `base_labels`)."""
    source: str
    extra_labels: tuple[str, ...] = ()

    @property
    def family(self) -> str:
        """The metric family name prometheus_client derives (a counter's `_total` suffix is stripped)."""
        if self.kind == "counter" and self.defined_as.endswith("_total"):
            return self.defined_as[: -len("_total")]
        return self.defined_as

    @property
    def exposed(self) -> str:
        """The sample name a scraper sees (`<family>_total` for counters)."""
        return self.family + "_total" if self.kind == "counter" else self.family


@dataclass(frozen=True)
class VersionFacts:
    version: Version
    prog: str
    """argparse's program name in error messages: 0.5.2 builds `argparse.ArgumentParser()` in
    sglang/srt/server_args.py:2563 (prog = basename of sys.argv[0], `launch_server.py` under `python -m
    sglang.launch_server`); 0.5.23 passes `prog="sglang serve"` (sglang/srt/server_args.py:679)."""
    http_routes: tuple[Route, ...]
    metrics_route: Route
    """Mounted only with --enable-metrics (add_prometheus_middleware)."""
    worker_routes: tuple[Route, ...]
    """What a node with --node-rank >= 1 of a multi-node server serves on --host:--port: SGLang's dummy health-check
    server (launch_dummy_health_check_server, plus metrics_route with --enable-metrics), once its schedulers are
    ready; every route answers 200."""
    bootstrap_routes: tuple[Route, ...]
    route_query_params: tuple[str, ...]
    """Query parameters of the bootstrap server's GET /route, in the order the decode sends them."""
    metrics: tuple[Metric, ...]
    has_fingerprint: bool
    """Whether the PD handshake carries and checks the speculative fingerprint (the project's 0.5.23 patches 0001 and
    0002; the 0.5.2 patches add none: images/sglang/patches/0.5.2/ has no fingerprint)."""
    missing_room_message: str
    """The 400 abort for a PD request without bootstrap_room (the typo in 0.5.2 is SGLang's)."""
    missing_room_source: str
    scheduler_labels: tuple[str, ...]
    tokenizer_labels: tuple[str, ...]


def _route(methods: str, path: str, source: str) -> Route:
    return Route(tuple(methods.split("|")), path, source)


_C052 = "sglang/srt/metrics/collector.py"
_C0523 = "sglang/srt/observability/metrics_collector.py"

FACTS_0_5_2: Final = VersionFacts(
    version="0.5.2",
    prog="launch_server.py",
    http_routes=(
        _route("GET", "/health", f"{HTTP_SERVER}:344"),
        _route("GET", "/health_generate", f"{HTTP_SERVER}:345"),
        _route("GET", "/get_model_info", f"{HTTP_SERVER}:416"),
        _route("GET", "/get_server_info", f"{HTTP_SERVER}:437"),
        _route("GET", "/get_load", f"{HTTP_SERVER}:451"),
        _route("POST|PUT", "/generate", f"{HTTP_SERVER}:465"),
        _route("GET|POST", "/flush_cache", f"{HTTP_SERVER}:550"),
        _route("POST", "/v1/completions", f"{HTTP_SERVER}:957"),
        _route("POST", "/v1/chat/completions", f"{HTTP_SERVER}:965"),
        _route("GET", "/v1/models", f"{HTTP_SERVER}:987"),
        _route("GET", "/v1/models/{model:path}", f"{HTTP_SERVER}:1003"),
        _route("GET", "/ping", f"{HTTP_SERVER}:1083"),
    ),
    metrics_route=_route("GET", "/metrics", "sglang/srt/utils.py:1271"),
    # launch_dummy_health_check_server (utils.py:2069), started by engine.py:805-820 on node rank >= 1.
    worker_routes=(
        _route("GET", "/health", "sglang/srt/utils.py:2077"),
        _route("GET", "/health_generate", "sglang/srt/utils.py:2082"),
    ),
    bootstrap_routes=(
        # The default transfer backend is mooncake (sglang/srt/server_args.py:378); its bootstrap server.
        _route("GET|PUT", "/route", "sglang/srt/disaggregation/mooncake/conn.py:1577"),
        _route("GET", "/health", "sglang/srt/disaggregation/mooncake/conn.py:1578"),
    ),
    route_query_params=("engine_rank", "target_dp_group", "target_pp_rank"),
    metrics=(
        Metric("sglang:num_requests_total", "counter", "tokenizer", f"{_C052}:693"),
        Metric("sglang:prompt_tokens_total", "counter", "tokenizer", f"{_C052}:624"),
        Metric("sglang:generation_tokens_total", "counter", "tokenizer", f"{_C052}:630"),
        Metric("sglang:cached_tokens_total", "counter", "tokenizer", f"{_C052}:687"),
        Metric("sglang:num_aborted_requests", "counter", "tokenizer", f"{_C052}:705"),
        Metric("sglang:time_to_first_token_seconds", "histogram", "tokenizer", f"{_C052}:786"),
        Metric("sglang:inter_token_latency_seconds", "histogram", "tokenizer", f"{_C052}:793"),
        Metric("sglang:e2e_request_latency_seconds", "histogram", "tokenizer", f"{_C052}:800"),
        Metric("sglang:num_running_reqs", "gauge", "scheduler", f"{_C052}:187"),
        Metric("sglang:num_used_tokens", "gauge", "scheduler", f"{_C052}:193"),
        Metric("sglang:token_usage", "gauge", "scheduler", f"{_C052}:199"),
        Metric("sglang:gen_throughput", "gauge", "scheduler", f"{_C052}:211"),
        Metric("sglang:num_queue_reqs", "gauge", "scheduler", f"{_C052}:217"),
        Metric("sglang:cache_hit_rate", "gauge", "scheduler", f"{_C052}:241"),
        Metric("sglang:spec_accept_length", "gauge", "scheduler", f"{_C052}:249"),
        Metric("sglang:num_prefill_prealloc_queue_reqs", "gauge", "scheduler", f"{_C052}:257"),
        Metric("sglang:num_prefill_inflight_queue_reqs", "gauge", "scheduler", f"{_C052}:263"),
        Metric("sglang:num_decode_prealloc_queue_reqs", "gauge", "scheduler", f"{_C052}:269"),
        Metric("sglang:num_decode_transfer_queue_reqs", "gauge", "scheduler", f"{_C052}:275"),
        Metric("sglang:num_bootstrap_failed_reqs_total", "counter", "scheduler", f"{_C052}:281"),
        Metric("sglang:num_transfer_failed_reqs_total", "counter", "scheduler", f"{_C052}:286"),
        Metric("sglang:kv_transfer_speed_gb_s", "gauge", "scheduler", f"{_C052}:291"),
        Metric("sglang:kv_transfer_latency_ms", "gauge", "scheduler", f"{_C052}:297"),
    ),
    has_fingerprint=False,
    missing_room_message="Invalid request: Disaggregated request received without boostrap room id. req.rid={rid!r}",
    missing_room_source="sglang/srt/managers/scheduler.py:1190-1200",
    # sglang/srt/managers/scheduler_metrics_mixin.py:53-60; sglang/srt/managers/tokenizer_manager.py:287-292.
    scheduler_labels=("model_name", "engine_type", "tp_rank", "pp_rank"),
    tokenizer_labels=("model_name",),
)

FACTS_0_5_23: Final = VersionFacts(
    version="0.5.23",
    prog="sglang serve",
    http_routes=(
        _route("GET", "/ready", f"{HTTP_SERVER}:714"),
        _route("GET", "/health", f"{HTTP_SERVER}:721"),
        _route("GET", "/health_generate", f"{HTTP_SERVER}:722"),
        _route("GET", "/get_model_info", f"{HTTP_SERVER}:802"),
        _route("GET", "/model_info", f"{HTTP_SERVER}:812"),
        _route("GET", "/get_server_info", f"{HTTP_SERVER}:853"),
        _route("GET", "/server_info", f"{HTTP_SERVER}:863"),
        _route("POST|PUT", "/generate", f"{HTTP_SERVER}:928"),
        _route("GET|POST", "/flush_cache", f"{HTTP_SERVER}:1025"),
        _route("POST", "/v1/completions", f"{HTTP_SERVER}:1860"),
        _route("POST", "/v1/chat/completions", f"{HTTP_SERVER}:1870"),
        _route("GET", "/v1/models", f"{HTTP_SERVER}:1993"),
        _route("GET", "/v1/models/{model:path}", f"{HTTP_SERVER}:2025"),
        _route("GET", "/ping", f"{HTTP_SERVER}:2190"),
        _route("GET", "/v1/loads", "sglang/srt/entrypoints/v1_loads.py:96"),
    ),
    metrics_route=_route("GET", "/metrics", "sglang/srt/utils/common.py:2849"),
    # launch_dummy_health_check_server (utils/common.py:3624), started by entrypoints/engine.py:1278-1285 on node
    # rank >= 1.
    worker_routes=(
        _route("GET", "/ping", "sglang/srt/utils/common.py:3635"),
        _route("GET", "/health", "sglang/srt/utils/common.py:3640"),
        _route("GET", "/health_generate", "sglang/srt/utils/common.py:3645"),
    ),
    bootstrap_routes=(
        # MooncakeKVBootstrapServer (mooncake/conn.py:3355) subclasses CommonKVBootstrapServer.
        _route("GET|PUT", "/route", "sglang/srt/disaggregation/common/conn.py:3070"),
        _route("POST", "/register_dp_rank", "sglang/srt/disaggregation/common/conn.py:3071"),
        _route("POST", "/query_dp_ranks", "sglang/srt/disaggregation/common/conn.py:3072"),
        _route("GET", "/health", "sglang/srt/disaggregation/common/conn.py:3073"),
    ),
    route_query_params=("prefill_dp_rank", "prefill_cp_rank", "target_tp_rank", "target_pp_rank"),
    metrics=(
        Metric("sglang:num_requests_total", "counter", "tokenizer", f"{_C0523}:1941", ("is_streaming",)),
        Metric("sglang:prompt_tokens_total", "counter", "tokenizer", f"{_C0523}:1856", ("is_streaming",)),
        Metric("sglang:generation_tokens_total", "counter", "tokenizer", f"{_C0523}:1861", ("is_streaming",)),
        Metric("sglang:spec_verify_calls_total", "counter", "tokenizer", f"{_C0523}:1866"),
        Metric("sglang:cached_tokens_total", "counter", "tokenizer", f"{_C0523}:1935", ("cache_source",)),
        Metric("sglang:num_aborted_requests_total", "counter", "tokenizer", f"{_C0523}:1960"),
        Metric("sglang:time_to_first_token_seconds", "histogram", "tokenizer", f"{_C0523}:2041", ("is_streaming",)),
        Metric("sglang:inter_token_latency_seconds", "histogram", "tokenizer", f"{_C0523}:2051"),
        Metric("sglang:e2e_request_latency_seconds", "histogram", "tokenizer", f"{_C0523}:2068", ("is_streaming",)),
        Metric("sglang:num_running_reqs", "gauge", "scheduler", f"{_C0523}:365"),
        Metric("sglang:num_queue_reqs", "gauge", "scheduler", f"{_C0523}:371"),
        Metric("sglang:gen_throughput", "gauge", "scheduler", f"{_C0523}:383"),
        Metric("sglang:cache_hit_rate", "gauge", "scheduler", f"{_C0523}:389"),
        Metric("sglang:token_usage", "gauge", "scheduler", f"{_C0523}:405"),
        Metric("sglang:num_used_tokens", "gauge", "scheduler", f"{_C0523}:433"),
        Metric("sglang:spec_accept_length", "gauge", "scheduler", f"{_C0523}:512"),
        Metric("sglang:spec_accept_rate", "gauge", "scheduler", f"{_C0523}:518"),
        Metric("sglang:num_prefill_bootstrap_queue_reqs", "gauge", "scheduler", f"{_C0523}:583"),
        Metric("sglang:num_prefill_inflight_queue_reqs", "gauge", "scheduler", f"{_C0523}:589"),
        Metric("sglang:num_decode_prealloc_queue_reqs", "gauge", "scheduler", f"{_C0523}:595"),
        Metric("sglang:num_decode_transfer_queue_reqs", "gauge", "scheduler", f"{_C0523}:601"),
        Metric("sglang:kv_transfer_speed_gb_s", "histogram", "scheduler", f"{_C0523}:638"),
        Metric("sglang:kv_transfer_latency_ms", "histogram", "scheduler", f"{_C0523}:644"),
        Metric("sglang:num_bootstrap_failed_reqs_total", "counter", "scheduler", f"{_C0523}:668"),
        Metric("sglang:num_transfer_failed_reqs_total", "counter", "scheduler", f"{_C0523}:673"),
        Metric("sglang:kv_transfer_bootstrap_ms", "histogram", "scheduler", f"{_C0523}:683"),
    ),
    has_fingerprint=True,
    missing_room_message="Invalid request: Disaggregated request received without bootstrap room id. req.rid={rid!r}",
    missing_room_source="sglang/srt/managers/scheduler.py:3047-3062",
    # sglang/srt/observability/metrics_collector.py:1382-1388 (scheduler) and :1807-1812 (tokenizer_metric_labels).
    scheduler_labels=("model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"),
    tokenizer_labels=("model_name", "engine_type"),
)

FACTS: Final[dict[Version, VersionFacts]] = {f.version: f for f in (FACTS_0_5_2, FACTS_0_5_23)}

EVERY_RANK: Final = frozenset({"sglang:num_bootstrap_failed_reqs_total", "sglang:num_transfer_failed_reqs_total"})
"""The counters every TP rank of a server increments, once each per failed request, in its own series (label
`tp_rank`): with --enable-metrics each scheduler rank builds a collector (0.5.2
managers/scheduler_metrics_mixin.py:52-62 `init_metrics`; 0.5.23 observability/metrics_collector.py:1375-1404
`SchedulerMetricsCollector.init_new`), the KV polls are all-reduced over the attention-TP group so every rank sees
the same failure (0.5.2 disaggregation/utils.py:39 `poll_and_all_reduce`), and the increments are gated by
`enable_metrics` alone, not by the rank (0.5.2 disaggregation/prefill.py:243 `pop_bootstrapped`, :529
`process_disagg_prefill_inflight_queue`, decode.py:339 `_update_handshake_waiters`, :602 `pop_transferred`; 0.5.23
disaggregation/prefill.py:1311 `handle_inflight_transfer_failure`, :1376 `handle_bootstrap_failure`, decode.py:1176
`_update_handshake_waiters`, :2826 `_record_transfer_failure`, :3372 `_handle_kv_checksum_mismatch`). A tp8 server
with N failed requests so exports eight series of N. The emulator exports its other scheduler metrics for tp_rank 0
only."""

# Histogram buckets, identical in both releases (0.5.2 collector.py:741-784, 0.5.23 metrics_collector.py:1965-2038).
TTFT_BUCKETS: Final = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
E2E_BUCKETS: Final = (*TTFT_BUCKETS, 600, 1200, 1800, 2400)
ITL_BUCKETS: Final = (
    0.002,
    0.004,
    0.006,
    0.008,
    0.010,
    0.015,
    0.020,
    0.025,
    0.030,
    0.035,
    0.040,
    0.060,
    0.080,
    0.100,
    0.200,
    0.400,
    0.600,
    0.800,
    1.000,
    2.000,
    4.000,
    6.000,
    8.000,
)
# 0.5.23 metrics_collector.py:637-648 and :682-687.
KV_SPEED_BUCKETS: Final = (0.1, 0.5, 1, 5, 10, 25, 50, 100, 200, 400)
KV_LATENCY_BUCKETS: Final = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000)
KV_BOOTSTRAP_BUCKETS: Final = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500)


def facts_for(version: str) -> VersionFacts:
    try:
        return FACTS[version]  # type: ignore[index]
    except KeyError:
        raise ValueError(f"unsupported SGLang version {version!r} (supported: {', '.join(VERSIONS)})") from None
