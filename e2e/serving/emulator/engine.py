"""The emulated scheduler: one request's life on a prefill, a decode or a colocated ("null") server, and the faults.

A request yields SGLang's /generate output dicts (`text`, `output_ids`, `meta_info`), one per scheduler step when
streaming; a scheduler abort raises `Abort(message, status_code)` with SGLang's message for that failure (the HTTP
layer turns it into what that release returns). Every output's `meta_info` carries an `emulator` object saying who
served it (see `Engine.report`).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import logging
import math
import os
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Final, NoReturn

import aiohttp

from e2e.serving.emulator import batching, capacity, dp, pd, profiles, revision, sizing, textgen
from e2e.serving.emulator.facts import EMULATOR_PREFIX, FAKE_BOOTSTRAP_HOST, VersionFacts
from e2e.serving.emulator.fingerprint import fingerprint_hash, mismatch_message, speculative_fingerprint
from e2e.serving.emulator.metrics import Metrics
from e2e.serving.emulator.options import EmulateOptions
from e2e.serving.emulator.sglang_args import ServerConfig

log = logging.getLogger("emulator.engine")

DEFAULT_CONTEXT_LENGTH: Final = 131072
TOKEN_CAPACITY: Final = 500000
"""max_total_num_tokens the emulator reports (KV pool size)."""
DEFAULT_PREFILL_FAILURE_REASON: Final = "Failed to get kvcache from prefill instance, it might be dead"
"""0.5.2 mooncake/conn.py:895-898; 0.5.23 common/conn.py:311-314 (used when the prefill sent no reason)."""


class Abort(Exception):
    """A scheduler abort: `FINISH_ABORT(message, status_code)` (0.5.2 managers/schedule_batch.py:163-176)."""

    def __init__(self, message: str, status_code: int, partial: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.partial = partial
        """The output dict the aborted request had produced (0.5.23 streams it with the abort finish reason)."""

    def finish_reason(self) -> dict[str, Any]:
        return {"type": "abort", "message": self.message, "status_code": self.status_code, "err_type": None}


@dataclass
class GenRequest:
    """The fields of GenerateReqInput (managers/io_struct.py) the emulator uses."""

    rid: str
    input_ids: list[int]
    max_new_tokens: int | None = 128
    ignore_eos: bool = False
    stream: bool = False
    return_logprob: bool = False
    bootstrap_host: str | None = None
    bootstrap_port: int | None = None
    bootstrap_room: int | None = None
    log_metrics: bool = True
    routed_dp_rank: int | None = None
    """The DP rank the request names for this server: 0.5.2 `data_parallel_rank`, 0.5.23 `routed_dp_rank` (or its
    deprecated alias `data_parallel_rank`)."""
    disagg_prefill_dp_rank: int | None = None
    """0.5.23: the prefill DP rank holding the request's KV, as a router may name it (decode side)."""
    dp_rank: int = 0
    """The DP rank this server's DP controller placed the request on (`dp.Dispatcher`)."""
    ticket: batching.Ticket | None = None
    """The request's place in the capacity model's scheduler, once it has one."""

    @property
    def is_fake(self) -> bool:
        return self.bootstrap_host == FAKE_BOOTSTRAP_HOST


@dataclass
class Counters:
    """In-flight requests per stage; the PD queue counts are per DP rank (SGLang exports them per DP scheduler)."""

    prefill_bootstrap: collections.Counter[int] = field(default_factory=collections.Counter)
    prefill_inflight: collections.Counter[int] = field(default_factory=collections.Counter)
    decode_prealloc: collections.Counter[int] = field(default_factory=collections.Counter)
    decode_transfer: collections.Counter[int] = field(default_factory=collections.Counter)
    running: int = 0
    in_flight: int = 0
    handled: int = 0
    used_tokens: int = 0
    generated_recent: list[tuple[float, int, int]] = field(default_factory=list)
    """(when, tokens, DP rank) of the last 10 s: `sglang:gen_throughput` per DP scheduler."""


def new_rid() -> str:
    """GenerateReqInput's default rid (managers/io_struct.py:245 in 0.5.2): uuid4 hex."""
    return uuid.uuid4().hex


def verify_step_sizes(accept: float, num_draft_tokens: int, remaining: int) -> list[int]:
    """Tokens per verify step for a request's `remaining` tokens (those after prefill's first): sizes within
    1..num_draft_tokens whose running sum follows `accept` per step, the last one cut at the request's end. So a
    request's own accept length is `accept` for long outputs and lower for short ones (a 7-token rest at 1.565 takes
    5 steps: 1.40), the swing between prompt mixes the operator's health judgement must tolerate."""
    cap = max(1, num_draft_tokens)
    steps: list[int] = []
    done = 0
    total = 0.0
    while done < remaining:
        total += accept
        size = max(1, min(cap, math.floor(total) - done, remaining - done))
        steps.append(size)
        done += size
    return steps


def node_tp_ranks(cfg: ServerConfig) -> range:
    """The TP ranks whose schedulers run on this node: `tp_size / nnodes` consecutive ranks from
    `node_rank * tp_size / nnodes` (0.5.2 entrypoints/engine.py:753-757 `_launch_subprocesses`, tp_rank_range, with
    pp_size 1: the operator refuses --pp-size)."""
    per_node = max(1, cfg.tp_size // max(1, cfg.nnodes))
    first = cfg.node_rank * per_node
    return range(first, first + per_node)


class Engine:
    def __init__(
        self,
        cfg: ServerConfig,
        options: EmulateOptions,
        version_facts: VersionFacts,
        *,
        bind: str,
        pod_name: str,
        timeouts: pd.Timeouts,
    ) -> None:
        self.cfg = cfg
        self.options = options
        self.facts = version_facts
        self.bind = bind
        self.pod_name = pod_name
        self.timeouts = timeouts
        self.layout = dp.layout(cfg)
        # DP replicas (plain --dp-size) would restart tp_rank at 0 per replica; the operator renders only DP attention.
        self.metrics = Metrics(
            version_facts,
            cfg.served_model_name,
            cfg.disaggregation_mode,
            tp_ranks=node_tp_ranks(cfg),
            dp_size=self.layout.num_dp_ranks,
            attn_tp_size=self.layout.attn_tp_size,
        )
        self.fingerprint = speculative_fingerprint(cfg, options)
        self.dispatcher = dp.Dispatcher(self.layout)
        """This server's DP controller (one DP rank unless DP attention or replicas)."""
        self.counters = Counters()
        self.bootstrap: pd.BootstrapServer | None = None
        self._orphan_rooms = pd.RoomTable()
        self._session: aiohttp.ClientSession | None = None
        self._prefill_info: dict[str, dict[str, Any]] = {}
        """bootstrap_addr -> parallel info (decode's prefill_info_table / prefill_dp_size_table)."""
        self._ensure_lock: dict[str, asyncio.Lock] = {}
        self._refused_prefills: dict[str, tuple[float, str]] = {}
        """bootstrap_addr -> (refused until, reason): patch 0002's back-off for a mismatched prefill."""
        self.before_crash: list[Any] = []
        """Callables run before the process kills itself (flush logs)."""
        self.transfer_bytes_per_second = options.kv_transfer_gb_per_second * 1e9
        self.kv_bytes_per_token = options.kv_bytes_per_token
        self.scheduler = self._capacity_scheduler()
        """The capacity model's scheduler (None: every request at its own pace, `--emulate capacity=off`)."""
        if self.scheduler is not None:
            self.timeouts = timeouts.scaled(options.time_scale)

    def _capacity_scheduler(self) -> batching.Scheduler | None:
        """A scheduler per DP rank sized like SGLang's (e2e.serving.emulator.sizing) when the capacity model is on
        and the model has a profile; PD servers only (a colocated server keeps the per-request pace)."""
        cfg, options = self.cfg, self.options
        if options.capacity == "off" or self.mode not in ("prefill", "decode"):
            return None
        profile = profiles.select_profile(
            cfg.model_path,
            options.gpu,
            tp=cfg.tp_size,
            dp=self.layout.attn_dp_size,
            ep=int(cfg.given.get("--ep-size") or cfg.given.get("--expert-parallel-size") or 1),
            kv_cache_dtype=cfg.kv_cache_dtype,
            speculative_algorithm=cfg.speculative_algorithm,
            num_steps=cfg.speculative_num_steps,
            num_draft_tokens=cfg.speculative_num_draft_tokens,
            accept_length=float(options.accept_length or 1.0),
        )
        if profile is None:
            log.info("emulator: no capacity profile for %s; requests advance at their own pace", cfg.model_path)
            return None
        ranks = self.layout.num_dp_ranks
        sized = sizing.size_server(
            cfg, profile, ranks=ranks, pool_tokens=options.kv_pool_tokens, context_length=self.context_length()
        )
        if sized.limits.max_total_num_tokens <= 0:
            # SGLang refuses to start here ("Not enough memory. Please try to increase --mem-fraction-static",
            # 0.5.2 model_runner.py:1318); the emulator serves at its own pace instead, so that a layout test on a
            # GPU the model does not fit still runs. Said loudly: no capacity figure from this server means anything.
            log.error(
                "emulator: %s does not fit %d x %s at this mem fraction (no KV pool); SGLang would not start. "
                "Capacity model off for this server.",
                cfg.model_path,
                profile.gpus,
                profile.gpu.name,
            )
            return None
        self.transfer_bytes_per_second = sized.transfer_bytes_per_second
        self.kv_bytes_per_token = profile.model.kv_bytes_per_token
        role: capacity.Role = "prefill" if self.mode == "prefill" else "decode"
        servers = [capacity.Server(profile, role, sized.limits, live=True) for _ in range(ranks)]
        log.info(
            "emulator: capacity model %s on %s, %d DP rank(s) of %d KV tokens and %d running requests, time scale %g",
            profile.model.name,
            profile.gpu.name,
            ranks,
            sized.limits.max_total_num_tokens,
            sized.limits.max_running_requests,
            options.time_scale,
        )
        return batching.Scheduler(servers, time_scale=options.time_scale, on_step=self._update_gauges)

    def set_accept_length(self, accept_length: float) -> None:
        """The emulated draft got better or worse: the capacity model's verify steps emit that many tokens."""
        if self.scheduler is None:
            return
        for server in self.scheduler.servers:
            spec = server.profile.speculative
            if spec is not None:
                server.profile = dataclasses.replace(
                    server.profile, speculative=dataclasses.replace(spec, accept_length=accept_length)
                )

    # --- plumbing ---------------------------------------------------------------------------------------------------

    @property
    def mode(self) -> str:
        return self.cfg.disaggregation_mode

    @property
    def speculative(self) -> bool:
        return self.cfg.speculative_algorithm is not None

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # No connection cap: SGLang's PD side channel is ZMQ sockets, which have none, and a decode under
            # overload long-polls hundreds of rooms at once (aiohttp's default of 100 connections made the handshakes
            # queued behind them time out).
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        return self._session

    async def close(self) -> None:
        if self.scheduler is not None:
            await self.scheduler.stop()
        if self._session is not None:
            await self._session.close()

    def context_length(self) -> int:
        return self.options.context_length or self.cfg.context_length or DEFAULT_CONTEXT_LENGTH

    def load(self) -> int:
        """What /get_load and /v1/loads report as used tokens: with the capacity model SGLang's (used KV + waiting
        prompts), else prompt + output tokens of the requests in flight."""
        if self.scheduler is not None:
            return self.scheduler.load()
        return self.counters.used_tokens

    def _update_gauges(self) -> None:
        c = self.counters
        now = time.monotonic()
        c.generated_recent = [(t, n, r) for t, n, r in c.generated_recent if now - t < 10.0]
        throughput: dict[int, float] = collections.defaultdict(float)
        for _, tokens, rank in c.generated_recent:
            throughput[rank] += tokens / 10.0
        sched = self.scheduler
        for rank in self.metrics.dp_ranks:
            if sched is None:  # the per-request pace: the server's totals on its first DP rank
                first = rank == self.metrics.dp_ranks[0]
                running = c.running if first else 0
                queued = c.decode_prealloc[rank] + c.prefill_bootstrap[rank]
                used, total = (c.used_tokens if first else 0), TOKEN_CAPACITY
            else:  # SGLang's own figures per DP scheduler: the running batch, its waiting_queue, the KV pool
                server = sched.servers[rank]
                running, queued = server.running_count, server.queued_count
                used, total = server.used_tokens, server.limits.max_total_num_tokens
            self.metrics.set_queues(
                running=running,
                queued=queued,
                prefill_bootstrap=c.prefill_bootstrap[rank],
                prefill_inflight=c.prefill_inflight[rank],
                dp_rank=rank,
            )
            self.metrics.set_decode_queues(
                prealloc=c.decode_prealloc[rank], transfer=c.decode_transfer[rank], dp_rank=rank
            )
            self.metrics.set_usage(
                used_tokens=used, capacity=total, gen_throughput=throughput.get(rank, 0.0), dp_rank=rank
            )

    def crash(self, reason: str, who: str = "Scheduler") -> NoReturn:
        """Die like SGLang after a scheduler (or DP controller) exception: it logs it and SIGQUITs the server, which
        kills its process tree (0.5.2 utils.py:841-877: SIGKILL to itself), dropping every connection."""
        log.error("%s hit an exception: %s", who, reason)
        log.error("Received sigquit from a child process. It usually means the child failed.")
        for hook in self.before_crash:
            hook()
        sys.stderr.flush()
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)
        raise SystemExit(137)  # not reached

    # --- the pairing report -----------------------------------------------------------------------------------------

    def report(self, req: GenRequest, peer: dict[str, Any] | None) -> dict[str, Any]:
        """Who served this response. `peer` is the other side's identity from the room (prefill's on a decode)."""
        me: dict[str, Any] = {
            "pod": self.pod_name,
            "ip": self.bind,
            "fingerprint": self.fingerprint,
            "revision": self.options.revision,
            "dp_rank": req.dp_rank,
        }
        prefill: dict[str, Any] | None
        decode: dict[str, Any] | None
        if self.mode == "prefill":
            prefill, decode = me, peer
        elif self.mode == "decode":
            prefill, decode = peer, me
        else:
            prefill, decode = me, me
        prefill_fp = prefill.get("fingerprint") if prefill else None
        decode_fp = decode.get("fingerprint") if decode else None
        return {
            "emulated": True,
            "served_by": self.mode if self.mode in ("prefill", "decode") else "null",
            "prefill_pod": prefill.get("pod") if prefill else None,
            "prefill_ip": prefill.get("ip") if prefill else None,
            "decode_pod": decode.get("pod") if decode else None,
            "decode_ip": decode.get("ip") if decode else None,
            "bootstrap_port": req.bootstrap_port if self.mode == "decode" else self.cfg.bootstrap_port,
            "bootstrap_room": req.bootstrap_room,
            "fingerprint": fingerprint_hash(self.fingerprint),
            "prefill_fingerprint": fingerprint_hash(prefill_fp) if prefill else None,
            "decode_fingerprint": fingerprint_hash(decode_fp) if decode else None,
            "fingerprint_match": (prefill_fp == decode_fp) if (prefill and decode) else None,
            "prefill_revision": prefill.get("revision") if prefill else None,
            "decode_revision": decode.get("revision") if decode else None,
            "prefill_dp_rank": prefill.get("dp_rank") if prefill else None,
            "decode_dp_rank": decode.get("dp_rank") if decode else None,
            # The DP ranks the request itself named (a DP-aware router's fields), as this server received them.
            "routed_dp_rank": req.routed_dp_rank,
            "disagg_prefill_dp_rank": req.disagg_prefill_dp_rank,
            "sglang_version": self.cfg.version,
        }

    # --- entry ------------------------------------------------------------------------------------------------------

    async def generate(self, req: GenRequest) -> AsyncIterator[dict[str, Any]]:
        """The outputs of one request (several when streaming, the last one finished), or Abort."""
        health_check = not req.log_metrics
        if not health_check:
            self.counters.handled += 1
            if self.options.fail == "crash" and self.counters.handled > self.options.crash_after:
                self.crash(f"emulated crash (--emulate fail=crash crash-after={self.options.crash_after})")
        if self.mode != "null" and req.bootstrap_room is None and not req.is_fake:
            raise Abort(self.facts.missing_room_message.format(rid=req.rid), 400)
        if req.bootstrap_port is None:
            # 0.5.2 managers/scheduler.py:1164-1166: the server's own --disaggregation-bootstrap-port.
            req.bootstrap_port = self.cfg.bootstrap_port
        self._dispatch(req)
        counted = not health_check and not req.is_fake
        if counted:
            self.dispatcher.start(req.dp_rank)
        started = time.monotonic()
        tokens = len(req.input_ids)
        self.counters.in_flight += 1
        self.counters.used_tokens += tokens
        try:
            if self.mode == "prefill":
                source = self._prefill(req, started)
            elif self.mode == "decode":
                source = self._decode(req, started)
            else:
                source = self._colocated(req, started)
            async for out in source:
                yield out
        except Abort:
            if not health_check:
                self.metrics.observe_aborted_request()
            raise
        finally:
            if req.ticket is not None and self.scheduler is not None:
                self.scheduler.cancel(req.ticket)
            if counted:
                self.dispatcher.finish(req.dp_rank)
            self.counters.in_flight -= 1
            self.counters.used_tokens -= tokens
            self._update_gauges()

    def _dispatch(self, req: GenRequest) -> None:
        """The DP controller places the request on a DP rank (`dp.Dispatcher`): 0.5.23's tokenizer refuses an
        out-of-range routed rank (HTTP 400); a dispatch exception kills a 0.5.2 server (its DP controller process
        raises and SIGQUITs it)."""
        try:
            self.dispatcher.check(req.routed_dp_rank)
            room = req.bootstrap_room if not req.is_fake else 0
            req.dp_rank = self.dispatcher.choose(room, req.routed_dp_rank)
        except dp.DispatchError as exc:
            if exc.status is not None:
                raise Abort(exc.message, exc.status) from None
            self.crash(f"Traceback (most recent call last): ... {exc.message}", who="DataParallelController")

    # --- prefill ----------------------------------------------------------------------------------------------------

    async def _prefill(self, req: GenRequest, started: float) -> AsyncIterator[dict[str, Any]]:
        room_id = req.bootstrap_room
        room: pd.Room | None = None
        decode_peer: dict[str, Any] | None = None
        if not req.is_fake and room_id is not None:
            # With fail=bootstrap-refused nothing can reach this table, so the request waits out its bootstrap timeout.
            rooms = self.bootstrap.rooms if self.bootstrap is not None else self._orphan_rooms
            room = rooms.get(room_id, req.dp_rank)
            room.prefill = {
                "pod": self.pod_name,
                "ip": self.bind,
                "fingerprint": self.fingerprint,
                "revision": self.options.revision,
                "rid": req.rid,
                "dp_rank": req.dp_rank,
            }
            self._prefill_dp_bookkeeping(req, room)
            if room.decode is not None and room.status == pd.BOOTSTRAPPING:
                room.status = pd.WAITING_FOR_INPUT
            room.touch()
            self.counters.prefill_bootstrap[req.dp_rank] += 1
            self._update_gauges()
            try:
                await self._wait_for_decode(req, room, started)
            finally:
                self.counters.prefill_bootstrap[req.dp_rank] -= 1
            decode_peer = room.decode
        bootstrap_done = time.monotonic()
        if self.scheduler is not None and not req.is_fake:
            # The prefill scheduler runs it (chunked, batched with others) once its decode has pre-allocated.
            req.ticket = self.scheduler.submit(req.dp_rank, len(req.input_ids), 1)
            async for _ in req.ticket.sizes():
                pass
        else:
            await asyncio.sleep(len(req.input_ids) / self.options.prefill_tokens_per_second)
        first_id, first_text = textgen.output_token(1)
        if room is not None:
            self.counters.prefill_inflight[req.dp_rank] += 1
            self._update_gauges()
            try:
                await self._transfer(req, room, decode_peer, (bootstrap_done - started) * 1000.0, first_id, first_text)
            finally:
                self.counters.prefill_inflight[req.dp_rank] -= 1
        # Prefill answers once the KV transfer is done, finish_reason length 0, with the one token it sampled
        # (0.5.2 disaggregation/prefill.py:405 and :510-513; 0.5.23 prefill.py:1226).
        out = self._output(req, [first_id], first_text, {"type": "length", "length": 0}, 0, decode_peer, started)
        self._finish_metrics(req, out, started, first_token_at=time.monotonic())
        yield out

    def _prefill_dp_bookkeeping(self, req: GenRequest, room: pd.Room) -> None:
        """0.5.23's KV sender with several DP ranks (common/conn.py:2160-2181): a prefill that does not follow the room
        registers the room's DP rank with its bootstrap server (in-process here: SGLang POSTs /register_dp_rank to
        it); a room-following prefill whose request was routed to another rank fails it at once."""
        if req.disagg_prefill_dp_rank is not None or req.bootstrap_room is None:
            return
        conflict = dp.prefill_conflict(self.layout, req.dp_rank, req.bootstrap_room)
        if conflict is not None:
            room.status, room.failure = pd.FAILED, conflict
            room.touch()
        elif dp.prefill_registers_room(self.layout) and self.bootstrap is not None:
            self.bootstrap.room_to_dp_rank[req.bootstrap_room] = {"dp_rank": req.dp_rank, "timestamp": time.time()}

    async def _wait_for_decode(self, req: GenRequest, room: pd.Room, started: float) -> None:
        """KVPoll.Bootstrapping until the decode's indices arrive (SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT)."""
        assert req.bootstrap_room is not None
        while room.decode is None and room.status not in (pd.FAILED,):
            elapsed = time.monotonic() - started
            remaining = self.timeouts.bootstrap - elapsed
            if remaining <= 0:
                reason = f"Request {req.bootstrap_room} timed out after {elapsed:.1f}s in KVPoll.Bootstrapping"
                log.warning(
                    "Some requests timed out when bootstrapping, which means prefill instances fail to receive the "
                    "KV indices from the decode instance of this request. If a greater mean TTFT is acceptable, you "
                    "can 'export SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT=600' (10 minutes) to relax the timeout "
                    "condition. "
                )
                room.status, room.failure = pd.FAILED, reason
                room.touch()
                self.metrics.increment_bootstrap_failed_reqs(req.dp_rank)
                raise Abort(self._prefill_failure("bootstrap", req, reason), 500)
            waiter = room.changed
            try:
                await asyncio.wait_for(waiter.wait(), remaining)
            except TimeoutError:
                continue
        if room.status == pd.FAILED:
            self.metrics.increment_bootstrap_failed_reqs(req.dp_rank)
            raise Abort(self._prefill_failure("bootstrap", req, room.failure or "Aborted by AbortReq."), 500)

    async def _transfer(
        self,
        req: GenRequest,
        room: pd.Room,
        decode_peer: dict[str, Any] | None,
        bootstrap_ms: float,
        first_id: int,
        first_text: str,
    ) -> None:
        room.status = pd.TRANSFERRING
        room.touch()
        size = len(req.input_ids) * self.kv_bytes_per_token
        seconds = size / self.transfer_bytes_per_second
        scale = self.options.time_scale if self.scheduler is not None else 1.0
        try:
            await asyncio.sleep(seconds * scale)
        finally:
            if req.ticket is not None and self.scheduler is not None:
                self.scheduler.release(req.ticket)  # the KV leaves the prefill's pool when its transfer is over
        target = decode_peer or {}
        if self.options.fail == "transfer-failure" or room.status == pd.FAILED:
            reason = (
                room.failure or f"Failed to send kv chunk of {room.room} to {target.get('ip')}:{target.get('port')}"
            )
            room.status = pd.FAILED
            room.failure = reason
            room.touch()
            self.metrics.increment_transfer_failed_reqs(req.dp_rank)
            raise Abort(self._prefill_failure("transfer", req, reason), 500)
        room.first_token = {"id": first_id, "text": first_text}
        room.status = pd.SUCCESS
        room.touch()
        self.metrics.observe_kv_transfer(
            speed_gb_s=self.transfer_bytes_per_second / 1e9,
            latency_ms=max(seconds * 1000.0, 0.001),
            bootstrap_ms=bootstrap_ms,
        )

    def _prefill_failure(self, stage: str, req: GenRequest, reason: str) -> str:
        """0.5.2 disaggregation/prefill.py:229-235 (bootstrap) and :528-533 (transfer); same text in 0.5.23."""
        head = "Prefill bootstrap failed" if stage == "bootstrap" else "Prefill transfer failed"
        message = (
            f"{head} for request rank=0 req.rid={req.rid!r} req.bootstrap_room={req.bootstrap_room} "
            f"with exception KVTransferError(bootstrap_room={req.bootstrap_room}): {reason}"
        )
        log.error(message)
        return message

    # --- decode -----------------------------------------------------------------------------------------------------

    async def _decode(self, req: GenRequest, started: float) -> AsyncIterator[dict[str, Any]]:
        peer: dict[str, Any] | None = None
        first: dict[str, Any] = {}
        if req.is_fake:
            first_id, first_text = textgen.output_token(1)
            first = {"id": first_id, "text": first_text}
        else:
            self.counters.decode_prealloc[req.dp_rank] += 1
            self._update_gauges()
            try:
                info = await self._handshake(req)
            except pd.HandshakeError as exc:
                self.metrics.increment_bootstrap_failed_reqs(req.dp_rank)
                raise Abort(self._decode_failure("handshake", req, exc.reason), 500) from None
            except pd.PrefillMismatch as exc:
                self._prefill_mismatch(req, str(exc))
            except pd.CrossRevision as exc:
                log.error("%s", exc)
                raise Abort(str(exc), 500) from None
            except pd.ConfigMismatch as exc:
                self.crash(f"Traceback (most recent call last): ... RuntimeError: {exc}")
            finally:
                self.counters.decode_prealloc[req.dp_rank] -= 1
            self.counters.decode_transfer[req.dp_rank] += 1
            self._update_gauges()
            try:
                room = await self._wait_for_transfer(req, info)
            except pd.HandshakeError as exc:
                self.metrics.increment_transfer_failed_reqs(req.dp_rank)
                raise Abort(self._decode_failure("transfer", req, exc.reason), 500) from None
            finally:
                self.counters.decode_transfer[req.dp_rank] -= 1
            if req.ticket is not None and self.scheduler is not None:
                self.scheduler.kv_arrived(req.ticket)
            peer = room.get("prefill") or {}
            first = room.get("first_token") or {}
            if self.facts.has_fingerprint is False:
                remote = peer.get("fingerprint")
                if remote != self.fingerprint:
                    log.warning(
                        "emulator: the prefill's speculative fingerprint differs from this decode's; SGLang %s does "
                        "not check it, so the pair serves (draft state read as garbage on GPUs)",
                        self.cfg.version,
                    )
        async for out in self._generate_tokens(req, started, peer, first):
            yield out

    def _prefill_mismatch(self, req: GenRequest, problem: str) -> NoReturn:
        """Patch 0002 (0.5.23): try_ensure_parallel_info raises PrefillMismatchError, the decode queue aborts the
        requests bound to that prefill (the receiver's recorded failure reaches _update_handshake_waiters: HTTP 500
        with the message) and the server keeps serving. `fingerprint-mismatch=crash` emulates the image before
        that change, where the RuntimeError reached run_scheduler_process and killed the server
        (managers/scheduler.py:6369-6379)."""
        if self.options.fingerprint_mismatch == "crash":
            self.crash(f"Traceback (most recent call last): ... RuntimeError: {problem}")
        self.metrics.increment_bootstrap_failed_reqs(req.dp_rank)
        raise Abort(self._decode_failure("handshake", req, problem), 500)

    def _decode_failure(self, stage: str, req: GenRequest, reason: str) -> str:
        """0.5.2 disaggregation/decode.py:328-338 (handshake) and :585-595 (transfer); 0.5.23 decode.py:1159 and
        :2863-2865."""
        head = "Decode handshake failed" if stage == "handshake" else "Decode transfer failed"
        message = (
            f"{head} for request rank=0 decode_req.req.rid={req.rid!r} "
            f"decode_req.req.bootstrap_room={req.bootstrap_room} "
            f"with exception KVTransferError(bootstrap_room={req.bootstrap_room}): {reason}"
        )
        log.error(message)
        return message

    async def _handshake(self, req: GenRequest) -> dict[str, Any]:
        """Fetch the prefill's parallel info (cached per bootstrap address) and the paired rank's address, then send
        this decode's identity for the room to that rank. Returns {"addr", "rank_url"}."""
        assert req.bootstrap_room is not None
        addr = f"{req.bootstrap_host}:{req.bootstrap_port}"
        info = await self._ensure_parallel_info(addr)
        room = req.bootstrap_room
        dp_size = int(info.get("dp_size") or 1)
        # Which prefill DP rank holds the room (dp.decode_static_rank; 0.5.23 may have to ask the bootstrap server).
        named = req.routed_dp_rank if self.cfg.version == "0.5.2" else req.disagg_prefill_dp_rank
        follow = bool(info.get("follow_bootstrap_room", True))
        static = dp.decode_static_rank(self.cfg.version, room, dp_size, follow, named)
        dp_rank = static if static is not None else await self._query_prefill_dp_rank(addr, room)
        # The prefill attention-TP ranks this decode's TP rank 0 pairs with (each must be registered).
        tp_ranks = dp.target_tp_ranks(self.layout.attn_tp_size, int(info.get("attn_tp_size") or 1))
        # Each release asks for every paired rank with its own query and its own error (text as SGLang's).
        if self.cfg.version == "0.5.2":
            queries = [
                (
                    f"engine_rank={tp_rank}&target_dp_group={dp_rank}&target_pp_rank={pp_rank}",
                    f"Could not fetch bootstrap info for engine rank: 0 and target_dp_group: {dp_rank} "
                    f"and target_pp_rank {pp_rank}",
                )
                for tp_rank in tp_ranks
                for pp_rank in range(int(info.get("pp_size") or 1))
            ]
        else:
            queries = [
                (
                    f"prefill_dp_rank={dp_rank}&prefill_cp_rank=0&target_tp_rank={tp_rank}&target_pp_rank=0",
                    f"Could not fetch bootstrap info for: prefill_dp_rank: {dp_rank} prefill_cp_rank: 0 "
                    f"target_tp_rank: {tp_rank} and target_pp_rank 0",
                )
                for tp_rank in tp_ranks
            ]
        session = self.session()
        rank: dict[str, Any] | None = None
        for query, failure in queries:
            got = await pd.http_get_json(session, f"http://{addr}/route?{query}", timeout=5)
            if got is None or got[0] != 200 or not isinstance(got[1], dict):
                raise pd.HandshakeError(failure, "handshake")
            rank = rank or got[1]
        assert rank is not None
        rank_url = f"http://{rank['rank_ip']}:{rank['rank_port']}"
        await self._preallocate(req)
        me = {
            "pod": self.pod_name,
            "ip": self.bind,
            "port": self.cfg.port,
            "fingerprint": self.fingerprint,
            "revision": self.options.revision,
            "rid": req.rid,
            "sglang_version": self.cfg.version,
            "dp_rank": req.dp_rank,
        }
        answered = await self._send_metadata(f"{rank_url}{EMULATOR_PREFIX}rooms/{room}/decode?dp_rank={dp_rank}", me)
        if answered is None:
            # 0.5.23 common/conn.py:2818-2837 (_send_bootstrap_message: a ZMQError fails the request).
            failed = f"send_metadata to prefill {rank['rank_ip']}:{rank['rank_port']} failed"
            raise pd.HandshakeError(failed, "transfer")
        self._check_revision(req, addr, answered)
        return {"addr": addr, "rank_url": rank_url, "dp_rank": dp_rank}

    async def _send_metadata(self, url: str, me: dict[str, Any]) -> bytes | None:
        """The decode's KV indices to the prefill rank: SGLang pushes a ZMQ message, which fails only when no peer
        takes it within the send timeout (0.5.23's ZMQ_SNDTIMEO; 0.5.2 sets none and blocks). Once the prefill has
        the message, a slow prefill delays the transfer, never the send: the waiting timeout and the heartbeat
        (_wait_for_transfer) judge it. So only a failed connect fails the send here (None, 0.5.23), and the prefill's
        answer, which carries the emulator's revision oracle, is b"" when it does not come within the heartbeat's
        patience (the heartbeat then takes over)."""
        connect = self.timeouts.zmq_send if self.cfg.version == "0.5.23" else None
        patience = self.timeouts.heartbeat_interval * self.timeouts.heartbeat_max_failure
        try:
            async with self.session().post(
                url, json=me, timeout=aiohttp.ClientTimeout(total=patience, sock_connect=connect)
            ) as response:
                return await response.read() if response.status == 200 else b""
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError):
            return None if self.cfg.version == "0.5.23" else b""
        except (aiohttp.ClientError, TimeoutError, OSError):
            return b""

    async def _preallocate(self, req: GenRequest) -> None:
        """With the capacity model, wait in the pre-allocation queue until the request's KV has a place: only then
        does the decode send its KV indices to the prefill (0.5.2 decode.py:368-420, `kv_receiver.init`), so until
        then the prefill holds the request in its bootstrap queue."""
        if self.scheduler is None:
            return
        count, _ = self._plan(req)
        req.ticket = self.scheduler.submit(req.dp_rank, len(req.input_ids), max(0, count - 1))
        await req.ticket.allocated.wait()

    async def _query_prefill_dp_rank(self, addr: str, room: int) -> int:
        """0.5.23, a prefill that does not follow the room: the decode keeps the request pending and asks the
        bootstrap server's /query_dp_ranks until the prefill registered the room (decode.py:1267-1331). SGLang keeps
        it pending for as long as it takes; the emulator gives up after SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT."""
        deadline = time.monotonic() + self.timeouts.bootstrap
        while time.monotonic() < deadline:
            try:
                async with self.session().post(
                    f"http://{addr}/query_dp_ranks",
                    json={"bootstrap_rooms": [room]},
                    timeout=aiohttp.ClientTimeout(total=5),
                ) as response:
                    found = await response.json(content_type=None) if response.status == 200 else {}
            except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
                log.error("Error querying dp_ranks from bootstrap: %s", exc)
                found = {}
            if isinstance(found, dict) and str(room) in found:
                return int(found[str(room)])
            await asyncio.sleep(0.05)
        raise pd.HandshakeError(
            f"emulator: no prefill DP rank registered for bootstrap_room {room} at {addr} within "
            f"{self.timeouts.bootstrap}s (SGLang keeps the request pending)",
            "handshake",
        )

    def _check_revision(self, req: GenRequest, addr: str, answered: bytes) -> None:
        """The cross-revision oracle (not SGLang): the room answer names the prefill's revision; a different one
        than this decode's fails the request (`CrossRevision`). Unset on either side, nothing is checked."""
        try:
            answer = json.loads(answered) if answered else None
        except ValueError:
            answer = None
        prefill_revision = answer.get("prefill_revision") if isinstance(answer, dict) else None
        if revision.conflict(self.options.revision, prefill_revision):
            assert req.bootstrap_room is not None
            raise pd.CrossRevision(
                revision.message(
                    prefill=addr,
                    prefill_revision=prefill_revision,
                    decode=self.pod_name,
                    decode_revision=self.options.revision,
                    room=req.bootstrap_room,
                )
            )

    async def _ensure_parallel_info(self, addr: str) -> dict[str, Any]:
        cached = self._prefill_info.get(addr)
        if cached is not None:
            return cached
        lock = self._ensure_lock.setdefault(addr, asyncio.Lock())
        async with lock:
            cached = self._prefill_info.get(addr)
            if cached is not None:
                return cached
            # Patch 0002 (_ensure_prefill_info): within its back-off a refused prefill's requests fail at once;
            # after it, /route is fetched and judged again.
            refused = self._refused_prefills.get(addr)
            if refused is not None and time.monotonic() < refused[0]:
                raise pd.PrefillMismatch(refused[1])
            self._refused_prefills.pop(addr, None)
            if self.cfg.version == "0.5.2":
                info = await self._parallel_info_0_5_2(addr)
            else:
                try:
                    info = await self._parallel_info_0_5_23(addr)
                except pd.PrefillMismatch as exc:
                    backoff = self.options.refused_prefill_backoff
                    log.error("%s Aborting the requests bound to it; refusing it for %.0f s.", exc, backoff)
                    self._refused_prefills[addr] = (time.monotonic() + backoff, str(exc))
                    raise
            self._prefill_info[addr] = info
            return info

    async def _parallel_info_0_5_2(self, addr: str) -> dict[str, Any]:
        # 0.5.2 mooncake/conn.py:1228-1245 and :1393-1414 (no timeout on this GET).
        url = f"http://{addr}/route?engine_rank=-1&target_dp_group=-1&target_pp_rank=-1"
        got = await pd.http_get_json(self.session(), url, timeout=60)
        failure = pd.HandshakeError(f"Could not fetch prefill parallel info from bootstrap_addr: {addr}", "handshake")
        if got is None or got[0] != 200 or not isinstance(got[1], dict):
            raise failure
        data = got[1]
        try:
            return {
                "attn_tp_size": int(data["prefill_attn_tp_size"]),
                "dp_size": int(data["prefill_dp_size"]),
                "pp_size": int(data["prefill_pp_size"]),
            }
        except (KeyError, TypeError, ValueError):
            raise failure from None

    async def _parallel_info_0_5_23(self, addr: str) -> dict[str, Any]:
        # 0.5.23 disaggregation/decode.py:1182-1222 (_ensure_prefill_info: up to 15 attempts, 1 s apart, then the
        # receiver is aborted) and common/conn.py:1293-1330 (try_ensure_parallel_info and its checks).
        url = f"http://{addr}/route?prefill_dp_rank=-1&prefill_cp_rank=-1&target_tp_rank=-1&target_pp_rank=-1"
        for attempt in range(1, self.options.ensure_retries + 1):
            got = await pd.http_get_json(self.session(), url, timeout=5)
            if got is not None and got[0] == 200 and isinstance(got[1], dict):
                self._check_prefill_info(addr, got[1])
                return dict(got[1])
            if got is not None:
                log.error("Failed to get prefill server info: %s, %s", got[0], got[1])
            if attempt < self.options.ensure_retries:
                await asyncio.sleep(self.options.ensure_retry_interval)
        log.error("Could not fetch prefill parallel info from %s after %d attempts", addr, self.options.ensure_retries)
        raise pd.HandshakeError("Aborted by AbortReq.", "handshake")

    def _check_prefill_info(self, addr: str, info: dict[str, Any]) -> None:
        """0.5.23 try_ensure_parallel_info's sanity checks: page size and KV cache dtype (upstream's RuntimeError,
        which kills the decode server), then patch 0002's speculative fingerprint (PrefillMismatchError, which fails
        only that prefill's requests; not cached, so the address is judged again after its back-off)."""
        problem = None
        if info.get("page_size") is not None and int(info["page_size"]) != self.cfg.page_size:
            problem = (
                f"Page size mismatch: prefill server has page_size={info['page_size']}, "
                f"but decode server has page_size={self.cfg.page_size}. "
                f"Both servers must use the same --page-size value."
            )
        elif info.get("kv_cache_dtype") is not None and info["kv_cache_dtype"] != self.kv_cache_dtype_str():
            problem = (
                f"KV cache dtype mismatch: prefill server has kv_cache_dtype={info['kv_cache_dtype']}, "
                f"but decode server has kv_cache_dtype={self.kv_cache_dtype_str()}. "
                f"Both servers must use the same --kv-cache-dtype value."
            )
        if problem is not None:
            raise pd.ConfigMismatch(problem)
        mismatch = mismatch_message(self.fingerprint, info.get("spec_fingerprint"))
        if mismatch is not None:
            if info.get("spec_fingerprint") is None:
                mismatch += (
                    " The Rust bootstrap registry (SGLANG_RUST_SERVER=1) carries no fingerprint either; do not "
                    "enable it on speculative PD servers."
                )
            raise pd.PrefillMismatch(f"Prefill server {addr} refused: {mismatch}")

    def kv_cache_dtype_str(self) -> str:
        from e2e.serving.emulator.options import dtype_name

        kv = self.cfg.kv_cache_dtype
        return dtype_name(self.cfg.dtype) if kv == "auto" else kv

    async def _wait_for_transfer(self, req: GenRequest, info: dict[str, Any]) -> dict[str, Any]:
        """KVPoll.WaitingForInput until the prefill reports Success or Failed (SGLANG_DISAGGREGATION_WAITING_TIMEOUT),
        heart-beating like the decode's heartbeat checker (HEARTBEAT_INTERVAL, HEARTBEAT_MAX_FAILURE)."""
        init_time = time.monotonic()
        failures = 0
        url = f"{info['rank_url']}{EMULATOR_PREFIX}rooms/{req.bootstrap_room}?dp_rank={info.get('dp_rank', 0)}"
        while True:
            elapsed = time.monotonic() - init_time
            remaining = self.timeouts.waiting - elapsed
            if remaining <= 0:
                log.warning(
                    "Some requests fail to receive KV Cache transfer done signal after bootstrapping. If a greater "
                    "mean TTFT is acceptable, you can 'export SGLANG_DISAGGREGATION_WAITING_TIMEOUT=600' (10 minutes) "
                    "to relax the timeout condition. "
                )
                raise pd.HandshakeError(
                    f"Request {req.bootstrap_room} timed out after {elapsed:.1f}s in KVPoll.WaitingForInput", "transfer"
                )
            wait = min(remaining, self.timeouts.heartbeat_interval)
            got = await pd.http_get_json(self.session(), f"{url}&wait={wait:.3f}", timeout=wait + 5)
            if got is None or got[0] != 200 or not isinstance(got[1], dict):
                failures += 1
                log.info("Attempting to reconnect to %s...", info["addr"])
                if failures >= self.timeouts.heartbeat_max_failure:
                    self._prefill_info.pop(info["addr"], None)
                    raise pd.HandshakeError(
                        f"Losing connection with prefill instance (bootstrap_addr: {info['addr']})", "transfer"
                    )
                await asyncio.sleep(min(self.timeouts.heartbeat_interval, max(remaining, 0)))
                continue
            failures = 0
            room = got[1]
            if room.get("status") == pd.SUCCESS:
                return room
            if room.get("status") == pd.FAILED:
                reason = DEFAULT_PREFILL_FAILURE_REASON
                if self.cfg.version == "0.5.23" and room.get("failure"):
                    reason = str(room["failure"])  # 0.5.23 sends the prefill's reason frame
                raise pd.HandshakeError(reason, "transfer")

    # --- colocated --------------------------------------------------------------------------------------------------

    async def _colocated(self, req: GenRequest, started: float) -> AsyncIterator[dict[str, Any]]:
        await asyncio.sleep(len(req.input_ids) / self.options.prefill_tokens_per_second)
        first_id, first_text = textgen.output_token(1)
        async for out in self._generate_tokens(req, started, None, {"id": first_id, "text": first_text}):
            yield out

    # --- token generation (decode and colocated) -------------------------------------------------------------------

    def _plan(self, req: GenRequest) -> tuple[int, dict[str, Any]]:
        """(number of output tokens, finish reason) for this request (0.5.2 managers/scheduler.py:1263-1270 and
        schedule_batch.py:695-716: max_new_tokens capped by the context, EOS ends it unless ignore_eos)."""
        cap = max(1, self.context_length() - len(req.input_ids) - 1)
        limit = min(req.max_new_tokens if req.max_new_tokens is not None else 1 << 30, cap)
        natural = max(1, self.options.output_tokens)
        if req.ignore_eos or limit <= natural:
            return max(limit, 0), {"type": "length", "length": limit}
        return natural, {"type": "stop", "matched": textgen.EOS_TOKEN_ID}

    def _steps(self, remaining: int) -> list[int]:
        """Tokens per scheduler step for the tokens after the first: 1 each, or speculative verify steps whose sizes
        average the accept length (within 1..num_draft_tokens)."""
        if not self.speculative:
            return [1] * remaining
        accept = float(self.options.accept_length or 1.0)
        return verify_step_sizes(accept, int(self.cfg.speculative_num_draft_tokens or math.ceil(accept)), remaining)

    async def _paced(self, req: GenRequest, count: int) -> AsyncIterator[int]:
        """Output tokens per step. The first token came with the KV cache (decode) or from the prefill pass
        (colocated): at once at its own pace; with the capacity model it leaves with the tokens of the request's first
        decode step in the running batch."""
        ticket = req.ticket
        if ticket is None or self.scheduler is None:
            yield 1
            for size in self._steps(count - 1):
                await asyncio.sleep(size / self.options.tokens_per_second)
                yield size
            return
        pending = 1
        if count == 1:
            yield 1
            return
        async for size in ticket.sizes():
            yield size + pending
            pending = 0

    async def _generate_tokens(
        self, req: GenRequest, started: float, peer: dict[str, Any] | None, first: dict[str, Any]
    ) -> AsyncIterator[dict[str, Any]]:
        count, finish = self._plan(req)
        ids: list[int] = []
        text_parts: list[str] = []
        self.counters.running += 1
        self._update_gauges()
        verify_ct = 0
        first_token_at: float | None = None
        last = time.monotonic()
        try:
            if count == 0:
                out = self._output(req, [], "", finish, 0, peer, started)
                self._finish_metrics(req, out, started, first_token_at=None)
                yield out
                return
            stop = finish["type"] == "stop"
            token_ids = [int(first.get("id") or textgen.output_token(1)[0])]
            token_texts = [str(first.get("text") or textgen.output_token(1)[1])]
            for index in range(2, count + 1):
                tid, ttext = textgen.output_token(index)
                if stop and index == count:
                    tid, ttext = textgen.EOS_TOKEN_ID, ""
                token_ids.append(tid)
                token_texts.append(ttext)
            if stop and count == 1:
                token_ids, token_texts = [textgen.EOS_TOKEN_ID], [""]
            position = 0
            async for size in self._paced(req, count):
                if position > 0 or size > 1:
                    verify_ct += 1 if self.speculative else 0
                now = time.monotonic()
                if first_token_at is None:
                    first_token_at = now
                    if req.log_metrics:
                        self.metrics.observe_time_to_first_token(now - started, req.stream)
                elif req.log_metrics:
                    self.metrics.observe_inter_token_latency((now - last) / size)
                last = now
                ids.extend(token_ids[position : position + size])
                text_parts.extend(token_texts[position : position + size])
                position += size
                self.counters.used_tokens += size
                self.counters.generated_recent.append((now, size, req.dp_rank))
                done = position >= count
                if req.stream or done:
                    out = self._output(
                        req, list(ids), "".join(text_parts), finish if done else None, verify_ct, peer, started
                    )
                    if done:
                        self._finish_metrics(req, out, started, first_token_at=first_token_at)
                        if self.speculative and verify_ct:
                            correct = (count - 1) - verify_ct
                            proposed = verify_ct * max(0, int(self.cfg.speculative_num_draft_tokens or 1) - 1)
                            self.metrics.observe_spec(
                                tokens=count - 1, steps=verify_ct, correct_drafts=correct, proposed_drafts=proposed
                            )
                    yield out
        finally:
            self.counters.running -= 1
            self.counters.used_tokens -= len(ids)
            self._update_gauges()

    # --- output -----------------------------------------------------------------------------------------------------

    def _output(
        self,
        req: GenRequest,
        ids: list[int],
        text: str,
        finish: dict[str, Any] | None,
        verify_ct: int,
        peer: dict[str, Any] | None,
        started: float,
    ) -> dict[str, Any]:
        """An output dict as the tokenizer manager builds it (0.5.2 tokenizer_manager.py:1202-1276; 0.5.23
        tokenizer_manager.py:2507-2680)."""
        meta: dict[str, Any] = {
            "id": req.rid,
            "finish_reason": finish,
            "prompt_tokens": len(req.input_ids),
            "weight_version": self.cfg.weight_version,
        }
        if self.cfg.version == "0.5.23":
            meta["num_retractions"] = 0
            meta["reasoning_tokens"] = 0
        meta["completion_tokens"] = len(ids)
        meta["cached_tokens"] = 0
        if req.return_logprob:
            meta["input_token_logprobs"] = [[None if i == 0 else -1.0, t, None] for i, t in enumerate(req.input_ids)]
            meta["output_token_logprobs"] = [[-0.5, t, None] for t in ids]
            meta["input_top_logprobs"] = [None] * len(req.input_ids)
            meta["output_top_logprobs"] = [None] * len(ids)
        if finish is not None:
            if self.cfg.version == "0.5.2":
                if self.speculative:
                    meta["spec_verify_ct"] = verify_ct
            elif self.speculative and verify_ct > 0:
                # 0.5.23 tokenizer_manager.py:3139-3172.
                proposed = verify_ct * max(0, int(self.cfg.speculative_num_draft_tokens or 1) - 1)
                correct = max(0, len(ids) - 1 - verify_ct)
                if proposed > 0:
                    meta["spec_accept_rate"] = correct / proposed
                    meta["spec_accept_length"] = len(ids) / verify_ct
                    meta["spec_num_correct_drafts"] = correct
                    meta["spec_num_proposed_drafts"] = proposed
                    meta["spec_verify_ct"] = verify_ct
            meta["e2e_latency"] = time.monotonic() - started
        meta["emulator"] = self.report(req, peer)
        return {"text": text, "output_ids": ids, "meta_info": meta}

    def abort_output(self, req: GenRequest, exc: Abort) -> dict[str, Any]:
        """The output an aborted request streams last (finish_reason abort with message and status)."""
        return self._output(req, [], "", exc.finish_reason(), 0, None, time.monotonic())

    def _finish_metrics(
        self, req: GenRequest, out: dict[str, Any], started: float, *, first_token_at: float | None
    ) -> None:
        if not req.log_metrics:
            return
        meta = out["meta_info"]
        self.metrics.observe_finished_request(
            prompt_tokens=int(meta["prompt_tokens"]),
            generation_tokens=int(meta["completion_tokens"]),
            e2e_latency=time.monotonic() - started,
            stream=req.stream,
            spec_verify_ct=int(meta.get("spec_verify_ct") or 0),
        )
