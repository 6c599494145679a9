"""Prefill/decode disaggregation: the prefill's bootstrap server, the per-room state, and the decode's handshake.

Real SGLang (mooncake backend, the default) does this in three places:

- The prefill's bootstrap server (an aiohttp app on --disaggregation-bootstrap-port, started by the tokenizer manager
  before the model loads): every prefill rank registers with `PUT /route` once its KV manager exists; a decode asks
  `GET /route` for the prefill's parallel info (all query values -1) and then for the rank it pairs with.
  0.5.2: sglang/srt/disaggregation/mooncake/conn.py:1554-1670. 0.5.23: disaggregation/common/conn.py:3015-3290
  (+ the project's patch 0002: the fingerprint in PUT and in the parallel-info answer).
- The decode's receiver: fetch the parallel info, check it (0.5.23: page size, KV dtype, and with patch 0002 the
  speculative fingerprint: a mismatch raises RuntimeError), fetch the rank's address, send its KV indices to that
  rank over ZMQ, then wait for the transfer (SGLANG_DISAGGREGATION_WAITING_TIMEOUT), heart-beating the bootstrap
  server's /health.
- The prefill's sender: from the request's arrival it waits for the decode's indices
  (SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT), runs the prefill, transfers the KV cache and reports success or failure.

The emulator keeps the two real bootstrap routes byte-compatible and carries the per-room part that SGLang sends
over ZMQ as emulator-only HTTP routes on the same server (`/emulator/rooms/...`): the decode posts its identity for
a room (its "KV indices") and long-polls the room's state; the prefill, in the same process as its bootstrap server,
updates the room directly. The rank address the decode gets from `GET /route` is the bootstrap server itself, standing
for every rank's socket: the room routes take the prefill DP rank the decode targets (`?dp_rank=`, default 0), and a
room exists per (DP rank, room), so a decode that targets another DP rank than the one the prefill's DP controller
chose never meets the request, as on GPUs (`dp.py`). Every room answer also names the prefill's serving revision, for
the cross-revision oracle (`revision.py`, not SGLang).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any, Final

import aiohttp
from aiohttp import web

from e2e.serving.emulator import revision
from e2e.serving.emulator.facts import EMULATOR_PREFIX, Version

log = logging.getLogger("emulator.pd")

MAX_ROOMS: Final = 20000

# Room states, named after KVPoll (sglang/srt/disaggregation/base/conn.py).
BOOTSTRAPPING: Final = "Bootstrapping"
WAITING_FOR_INPUT: Final = "WaitingForInput"
TRANSFERRING: Final = "Transferring"
SUCCESS: Final = "Success"
FAILED: Final = "Failed"


def env_int(name: str, default: int) -> int:
    """`get_int_env_var` (0.5.2 utils) / `EnvInt` (0.5.23 environ.py): an integer from the environment."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        return int(raw)
    except ValueError:
        log.warning("%s=%r is not an integer; using %d", name, raw, default)
        return default


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        return float(raw)
    except ValueError:
        log.warning("%s=%r is not a number; using %s", name, raw, default)
        return default


@dataclass(frozen=True)
class Timeouts:
    """The PD timeouts, read from the environment like SGLang does (same names and defaults in both releases:
    0.5.2 mooncake/conn.py:236-268, 0.5.23 environ.py:759-763)."""

    bootstrap: float
    """SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT (300): prefill waits this long for the decode's indices."""
    waiting: float
    """SGLANG_DISAGGREGATION_WAITING_TIMEOUT (300): decode waits this long for the transfer after sending them."""
    heartbeat_interval: float
    """SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL (5.0, at least 2.0)."""
    heartbeat_max_failure: int
    """SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE (2, at least 1)."""
    zmq_send: float = 1.0
    """SGLANG_DISAGGREGATION_ZMQ_SEND_TIMEOUT (1 s, 0.5.23 environ.py:760, the side channel's ZMQ_SNDTIMEO at
    common/conn.py:2746-2750): how long the decode's metadata send may wait for a peer to take it. 0.5.2 sets none."""

    @classmethod
    def from_env(cls) -> Timeouts:
        return cls(
            bootstrap=env_int("SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", 300),
            waiting=env_int("SGLANG_DISAGGREGATION_WAITING_TIMEOUT", 300),
            heartbeat_interval=max(env_float("SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL", 5.0), 2.0),
            heartbeat_max_failure=max(env_int("SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE", 2), 1),
            zmq_send=env_int("SGLANG_DISAGGREGATION_ZMQ_SEND_TIMEOUT", 1),
        )

    def scaled(self, time_scale: float) -> Timeouts:
        """The timeouts in the capacity model's scaled time: the bootstrap and waiting timeouts bound how long a
        request waits for GPU work (its peer's queue, prefill, the KV transfer), which runs `time_scale` times slower
        here, so they stretch with it (unscaled, at time scale 8 a decode gave up on a transfer after 37.5 emulated s,
        where SGLang waits 300 s). The heartbeat and the ZMQ send timeout bound a connection, not GPU work: they stay
        wall-clock."""
        return replace(self, bootstrap=self.bootstrap * time_scale, waiting=self.waiting * time_scale)


@dataclass
class Room:
    """One bootstrap room: a request split over a prefill and a decode."""

    room: int
    dp_rank: int = 0
    """The prefill DP rank whose KV sender holds this room."""
    status: str = BOOTSTRAPPING
    prefill: dict[str, Any] | None = None
    decode: dict[str, Any] | None = None
    failure: str | None = None
    first_token: dict[str, Any] | None = None
    updated: float = field(default_factory=time.monotonic)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def touch(self) -> None:
        self.updated = time.monotonic()
        self.changed.set()
        self.changed = asyncio.Event()

    def public(self) -> dict[str, Any]:
        return {
            "room": self.room,
            "dp_rank": self.dp_rank,
            "status": self.status,
            "prefill": self.prefill,
            "decode": self.decode,
            "failure": self.failure,
            "first_token": self.first_token,
        }


class RoomTable:
    """The rooms a prefill's bootstrap server knows, per (DP rank, room) (bounded: the oldest are forgotten first)."""

    def __init__(self) -> None:
        self._rooms: OrderedDict[tuple[int, int], Room] = OrderedDict()

    def get(self, room: int, dp_rank: int = 0) -> Room:
        found = self._rooms.get((dp_rank, room))
        if found is None:
            found = Room(room, dp_rank)
            self._rooms[(dp_rank, room)] = found
            while len(self._rooms) > MAX_ROOMS:
                self._rooms.popitem(last=False)
        return found

    def peek(self, room: int, dp_rank: int = 0) -> Room | None:
        return self._rooms.get((dp_rank, room))

    def fail(self, room: int, reason: str, dp_rank: int = 0) -> None:
        entry = self.get(room, dp_rank)
        if entry.status not in (SUCCESS, FAILED):
            entry.status = FAILED
            entry.failure = reason
            entry.touch()

    def __len__(self) -> int:
        return len(self._rooms)


@dataclass
class PrefillRegistration:
    """What the prefill ranks registered with PUT /route (the fields both releases keep)."""

    attn_tp_size: int | None = None
    attn_cp_size: int | None = None
    dp_size: int | None = None
    pp_size: int | None = None
    page_size: int | None = None
    kv_cache_dtype: str | None = None
    prefill_http_port: int | None = None
    decode_allocation_policy: str = "early"
    follow_bootstrap_room: bool | None = None
    spec_fingerprint: dict[str, Any] | None = None
    aux_item_lens: list[int] | None = None
    registered: int = 0
    ports: dict[tuple[int, int, int, int], dict[str, Any]] = field(default_factory=dict)
    """(dp group, cp rank, tp rank, pp rank) -> {"rank_ip", "rank_port"}."""


class BootstrapServer:
    """The prefill's bootstrap server for one release, plus the emulator's room routes."""

    def __init__(self, version: Version, host: str, port: int, revision: str | None = None) -> None:
        self.version = version
        self.host = host
        self.port = port
        self.revision = revision
        """The prefill's serving revision (test oracle, `e2e.serving.emulator.revision`); in every room answer."""
        self.rooms = RoomTable()
        self.registration = PrefillRegistration()
        self.room_to_dp_rank: dict[int, dict[str, float | int]] = {}
        self._runner: web.AppRunner | None = None
        self.app = web.Application()
        # 0.5.2 mooncake/conn.py:1576-1578; 0.5.23 common/conn.py:3069-3073.
        self.app.router.add_route("*", "/route", self._handle_route)
        self.app.router.add_get("/health", self._handle_health)
        if version == "0.5.23":
            self.app.router.add_post("/register_dp_rank", self._handle_register_dp_rank)
            self.app.router.add_post("/query_dp_ranks", self._handle_query_dp_ranks)
        self.app.router.add_post(EMULATOR_PREFIX + "rooms/{room}/decode", self._handle_room_decode)
        self.app.router.add_get(EMULATOR_PREFIX + "rooms/{room}", self._handle_room_get)

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host=self.host, port=self.port, reuse_address=True)
        await site.start()
        log.info("bootstrap server (emulated, SGLang %s) listening on %s:%d", self.version, self.host, self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # --- real routes --------------------------------------------------------------------------------------------

    async def _handle_health(self, request: web.Request) -> web.Response:
        # 0.5.2 mooncake/conn.py:1580-1581; 0.5.23 common/conn.py:3075-3076.
        return web.Response(text="OK", status=200)

    async def _handle_route(self, request: web.Request) -> web.StreamResponse:
        # 0.5.2 mooncake/conn.py:1583-1592; 0.5.23 common/conn.py:3078-3087.
        if request.method == "PUT":
            return await self._handle_route_put(request)
        if request.method == "GET":
            return self._handle_route_get(request)
        return web.Response(text="Method not allowed", status=405, content_type="application/json")

    async def _handle_route_put(self, request: web.Request) -> web.Response:
        # 0.5.2 mooncake/conn.py:1594-1638; 0.5.23 common/conn.py:3089-3186 (+ patch 0002 at :3168-3179).
        data = await request.json()
        reg = self.registration
        if self.version == "0.5.23":
            fingerprint = data.get("spec_fingerprint")
            if reg.registered and reg.spec_fingerprint != fingerprint:
                return web.Response(text="Speculative fingerprint differs across prefill ranks", status=400)
            reg.spec_fingerprint = fingerprint
            if reg.aux_item_lens is None and data.get("aux_item_lens") is not None:
                reg.aux_item_lens = [int(x) for x in data["aux_item_lens"]]
            if reg.page_size is None and data.get("page_size") is not None:
                reg.page_size = int(data["page_size"])
            if reg.kv_cache_dtype is None and data.get("kv_cache_dtype") is not None:
                reg.kv_cache_dtype = str(data["kv_cache_dtype"])
            if reg.prefill_http_port is None and data.get("prefill_http_port") is not None:
                reg.prefill_http_port = int(data["prefill_http_port"])
            reg.decode_allocation_policy = data.get("decode_allocation_policy", "early")
            if reg.follow_bootstrap_room is None:
                method = data.get("load_balance_method", "follow_bootstrap_room")
                reg.follow_bootstrap_room = method == "follow_bootstrap_room"
            if reg.attn_cp_size is None:
                reg.attn_cp_size = int(data["attn_cp_size"])
        if reg.attn_tp_size is None:
            reg.attn_tp_size = int(data["attn_tp_size"])
        if reg.dp_size is None:
            reg.dp_size = int(data["attn_dp_size"] if data["system_dp_size"] == 1 else data["system_dp_size"])
        if reg.pp_size is None:
            reg.pp_size = int(data["pp_size"])
        dp_group = data["attn_dp_rank"] if data["system_dp_size"] == 1 else data["system_dp_rank"]
        cp_rank = int(data.get("attn_cp_rank", 0))
        key = (int(dp_group), cp_rank, int(data["attn_tp_rank"]), int(data["pp_rank"]))
        reg.ports[key] = {"rank_ip": data["rank_ip"], "rank_port": int(data["rank_port"])}
        reg.registered += 1
        return web.Response(text="OK", status=200)

    def _ready(self) -> bool:
        reg = self.registration
        if None in (reg.attn_tp_size, reg.attn_cp_size, reg.pp_size, reg.dp_size):
            return False
        expected = (
            int(reg.dp_size or 0) * int(reg.attn_cp_size or 0) * int(reg.attn_tp_size or 0) * int(reg.pp_size or 0)
        )
        return reg.registered >= expected

    def _handle_route_get(self, request: web.Request) -> web.Response:
        if self.version == "0.5.2":
            return self._route_get_0_5_2(request)
        return self._route_get_0_5_23(request)

    def _route_get_0_5_2(self, request: web.Request) -> web.Response:
        # 0.5.2 mooncake/conn.py:1640-1669.
        q = request.query
        engine_rank, dp_group, pp_rank = q.get("engine_rank"), q.get("target_dp_group"), q.get("target_pp_rank")
        if not engine_rank or not dp_group or not pp_rank:
            return web.Response(text="Missing inputs for bootstrap server.", status=400)
        reg = self.registration
        if int(engine_rank) == -1 and int(dp_group) == -1 and int(pp_rank) == -1:
            return web.json_response(
                {
                    "prefill_attn_tp_size": reg.attn_tp_size,
                    "prefill_dp_size": reg.dp_size,
                    "prefill_pp_size": reg.pp_size,
                }
            )
        info = reg.ports.get((int(dp_group), 0, int(engine_rank), int(pp_rank)))
        if info is None:
            # SGLang indexes its table without a guard: a missing entry is a KeyError, an aiohttp 500.
            return web.Response(text="500 Internal Server Error\n\nServer got itself in trouble", status=500)
        return web.json_response(info)

    def _route_get_0_5_23(self, request: web.Request) -> web.Response:
        # 0.5.23 common/conn.py:3188-3259 (+ patch 0002 at :3266-3279).
        q = request.query
        dp_rank, cp_rank = q.get("prefill_dp_rank"), q.get("prefill_cp_rank")
        tp_rank, pp_rank = q.get("target_tp_rank"), q.get("target_pp_rank")
        if not dp_rank or not cp_rank or not tp_rank or not pp_rank:
            return web.Response(text="Missing inputs for bootstrap server.", status=400)
        reg = self.registration
        if not self._ready():
            return web.Response(
                text=f"Prefill server not fully registered yet ({reg.registered} workers registered).", status=503
            )
        if int(dp_rank) == -1 and int(cp_rank) == -1 and int(tp_rank) == -1 and int(pp_rank) == -1:
            payload: dict[str, Any] = {
                "attn_tp_size": reg.attn_tp_size,
                "attn_cp_size": reg.attn_cp_size,
                "dp_size": reg.dp_size,
                "pp_size": reg.pp_size,
                "page_size": reg.page_size,
                "kv_cache_dtype": reg.kv_cache_dtype,
                "follow_bootstrap_room": reg.follow_bootstrap_room if reg.follow_bootstrap_room is not None else True,
                "enable_dsa_cache_layer_split": False,
                "decode_allocation_policy": reg.decode_allocation_policy,
                "enable_kv_cache_sharding": False,
                "prefill_http_port": reg.prefill_http_port,
                "target_tp_rank": None,
                "target_tp_ranks": None,
                "target_cp_ranks": None,
                "target_pp_ranks": None,
                "required_dst_info_num": None,
                "required_prefill_response_num": None,
            }
            if reg.spec_fingerprint is not None:
                payload["spec_fingerprint"] = reg.spec_fingerprint
            if reg.aux_item_lens is not None:
                payload["aux_item_lens"] = reg.aux_item_lens
            return web.json_response(payload)
        info = reg.ports.get((int(dp_rank), int(cp_rank), int(tp_rank), int(pp_rank)))
        if info is None:
            return web.Response(
                text=f"Bootstrap info not found for dp_rank={dp_rank} cp_rank={cp_rank} "
                f"tp_rank={tp_rank} pp_rank={pp_rank}",
                status=404,
            )
        return web.json_response(info)

    async def _handle_register_dp_rank(self, request: web.Request) -> web.Response:
        # 0.5.23 common/conn.py:3261-3271.
        data = await request.json()
        self.room_to_dp_rank[int(data["bootstrap_room"])] = {"dp_rank": int(data["dp_rank"]), "timestamp": time.time()}
        return web.Response(text="OK", status=200)

    async def _handle_query_dp_ranks(self, request: web.Request) -> web.Response:
        # 0.5.23 common/conn.py:3273-3282.
        data = await request.json()
        result = {
            str(int(room)): self.room_to_dp_rank[int(room)]["dp_rank"]
            for room in data["bootstrap_rooms"]
            if int(room) in self.room_to_dp_rank
        }
        return web.json_response(result)

    # --- emulator-only room routes (SGLang: ZMQ messages between the ranks) ----------------------------------------

    def _room_answer(self, room: Room) -> web.Response:
        # The revision rides on the emulator-only room exchange, not on /route: /route answers stay SGLang's, and
        # they are cached per address, which a pod of another revision may reuse.
        return web.json_response({**room.public(), "prefill_revision": self.revision})

    async def _handle_room_decode(self, request: web.Request) -> web.Response:
        """The decode's KV indices for a room (SGLang: the decode's ZMQ message to the prefill rank). A decode of
        another revision fails the room (test oracle), so this prefill's half ends at once instead of transferring."""
        room = self.rooms.get(int(request.match_info["room"]), _dp_rank(request))
        decode = await request.json()
        room.decode = decode
        decode_revision = decode.get("revision") if isinstance(decode, dict) else None
        if revision.conflict(decode_revision, self.revision):
            reason = revision.message(
                prefill=f"{self.host}:{self.port}",
                prefill_revision=self.revision,
                decode=str(decode.get("pod")),
                decode_revision=decode_revision,
                room=room.room,
            )
            log.error(reason)
            self.rooms.fail(room.room, reason, room.dp_rank)
            return self._room_answer(room)
        if room.status == BOOTSTRAPPING and room.prefill is not None:
            room.status = WAITING_FOR_INPUT
        room.touch()
        return self._room_answer(room)

    async def _handle_room_get(self, request: web.Request) -> web.Response:
        """The room's state; `?wait=S` long-polls until it is Success or Failed, or S seconds passed."""
        room = self.rooms.get(int(request.match_info["room"]), _dp_rank(request))
        wait = min(float(request.query.get("wait", "0") or 0), 30.0)
        deadline = time.monotonic() + wait
        while room.status not in (SUCCESS, FAILED):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(room.changed.wait(), remaining)
        return self._room_answer(room)


def _dp_rank(request: web.Request) -> int:
    """The prefill DP rank an emulator-only room request addresses (SGLang: the socket of that rank)."""
    try:
        return int(request.query.get("dp_rank", "0") or 0)
    except ValueError:
        return 0


# --- the decode's side --------------------------------------------------------------------------------------------


class HandshakeError(Exception):
    """A failed PD handshake; `reason` is the KVTransferError's failure reason, `stage` which queue failed it."""

    def __init__(self, reason: str, stage: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.stage = stage  # "handshake" (DecodePreallocQueue) or "transfer" (DecodeTransferQueue)


class ConfigMismatch(Exception):
    """RuntimeError raised by 0.5.23's try_ensure_parallel_info (page size, KV dtype): kills the decode server."""


class CrossRevision(Exception):
    """The prefill of a room belongs to another serving revision than this decode (test oracle, not SGLang): the
    request fails with HTTP 500 and this message; the decode keeps serving."""


class PrefillMismatch(ConfigMismatch):
    """Patch 0002's PrefillMismatchError (speculative fingerprint or metadata layout): the decode queue fails the
    requests bound to that prefill and refuses it for a back-off; the server keeps serving."""


async def http_get_json(session: aiohttp.ClientSession, url: str, timeout: float | None) -> tuple[int, Any] | None:
    """(status, JSON or text) of a GET, or None when the connection failed."""
    client_timeout = aiohttp.ClientTimeout(total=timeout)
    try:
        async with session.get(url, timeout=client_timeout) as response:
            body = await response.text()
            if response.status == 200:
                try:
                    return response.status, await response.json(content_type=None)
                except ValueError:
                    return response.status, body
            return response.status, body
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        log.error("Error fetching prefill info from bootstrap: %s", exc)
        return None
