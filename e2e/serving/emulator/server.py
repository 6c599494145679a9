"""The emulated SGLang HTTP server: the routes of one release, its start-up phases and its SIGTERM drain.

Start-up, as `launch_server` does it (0.5.2 entrypoints/http_server.py:1137-1250 and engine.py:795-880; 0.5.23
http_server.py:3125-3188 and engine.py:1320-1380):

1. The tokenizer manager starts first, and with it the prefill's bootstrap server (listening at once).
2. The model loads (`--emulate load-seconds`); the HTTP port does not listen yet: a client gets connection refused.
   When it is loaded the prefill ranks register with the bootstrap server (PUT /route).
3. uvicorn starts; the server status is Starting, so /health and /health_generate answer 503 (0.5.23: /ready and
   /ping too) while the warm-up thread waits 1 s, GETs /get_model_info and sends one /generate (fake bootstrap host
   in PD mode). Then the status is Up ("The server is fired up and ready to roll!").

SIGTERM (0.5.2 managers/tokenizer_manager.py:1140-1170 and :1690-1694; 0.5.23 :3508-3570): `gracefully_exit` is set,
so the health routes answer 503 at once; requests keep being accepted and served (SGLang does not refuse them: the
router stops sending them when the health checks fail or the pod leaves the Service); a watchdog checks every 5 s
(`drain-poll-seconds`) and exits when no request is left, here with status 0 (real 0.5.2 SIGKILLs itself), or after
`--drain-timeout` with status 1.

Multi-node (`--nnodes N`, see `group.py`): node rank 0 is the server above, except that between steps 1 and 2 it
waits until the other N-1 nodes have joined its group (its HTTP port stays closed meanwhile), and that it dies when a
node of the group is lost. A node with rank >= 1 runs no tokenizer and no API: it joins the group, "loads" the model,
then serves only SGLang's dummy health-check server (`launch_dummy_health_check_server`: 0.5.2 entrypoints/
engine.py:805-823 and utils.py:2069-2112; 0.5.23 engine.py:1234-1297 and utils/common.py:3624-3686) until the group
ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any

import aiohttp
from aiohttp import web

from e2e.serving.emulator import dp, openai, pd, textgen
from e2e.serving.emulator.engine import TOKEN_CAPACITY, Abort, Engine, GenRequest, new_rid
from e2e.serving.emulator.facts import EMULATOR_PREFIX, FAKE_BOOTSTRAP_HOST, VersionFacts, facts_for
from e2e.serving.emulator.group import GroupError, GroupLeader, GroupMember, Resolver, parse_dist_init_addr
from e2e.serving.emulator.options import RUNTIME_KEYS, EmulateOptions, OptionError, parse_options
from e2e.serving.emulator.sglang_args import ServerConfig, flag_table

log = logging.getLogger("emulator.server")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
JSON_ERRORS = (json.JSONDecodeError, UnicodeDecodeError, ValueError)


def _env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return raw.strip().lower() in ("1", "true", "yes", "on")


async def _last(outputs: AsyncIterator[dict[str, Any]]) -> dict[str, Any] | None:
    """The final output of a non-streamed request (its earlier outputs are partial states of the same answer)."""
    final = None
    async for out in outputs:
        final = out
    return final


def _one(value: Any) -> Any:
    """A batch of one (what the 0.5.2 PD warm-up sends) is that one request."""
    if isinstance(value, list) and len(value) == 1 and not isinstance(value[0], int):
        return value[0]
    return value


class EmulatorServer:
    def __init__(
        self,
        cfg: ServerConfig,
        options: EmulateOptions,
        *,
        bind: str,
        pod_name: str,
        drain_timeout: float,
        access_log: bool = False,
        resolver: Resolver | None = None,
    ) -> None:
        self.access_log = access_log
        self.resolver = resolver or Resolver(bind, None, None)
        """How a node with rank >= 1 finds its leader (`group.Resolver`)."""
        self.group: GroupLeader | None = None
        self.cfg = cfg
        self.options = options
        self.facts: VersionFacts = facts_for(cfg.version)
        self.bind = bind
        self.pod_name = pod_name
        self.drain_timeout = drain_timeout
        self.timeouts = pd.Timeouts.from_env()
        self.engine = Engine(cfg, options, self.facts, bind=bind, pod_name=pod_name, timeouts=self.timeouts)
        self.status = "Starting"  # tokenizer_manager.ServerStatus: Starting | Up | UnHealthy
        self.gracefully_exit = False
        self.last_receive = time.monotonic()
        self.startup_time = time.time()
        self.exit_code = 0
        self._stopped = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.app = self._build_app()

    # --- app --------------------------------------------------------------------------------------------------------

    def _build_app(self) -> web.Application:
        app = web.Application(middlewares=[self._fastapi_errors], client_max_size=64 * 1024 * 1024)
        paths = {route.path for route in self.facts.http_routes}
        add = app.router.add_route
        add("GET", "/health", self.health_generate)
        add("GET", "/health_generate", self.health_generate)
        if "/ready" in paths:
            add("GET", "/ready", self.ready)
        add("GET", "/get_model_info", self.model_info)
        if "/model_info" in paths:
            add("GET", "/model_info", self.model_info)
        add("GET", "/get_server_info", self.server_info)
        if "/server_info" in paths:
            add("GET", "/server_info", self.server_info)
        if "/get_load" in paths:
            add("GET", "/get_load", self.get_load)
        if "/v1/loads" in paths:
            add("GET", "/v1/loads", self.v1_loads)
        for method in ("POST", "PUT"):
            add(method, "/generate", self.generate)
        for method in ("GET", "POST"):
            add(method, "/flush_cache", self.flush_cache)
        add("POST", "/v1/completions", self.v1_completions)
        add("POST", "/v1/chat/completions", self.v1_chat_completions)
        add("GET", "/v1/models", self.v1_models)
        add("GET", "/v1/models/{model:.+}", self.v1_model)
        add("GET", "/ping", self.ping)
        add("POST", EMULATOR_PREFIX + "options", self.set_options)
        add("GET", EMULATOR_PREFIX + "dp", self.dp_report)
        add("GET", EMULATOR_PREFIX + "capacity", self.capacity_report)
        if self.cfg.enable_metrics:
            # add_prometheus_middleware mounts the exporter at ^/metrics(?P<path>.*)$ (so /metrics/ works too).
            add("GET", "/metrics", self.metrics)
            add("GET", "/metrics/{rest:.*}", self.metrics)
        return app

    @web.middleware
    async def _fastapi_errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """FastAPI's answers for unknown routes and methods: JSON `{"detail": ...}`."""
        try:
            return await handler(request)
        except web.HTTPNotFound:
            return web.json_response({"detail": "Not Found"}, status=404)
        except web.HTTPMethodNotAllowed:
            return web.json_response({"detail": "Method Not Allowed"}, status=405)

    # --- health -----------------------------------------------------------------------------------------------------

    def _healthy(self) -> bool:
        return not self.gracefully_exit and self.status == "Up"

    async def health_generate(self, request: web.Request) -> web.Response:
        # 0.5.2 http_server.py:344-413; 0.5.23 http_server.py:721-799.
        if self.gracefully_exit:
            log.info("Health check request received during shutdown. Returning 503.")
            return web.Response(status=503)
        if self.status == "Starting":
            return web.Response(status=503)
        if (
            self.cfg.version == "0.5.23"
            and request.path == "/health"
            and not _env_bool("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", True)
        ):
            return web.Response(status=200)
        rid = f"HEALTH_CHECK_{time.time()}"
        req = GenRequest(rid=rid, input_ids=[0], max_new_tokens=1, log_metrics=False)
        if self.cfg.disaggregation_mode != "null":
            req.bootstrap_host, req.bootstrap_room = FAKE_BOOTSTRAP_HOST, 0

        async def run() -> None:
            with contextlib.suppress(Abort):
                async for _ in self._tracked(self.engine.generate(req)):
                    break

        task = asyncio.create_task(run())
        tic = time.monotonic()
        timeout = int(os.environ.get("SGLANG_HEALTH_CHECK_TIMEOUT", "20"))
        try:
            while time.monotonic() < tic + timeout:
                await asyncio.sleep(1)
                if self.last_receive > tic:
                    self.status = "Up"
                    return web.Response(status=200)
        finally:
            task.cancel()
        log.error("Health check failed. Server couldn't get a response from detokenizer for last %d seconds.", timeout)
        self.status = "UnHealthy"
        return web.Response(status=503)

    async def ready(self, request: web.Request) -> web.Response:
        # 0.5.23 http_server.py:714-718 (is_ready: not paused and healthy).
        return web.Response(status=200 if self._healthy() else 503)

    async def ping(self, request: web.Request) -> web.Response:
        # 0.5.2 http_server.py:1083-1086 (always 200); 0.5.23 http_server.py:2190-2199 (is_healthy).
        if self.cfg.version == "0.5.2":
            return web.Response(status=200)
        return web.Response(status=200 if self._healthy() else 503)

    # --- emulator-only: change the emulated model at run time ----------------------------------------------------

    async def set_options(self, request: web.Request) -> web.Response:
        """`POST /emulator/options` `{"accept-length": "1.0"}`: change what the emulated model does from the next
        verify step on (only `RUNTIME_KEYS`: the model's behaviour, never SGLang's API); answers the new values."""
        try:
            body = await request.json()
            if not isinstance(body, dict) or not body or set(body) - set(RUNTIME_KEYS):
                raise OptionError(f"expected a JSON object with some of {', '.join(RUNTIME_KEYS)}")
            given = parse_options([f"{key}={value}" for key, value in body.items()])
        except (OptionError, ValueError) as error:
            return web.json_response({"error": str(error)}, status=400)
        changes = {key.replace("-", "_"): getattr(given, key.replace("-", "_")) for key in body}
        if "accept_length" in changes:  # clamped as at start-up: 1 .. num draft tokens
            cap = self.cfg.speculative_num_draft_tokens
            accept = float(changes["accept_length"])
            changes["accept_length"] = max(1.0, min(accept, float(cap)) if cap else accept)
        self.options = dataclasses.replace(self.options, **changes)
        self.engine.options = dataclasses.replace(self.engine.options, **changes)
        if "accept_length" in changes:
            self.engine.set_accept_length(float(changes["accept_length"]))
        log.info("emulator: options changed at run time: %s", changes)
        return web.json_response({key.replace("_", "-"): value for key, value in changes.items()})

    async def dp_report(self, request: web.Request) -> web.Response:
        """`GET /emulator/dp`: this server's DP layout and the requests each DP rank was given (emulator-only; SGLang
        shows per-rank load in its metrics' dp_rank label, which the emulator does not export)."""
        return web.json_response(self.engine.dispatcher.report())

    async def capacity_report(self, request: web.Request) -> web.Response:
        """`GET /emulator/capacity`: the capacity model's state per DP rank (pool, queues, steps, retractions) and
        the loop's lag (emulator-only); `{"enabled": false}` when requests advance at their own pace."""
        if self.engine.scheduler is None:
            return web.json_response({"enabled": False})
        return web.json_response({"enabled": True, **self.engine.scheduler.report()})

    # --- info -------------------------------------------------------------------------------------------------------

    async def model_info(self, request: web.Request) -> web.Response:
        # 0.5.2 http_server.py:416-426; 0.5.23 http_server.py:802-850.
        cfg = self.cfg
        info: dict[str, Any] = {
            "model_path": cfg.model_path,
            "tokenizer_path": cfg.tokenizer_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": cfg.weight_version,
        }
        if cfg.version == "0.5.23":
            info = {
                "model_path": cfg.model_path,
                "served_model_name": cfg.served_model_name,
                "tokenizer_path": cfg.tokenizer_path,
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": cfg.weight_version,
                "load_format": cfg.given.get("--load-format", "auto"),
                "reasoning_parser": cfg.given.get("--reasoning-parser"),
                "tool_call_parser": cfg.given.get("--tool-call-parser"),
                "disaggregation_mode": cfg.disaggregation_mode,
                "has_image_understanding": False,
                "has_audio_understanding": False,
                "model_type": "emulated",
                "architectures": ["EmulatedForCausalLM"],
            }
        return web.json_response(info)

    def _server_args(self) -> dict[str, Any]:
        """dataclasses.asdict(server_args) as far as the emulator knows it: every option given (by dest) and the
        fields it parsed, with their defaults."""
        table = flag_table(self.cfg.version)
        out: dict[str, Any] = {}
        for canonical_option, value in self.cfg.given.items():
            dest = table.DESTS.get(canonical_option)
            if dest:
                out[dest] = value
        for name in ("tensor_parallel_size", "data_parallel_size", "pipeline_parallel_size"):
            out.pop(name, None)
        cfg = dataclasses.asdict(self.cfg)
        for key in ("given", "version", "bootstrap_port", "transfer_backend", "kv_checksum"):
            cfg.pop(key, None)
        for key in ("attn_dp_size_flag", "decode_tp_hint", "decode_dp_hint"):
            cfg.pop(key, None)
        out.update(cfg)
        out.update(self._resolved_dp_args())
        out["disaggregation_bootstrap_port"] = self.cfg.bootstrap_port
        out["disaggregation_transfer_backend"] = self.cfg.transfer_backend
        out["host"] = self.cfg.given.get("--host", "127.0.0.1")
        return out

    def _resolved_dp_args(self) -> dict[str, Any]:
        """The DP fields as the release resolves them (dp.layout): 0.5.2 turns DP attention off for dp 1
        (server_args.py:634-635) and fills a prefill's decode hints with its own sizes (:828-831); 0.5.23 rewrites
        the deprecated spelling to attn_dp_size (arg_groups/parallel_hook.py:39-62) and resolves `auto`."""
        lay = self.engine.layout
        resolved: dict[str, Any] = {"load_balance_method": lay.load_balance_method}
        if self.cfg.version == "0.5.2":
            resolved["enable_dp_attention"] = lay.attn_dp_size > 1
            if self.cfg.disaggregation_mode == "prefill":
                resolved["disaggregation_decode_tp"] = self.cfg.decode_tp_hint or self.cfg.tp_size
                resolved["disaggregation_decode_dp"] = self.cfg.decode_dp_hint or self.cfg.dp_size
        else:
            resolved.update(attn_dp_size=lay.attn_dp_size, dp_size=lay.system_dp_size, enable_dp_attention=False)
        return resolved

    def _internal_state(self) -> dict[str, Any]:
        # 0.5.2 managers/scheduler.py:2243-2269.
        state: dict[str, Any] = {
            "last_gen_throughput": 0.0,
            "memory_usage": {"weight": 0.0, "kvcache": 0.0, "token_capacity": TOKEN_CAPACITY, "graph": 0.0},
            "load": self.engine.load(),
        }
        if self.engine.speculative:
            state["avg_spec_accept_length"] = self.options.accept_length
        return state

    async def server_info(self, request: web.Request) -> web.Response:
        # 0.5.2 http_server.py:437-448; 0.5.23 http_server.py:853-895.
        info: dict[str, Any] = {
            **self._server_args(),
            "status": "ready",
            "max_total_num_tokens": TOKEN_CAPACITY,
            "max_req_input_len": self.engine.context_length() - 1,
            "internal_states": [self._internal_state()],
            "version": self.cfg.version,
            "emulated": True,
        }
        if self.cfg.version == "0.5.23":
            info["startup_time"] = self.startup_time
            info["frontend"] = "python"
        return web.json_response(info)

    async def get_load(self, request: web.Request) -> web.Response:
        # 0.5.2 http_server.py:451-453 -> tokenizer_communicator_mixin.py:485-491.
        return web.json_response({"load": self.engine.load()})

    def _load_snapshot(self) -> dict[str, Any]:
        # 0.5.23 managers/load_snapshot.py:196-277.
        c = self.engine.counters
        core: dict[str, Any] = {
            "timestamp": time.time(),
            "dp_rank": 0,
            "num_running_reqs": c.running,
            "num_waiting_reqs": c.decode_prealloc + c.prefill_bootstrap,
            "num_waiting_uncached_tokens": 0,
            "num_used_tokens": c.used_tokens,
            "num_total_tokens": c.used_tokens,
            "num_active_tokens": c.used_tokens,
            "num_prealloc_ready_tokens": 0,
            "max_total_num_tokens": TOKEN_CAPACITY,
            "max_running_requests": int(self.cfg.given.get("--max-running-requests") or 4096),
            "token_usage": c.used_tokens / TOKEN_CAPACITY,
            "gen_throughput": 0.0,
            "cache_hit_rate": 0.0,
            "utilization": 0.0,
            "total_prefill_uncached_tokens": 0,
            "total_prefill_busy_us": 0,
            "decode_moments": None,
        }
        sections: dict[str, Any] = {
            "memory": {"weight_gb": 0.0, "kv_cache_gb": 0.0, "graph_gb": 0.0, "token_capacity": TOKEN_CAPACITY},
            "disaggregation": {
                "mode": self.cfg.disaggregation_mode,
                "prefill_bootstrap_queue_reqs": c.prefill_bootstrap,
                "prefill_inflight_queue_reqs": c.prefill_inflight,
                "decode_prealloc_queue_reqs": c.decode_prealloc,
                "decode_transfer_queue_reqs": c.decode_transfer,
                "decode_retracted_queue_reqs": 0,
                "kv_transfer_speed_gb_s": 0.0,
                "kv_transfer_latency_ms": 0.0,
            },
            "queues": {
                "waiting": c.decode_prealloc + c.prefill_bootstrap,
                "grammar": 0,
                "paused": 0,
                "retracted": 0,
                "prealloc_ready": 0,
            },
        }
        if self.engine.speculative:
            sections["speculative"] = {"accept_length": float(self.options.accept_length or 1.0), "accept_rate": 0.0}
        return {**core, **sections}

    async def v1_loads(self, request: web.Request) -> web.Response:
        # 0.5.23 entrypoints/v1_loads.py:96-155 and managers/load_snapshot.py:231-257 (to_dict).
        include = request.query.get("include")
        include_set = {s.strip() for s in include.split(",")} if include else None
        valid = {"core", "memory", "spec", "lora", "disagg", "queues", "all"}
        snapshot = self._load_snapshot()
        section_names = {
            "memory": "memory",
            "speculative": "spec",
            "lora": "lora",
            "disaggregation": "disagg",
            "queues": "queues",
        }
        if include_set is not None and not include_set <= valid:
            message = f"Invalid include sections: {include_set - valid}. Valid options: {sorted(valid)}"
            return web.json_response(openai.error_response(message, "400", 400), status=400)
        load = {k: v for k, v in snapshot.items() if k not in section_names}
        if include_set is None or "all" in include_set or include_set != {"core"}:
            for field, short in section_names.items():
                if field in snapshot and (include_set is None or "all" in include_set or short in include_set):
                    load[field] = snapshot[field]
        if request.query.get("format") == "prometheus":
            return web.Response(text=self._loads_prometheus(load), content_type="text/plain", charset="utf-8")
        return web.json_response(
            {
                "timestamp": datetime.now(UTC).isoformat(),
                "version": self.cfg.version,
                "accelerator": None,
                "num_accelerators": self.cfg.tp_size * self.cfg.pp_size,
                "loads": [load],
            }
        )

    @staticmethod
    def _loads_prometheus(load: dict[str, Any]) -> str:
        # 0.5.23 entrypoints/v1_loads.py:61-93.
        prefixes = {"speculative": "spec", "disaggregation": "disagg"}
        lines = []
        for key, value in load.items():
            if key == "dp_rank":
                continue
            items = (
                [(f"sglang_{prefixes.get(key, key)}_{k}", v) for k, v in value.items()]
                if isinstance(value, dict)
                else [(f"sglang_{key}", value)]
            )
            for name, number in items:
                if isinstance(number, (int, float)) and not isinstance(number, bool):
                    lines += [f"# TYPE {name} gauge", f'{name}{{dp_rank="0"}} {number}']
        return "\n".join(lines) + "\n"

    async def flush_cache(self, request: web.Request) -> web.Response:
        # 0.5.2 http_server.py:550-558; 0.5.23 http_server.py:1025-1040. Refused while requests are in flight.
        ok = self.engine.counters.in_flight == 0
        text = (
            "Cache flushed.\nPlease check backend logs for more details. "
            "(When there are running or waiting requests, the operation will not be performed.)\n"
        )
        if not ok and self.cfg.version == "0.5.23":
            text = "Flush cache failed.\n"
        return web.Response(text=text, status=200 if ok else 400)

    async def v1_models(self, request: web.Request) -> web.Response:
        # 0.5.2 http_server.py:987-1000; 0.5.23 http_server.py:1993-2022.
        card = openai.model_card(self.cfg.version, self.cfg.served_model_name, self.engine.context_length())
        return web.json_response({"object": "list", "data": [card]})

    async def v1_model(self, request: web.Request) -> web.Response:
        # 0.5.2 http_server.py:1003-1025.
        model = request.match_info["model"]
        if model != self.cfg.served_model_name:
            return web.json_response(
                {
                    "error": {
                        "message": f"The model '{model}' does not exist",
                        "type": "invalid_request_error",
                        "param": "model",
                        "code": "model_not_found",
                    }
                },
                status=404,
            )
        return web.json_response(openai.model_card(self.cfg.version, model, self.engine.context_length()))

    async def metrics(self, request: web.Request) -> web.Response:
        from prometheus_client import CONTENT_TYPE_LATEST

        return web.Response(body=self.engine.metrics.exposition(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    # --- generation -------------------------------------------------------------------------------------------------

    async def _tracked(self, outputs: AsyncIterator[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
        """Every output counts as a response from the scheduler (TokenizerManager.last_receive_tstamp)."""
        async for out in outputs:
            self.last_receive = time.monotonic()
            yield out

    @staticmethod
    async def _body(request: web.Request) -> dict[str, Any] | web.Response:
        try:
            body = await request.json()
        except JSON_ERRORS as exc:
            message = (
                "[{'type': 'json_invalid', 'loc': ('body', 0), 'msg': 'JSON decode error', "
                f"'ctx': {{'error': {str(exc)!r}}}}}]"
            )
            return web.json_response(openai.error_response(message, "Bad Request", 400), status=400)
        if not isinstance(body, dict):
            return web.json_response(openai.error_response("Input should be an object", "Bad Request", 400), status=400)
        return body

    @staticmethod
    def _json_content_type(request: web.Request) -> web.Response | None:
        # validate_json_request (0.5.2 http_server.py:325-338; 0.5.23 :683-697).
        if request.content_type.lower() == "application/json":
            return None
        message = (
            "[{'loc': ['header', 'content-type'], 'msg': \"Unsupported Media Type: Only 'application/json' is "
            "allowed\", 'type': 'value_error'}]"
        )
        return web.json_response(openai.error_response(message, "Bad Request", 400), status=400)

    def _generate_request(self, body: dict[str, Any]) -> GenRequest:
        text = _one(body.get("text"))
        input_ids = body.get("input_ids")
        if isinstance(input_ids, list) and len(input_ids) == 1 and isinstance(input_ids[0], list):
            input_ids = input_ids[0]
        if isinstance(text, list) or (isinstance(input_ids, list) and input_ids and isinstance(input_ids[0], list)):
            raise openai.BadRequest("emulator: batched /generate requests are not emulated")
        if input_ids is not None:
            ids = [int(i) for i in input_ids]
        elif isinstance(text, str):
            ids = textgen.tokenize(text)
        else:
            raise openai.BadRequest("Either text, input_ids or input_embeds should be provided.")
        params = _one(body.get("sampling_params")) or {}
        max_new = params.get("max_new_tokens", 128)
        return GenRequest(
            rid=str(_one(body.get("rid")) or new_rid()),
            input_ids=ids,
            max_new_tokens=int(max_new) if max_new is not None else None,
            ignore_eos=bool(params.get("ignore_eos", False)),
            stream=bool(body.get("stream", False)),
            return_logprob=bool(_one(body.get("return_logprob")) or False),
            bootstrap_host=_one(body.get("bootstrap_host")),
            bootstrap_port=_one(body.get("bootstrap_port")),
            bootstrap_room=_one(body.get("bootstrap_room")),
            log_metrics=bool(body.get("log_metrics", True)),
        )

    def _with_dp_ranks(self, req: GenRequest, body: dict[str, Any]) -> GenRequest:
        req.routed_dp_rank, req.disagg_prefill_dp_rank = dp.request_ranks(self.cfg.version, body)
        return req

    def _abort_json(self, exc: Abort) -> web.Response:
        """A non-streamed abort: 400 -> ValueError -> {"error": {"message"}} (_create_error_response); 5xx ->
        fastapi.HTTPException -> ErrorResponse via the exception handler (0.5.2 http_server.py:289-299,
        tokenizer_manager.py:690-718; 0.5.23 http_server.py:578-631, tokenizer_manager.py:1891-1922)."""
        if exc.status_code == HTTPStatus.BAD_REQUEST:
            return web.json_response({"error": {"message": exc.message}}, status=400)
        return web.json_response(
            openai.error_response(exc.message, str(exc.status_code), exc.status_code), status=exc.status_code
        )

    async def generate(self, request: web.Request) -> web.StreamResponse:
        # 0.5.2 http_server.py:465-499; 0.5.23 http_server.py:928-990.
        body = await self._body(request)
        if isinstance(body, web.Response):
            return body
        try:
            req = self._with_dp_ranks(self._generate_request(body), body)
        except (openai.BadRequest, TypeError, ValueError) as exc:
            return web.json_response({"error": {"message": str(exc)}}, status=400)
        outputs = self._tracked(self.engine.generate(req))
        if not req.stream:
            try:
                final = await _last(outputs)
            except Abort as exc:
                return self._abort_json(exc)
            return web.json_response(final)
        response = await self._sse_response(request)
        try:
            async for out in outputs:
                await response.write(openai.sse(out))
        except Abort as exc:
            if self.cfg.version == "0.5.2" and exc.status_code != HTTPStatus.BAD_REQUEST:
                # The HTTPException escapes stream_results (it only catches ValueError).
                self._break_stream(request, exc)
                return response
            if exc.status_code == HTTPStatus.BAD_REQUEST:
                await response.write(openai.sse({"error": {"message": exc.message}}))
            else:
                # 0.5.23: _handle_abort_finish_reason yields the aborted output as a normal chunk.
                await response.write(openai.sse(self.engine.abort_output(req, exc)))
        except ConnectionResetError:
            return response
        await response.write(openai.DONE)
        await response.write_eof()
        return response

    @staticmethod
    async def _sse_response(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream; charset=utf-8"})
        await response.prepare(request)
        return response

    @staticmethod
    def _break_stream(request: web.Request, exc: Abort) -> None:
        """uvicorn after an exception escaped a streaming body: it logs it and drops the connection (no last chunk,
        no [DONE]); the client sees a truncated response."""
        log.error("Exception in ASGI application: fastapi.HTTPException: %s: %s", exc.status_code, exc.message)
        if request.transport is not None:
            request.transport.abort()

    async def _openai(self, request: web.Request, chat: bool) -> web.StreamResponse:
        # 0.5.2 http_server.py:957-972 -> serving_base.handle_request (serving_base.py:25-60).
        bad_type = self._json_content_type(request)
        if bad_type is not None:
            return bad_type
        body = await self._body(request)
        if isinstance(body, web.Response):
            return body
        try:
            req = self._with_dp_ranks(openai.chat_request(body) if chat else openai.completion_request(body), body)
        except (openai.BadRequest, TypeError, ValueError) as exc:
            return web.json_response(openai.error_response(str(exc), "BadRequestError", 400), status=400)
        model = str(body.get("model") or openai.DEFAULT_MODEL_NAME)
        outputs = self._tracked(self.engine.generate(req))
        version = self.cfg.version
        if not req.stream:
            try:
                final = await _last(outputs)
            except Abort as exc:
                err_type = "BadRequestError" if exc.status_code == 400 else str(exc.status_code)
                return web.json_response(
                    openai.error_response(exc.message, err_type, exc.status_code), status=exc.status_code
                )
            assert final is not None
            build = openai.chat_response if chat else openai.completion_response
            return web.json_response(build(version, model, final))
        response = await self._sse_response(request)
        stream = (openai.chat_stream if chat else openai.completion_stream)(version, model, body, outputs)
        try:
            async for chunk in stream:
                await response.write(chunk)
        except Abort as exc:
            self._break_stream(request, exc)
            return response
        except ConnectionResetError:
            return response
        await response.write_eof()
        return response

    async def v1_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._openai(request, chat=False)

    async def v1_chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._openai(request, chat=True)

    # --- lifecycle --------------------------------------------------------------------------------------------------

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _register_prefill_ranks(self) -> None:
        """Each prefill rank's PUT /route once its KV manager exists (0.5.2 mooncake/conn.py:1023-1066; 0.5.23
        common/conn.py _register_to_bootstrap, with patch 0002's spec_fingerprint)."""
        cfg = self.cfg
        lay = self.engine.layout
        attn_dp, system_dp = lay.attn_dp_size, lay.system_dp_size
        dp_attention = attn_dp > 1
        url = f"http://{self.bind}:{cfg.bootstrap_port}/route"
        async with aiohttp.ClientSession() as session:
            for dp_rank in range(lay.num_dp_ranks):
                for tp_rank in range(lay.attn_tp_size):
                    for pp_rank in range(cfg.pp_size):
                        payload: dict[str, Any] = {
                            "role": "Prefill",
                            "attn_tp_size": lay.attn_tp_size,
                            "attn_tp_rank": tp_rank,
                            "attn_dp_size": attn_dp,
                            "attn_dp_rank": dp_rank if dp_attention else 0,
                            "pp_size": cfg.pp_size,
                            "pp_rank": pp_rank,
                            "system_dp_size": system_dp,
                            "system_dp_rank": 0 if dp_attention else dp_rank,
                            "rank_ip": self.bind,
                            "rank_port": cfg.bootstrap_port,
                        }
                        if cfg.version == "0.5.23":
                            payload.update(
                                {
                                    "attn_cp_size": 1,
                                    "attn_cp_rank": 0,
                                    "page_size": cfg.page_size,
                                    "kv_cache_dtype": self.engine.kv_cache_dtype_str(),
                                    "prefill_http_port": cfg.port,
                                    "decode_allocation_policy": cfg.given.get(
                                        "--disaggregation-decode-allocation-policy", "early"
                                    ),
                                    "load_balance_method": lay.load_balance_method,
                                    "spec_fingerprint": self.engine.fingerprint,
                                }
                            )
                        try:
                            async with session.put(url, json=payload, timeout=aiohttp.ClientTimeout(total=5)) as r:
                                if r.status != 200:
                                    log.error(
                                        "Prefill instance failed to connect to bootstrap server: %s, %s",
                                        r.status,
                                        await r.text(),
                                    )
                        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                            log.error("Prefill instance failed to register to bootstrap server: %s", exc)

    async def _warmup(self) -> None:
        """_execute_server_warmup (0.5.2 http_server.py:1253-1370; 0.5.23 :2318-2540)."""
        base = f"http://{self.bind}:{self.cfg.port}"
        async with aiohttp.ClientSession() as session:
            for _ in range(120):
                await asyncio.sleep(1)
                with contextlib.suppress(aiohttp.ClientError, TimeoutError, OSError):
                    async with session.get(base + "/get_model_info", timeout=aiohttp.ClientTimeout(total=5)) as r:
                        if r.status == 200:
                            break
            params = {"temperature": 0.0, "max_new_tokens": 8, "ignore_eos": True}
            if self.cfg.disaggregation_mode == "null":
                body: dict[str, Any] = {
                    "text": "The capital city of France is",
                    "sampling_params": {"temperature": 0, "max_new_tokens": 8},
                }
            elif self.cfg.version == "0.5.2":
                log.info("Start of pd disaggregation warmup ...")
                body = {
                    "sampling_params": params,
                    "bootstrap_host": [FAKE_BOOTSTRAP_HOST],
                    "bootstrap_room": [0],
                    "input_ids": [[0, 1, 2, 3]],
                }
            else:
                body = {
                    "sampling_params": params,
                    "bootstrap_host": FAKE_BOOTSTRAP_HOST,
                    "bootstrap_room": 0,
                    "input_ids": [10, 11, 12, 13],
                    "routed_dp_rank": 0,
                }
            try:
                async with session.post(base + "/generate", json=body, timeout=aiohttp.ClientTimeout(total=1800)) as r:
                    await r.read()
                    ok = r.status == 200
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                log.error("Initialization failed. warmup error: %s", exc)
                ok = False
        self.status = "Up" if ok else "UnHealthy"
        if ok:
            log.info("The server is fired up and ready to roll!")

    def _load_failed(self) -> int:
        """`fail=load-failure`: the scheduler's model loader raised, as for a checkpoint without weights (0.5.2
        model_loader/loader.py:392, 0.5.23 :581); the scheduler logs it and SIGQUITs the server (0.5.2
        managers/scheduler.py:2630, 0.5.23 :6372), whose handler logs the child's failure and tears the process tree
        down (0.5.2 entrypoints/engine.py:697, 0.5.23 :1978). The HTTP port never listened. Exit status 1: real
        SGLang's depends on how that teardown lands (SIGKILL of itself, or exit as PID 1); it is non-zero here so
        the pod runner records a failed container and restarts it, as a kubelet does under restartPolicy Always."""
        log.warning("emulator: fail=load-failure: the model does not load")
        log.error(
            "Scheduler hit an exception: Traceback (most recent call last):\n"
            '  File "sglang/srt/model_loader/loader.py", in _prepare_weights\n'
            "RuntimeError: Cannot find any model weights with `%s`",
            self.cfg.model_path,
        )
        log.error("Received sigquit from a child process. It usually means the child failed.")
        return 1

    @property
    def is_worker_node(self) -> bool:
        """Node rank >= 1 of a multi-node server (SGLang tests `node_rank >= 1`: 0.5.2 engine.py:805, 0.5.23
        engine.py:1234)."""
        return self.cfg.node_rank >= 1

    def on_sigterm(self) -> None:
        if self.is_worker_node and self._runner is not None:
            if self.cfg.version == "0.5.23":
                # engine.py:1264-1273: once its schedulers are ready a worker node only logs SIGTERM; rank 0's
                # ShutdownReq broadcast (or the kubelet's SIGKILL) ends it.
                log.warning(
                    "SIGTERM received on node_rank %d; waiting for the rank-0 ShutdownReq broadcast to stop the "
                    "schedulers.",
                    self.cfg.node_rank,
                )
                return
            # 0.5.2 installs no SIGTERM handler on such a node (the tokenizer manager's, tokenizer_manager.py:1042,
            # runs on rank 0 only); what follows is uvicorn's (the wheel does not pin it): the emulator exits.
            log.warning("SIGTERM received on node_rank %d: exiting", self.cfg.node_rank)
            self.stop_now(0)
            return
        if self._runner is None:
            # Still loading: SGLang installs its SIGTERM handler with the tokenizer manager's loop, after start-up;
            # nothing is in flight, so stop now.
            log.warning("SIGTERM received while loading the model: exiting")
            self.stop_now(0)
            return
        log.warning("SIGTERM received. signum=%d frame=None. Draining requests and shutting down...", signal.SIGTERM)
        if not self.gracefully_exit:
            self.gracefully_exit = True
            self._spawn(self._drain())

    async def _drain(self) -> None:
        deadline = time.monotonic() + self.drain_timeout
        poll = self.options.drain_poll_seconds
        await asyncio.sleep(min(poll, self.drain_timeout))
        while True:
            remaining = self.engine.counters.in_flight
            log.info("Gracefully exiting... remaining number of requests %d", remaining)
            if remaining == 0:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                log.error(
                    "emulator: --drain-timeout %.0fs passed with %d requests in flight", self.drain_timeout, remaining
                )
                self.exit_code = 1
                break
            await asyncio.sleep(min(poll, left))
        self._stopped.set()

    def stop_now(self, code: int = 0) -> None:
        self.exit_code = code
        self._stopped.set()

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, self.on_sigterm)
        loop.add_signal_handler(signal.SIGINT, self.stop_now)
        cfg = self.cfg
        if self.is_worker_node:
            return await self._run_worker_node()
        bootstrap: pd.BootstrapServer | None = None
        try:
            if cfg.disaggregation_mode == "prefill":
                if self.options.fail == "bootstrap-refused":
                    log.warning("emulator: fail=bootstrap-refused: the bootstrap server does not listen")
                else:
                    bootstrap = pd.BootstrapServer(
                        cfg.version, self.bind, cfg.bootstrap_port, revision=self.options.revision
                    )
                    await bootstrap.start()
                    self.engine.bootstrap = bootstrap
            if cfg.disaggregation_mode != "prefill" and self.options.fail in ("bootstrap-refused", "transfer-failure"):
                log.warning("emulator: fail=%s acts on prefill servers only; ignored here", self.options.fail)
            if cfg.nnodes > 1 and not await self._rendezvous():
                return self.exit_code
            log.info("emulator: loading the model (emulated, %.1fs)", self.options.load_seconds)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopped.wait(), self.options.load_seconds)
            if self._stopped.is_set():
                return self.exit_code
            if self.options.fail == "load-failure":
                return self._load_failed()
            if cfg.disaggregation_mode == "prefill":
                await self._register_prefill_ranks()
            self._runner = web.AppRunner(
                self.app,
                access_log=logging.getLogger("emulator.access") if self.access_log else None,
                access_log_format='%a "%r" %s %b %Tfs',
                handle_signals=False,
                shutdown_timeout=0.5,
            )
            await self._runner.setup()
            await web.TCPSite(self._runner, host=self.bind, port=cfg.port, reuse_address=True).start()
            log.info(
                "emulated SGLang %s %s server %s on http://%s:%d (model %s)",
                cfg.version,
                cfg.disaggregation_mode,
                self.pod_name,
                self.bind,
                cfg.port,
                cfg.served_model_name,
            )
            if cfg.skip_server_warmup:
                self.status = "Up"
                log.info("The server is fired up and ready to roll!")
            else:
                self._spawn(self._warmup())
            await self._stopped.wait()
            return self.exit_code
        finally:
            for task in list(self._tasks):
                task.cancel()
            if self.group is not None:
                # 0.5.23's drain ends with a ShutdownReq broadcast to every rank (tokenizer_manager.py:3544-3547);
                # 0.5.2's with the server killing itself, which the other nodes see as a lost peer.
                await self.group.stop(shutdown=self.gracefully_exit and cfg.version == "0.5.23")
            if self._runner is not None:
                await self._runner.cleanup()
            if bootstrap is not None:
                await bootstrap.stop()
            await self.engine.close()

    # --- multi-node -------------------------------------------------------------------------------------------------

    async def _until_stopped(self, work: Awaitable[Any]) -> asyncio.Future[Any] | None:
        """Run `work` until it ends or the server is stopped; its future when it ended, None when stopped first."""
        task = asyncio.ensure_future(work)
        stopped = asyncio.ensure_future(self._stopped.wait())
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if task.done():
            return task
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return None

    def _never_meets(self) -> None:
        # 0.5.2 model_executor/model_runner.py:619-622, 0.5.23 distributed/bootstrap.py:241-247: without
        # --dist-init-addr every node's ranks rendezvous at an address of their own, and wait there.
        log.warning(
            "emulator: --nnodes %d without --dist-init-addr: this node's ranks rendezvous on their own address and "
            "the group never forms (the server never starts)",
            self.cfg.nnodes,
        )

    def _node_lost(self, why: str) -> None:
        """A peer node of the group is gone: die like a scheduler whose collective failed (group.py)."""
        self.engine.crash(
            f"RuntimeError: {why} (emulated: a collective with the lost ranks fails, or NCCL's watchdog times out)"
        )

    async def _rendezvous(self) -> bool:
        """Node rank 0: listen for the other nodes and wait until all of them have joined; False when stopped."""
        if self.cfg.dist_init_addr is None:
            self._never_meets()
            await self._stopped.wait()
            return False
        port = parse_dist_init_addr(self.cfg.dist_init_addr).port
        self.group = GroupLeader(self.bind, port, self.cfg.nnodes, lambda rank, why: self._node_lost(why))
        await self.group.start()
        return await self._until_stopped(self.group.complete.wait()) is not None

    def _build_worker_app(self) -> web.Application:
        """The dummy health-check server of a node with rank >= 1: only `facts.worker_routes`, each always 200, and
        the metrics exporter with --enable-metrics (add_prometheus_middleware; the samples the node's own scheduler
        ranks would export are not emulated: it answers none)."""
        app = web.Application(middlewares=[self._fastapi_errors])

        async def ok(request: web.Request) -> web.Response:
            return web.Response(status=200)

        async def no_samples(request: web.Request) -> web.Response:
            from prometheus_client import CONTENT_TYPE_LATEST

            return web.Response(body=b"", headers={"Content-Type": CONTENT_TYPE_LATEST})

        for route in self.facts.worker_routes:
            for method in route.methods:
                app.router.add_route(method, route.path, ok)
        if self.cfg.enable_metrics:
            app.router.add_route("GET", "/metrics", no_samples)
            app.router.add_route("GET", "/metrics/{rest:.*}", no_samples)
        return app

    async def _run_worker_node(self) -> int:
        """Node rank >= 1: join the group, load, serve the dummy health-check server until the group ends."""
        cfg = self.cfg
        log.info(
            "emulated SGLang %s node rank %d of %d (%s): no tokenizer and no HTTP API on this node",
            cfg.version,
            cfg.node_rank,
            cfg.nnodes,
            self.pod_name,
        )
        if cfg.dist_init_addr is None:
            self._never_meets()
            await self._stopped.wait()
            return self.exit_code
        address = parse_dist_init_addr(cfg.dist_init_addr)
        member: GroupMember | None = None
        try:
            joined = await self._until_stopped(
                GroupMember.join(address, cfg.node_rank, cfg.nnodes, self.resolver.resolve, self.bind)
            )
            if joined is None:
                return self.exit_code
            try:
                member = joined.result()
            except GroupError as error:
                log.error("Scheduler hit an exception: RuntimeError: the group refused this node: %s", error)
                return 1
            started = await self._until_stopped(member.wait_start())
            if started is None:
                return self.exit_code
            if not started.result():
                self._node_lost(f"the connection to the group's leader {member.leader} was lost")
            end = asyncio.ensure_future(member.wait_end())
            self._tasks.add(end)
            log.info("emulator: loading the model (emulated, %.1fs)", self.options.load_seconds)
            loading = asyncio.ensure_future(asyncio.sleep(self.options.load_seconds))
            stopped = asyncio.ensure_future(self._stopped.wait())
            await asyncio.wait({end, loading, stopped}, return_when=asyncio.FIRST_COMPLETED)
            loading.cancel()
            stopped.cancel()
            if self._stopped.is_set():
                return self.exit_code
            if not end.done():
                if self.options.fail == "load-failure":
                    return self._load_failed()
                self._runner = web.AppRunner(
                    self._build_worker_app(), access_log=None, handle_signals=False, shutdown_timeout=0.5
                )
                await self._runner.setup()
                await web.TCPSite(self._runner, host=self.bind, port=cfg.port, reuse_address=True).start()
                if cfg.version == "0.5.2":
                    log.info("Starting dummy health check server at %s:%d", self.bind, cfg.port)
                else:
                    log.info("Dummy health check server started in background thread at %s:%d", self.bind, cfg.port)
                if await self._until_stopped(asyncio.shield(end)) is None:
                    return self.exit_code
            if end.result() == "shutdown":
                log.info("node rank %d: the leader shut the group down (ShutdownReq): exiting", cfg.node_rank)
                return 0
            self._node_lost(f"the connection to the group's leader {member.leader} was lost")
            return 1  # not reached: _node_lost kills the process
        finally:
            for task in list(self._tasks):
                task.cancel()
            if member is not None:
                member.close()
            if self._runner is not None:
                await self._runner.cleanup()
            await self.engine.close()
