"""Data-parallel attention in PD serving: a server's DP layout, its start-up checks, its DP controller's dispatch, and
how a decode finds the prefill DP rank that holds a request's KV, per release.

With DP attention one SGLang server runs `num_dp_ranks` schedulers (attention groups of `attn_tp_size` TP ranks each)
behind one DP controller that sends every request to one of them. In PD both sides do this independently; the KV of
a request moves from the prefill DP rank that ran it to the decode DP rank that decodes it, so the decode must know
which prefill DP rank that is. 0.5.2: the prefill dispatches a PD request to `bootstrap_room % dp` and the decode
computes the same (or both take the request's `data_parallel_rank`). 0.5.23: the prefill follows the room by default
(`load_balance_method` auto -> `follow_bootstrap_room`), publishes that in its parallel info, and otherwise registers
each room's rank with its bootstrap server, where the decode queries it; a router may name both ranks
(`routed_dp_rank`, `disagg_prefill_dp_rank`). Every rule below cites its source in `DP_FACTS`, which
tests/test_emulator_honesty.py checks against the wheels. Expert parallelism, DeepEP, EPLB, two-batch overlap and the
DP LM head are parsed (the release's parser accepts them) but not modelled: they change GPU kernels, not the handshake.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Final

from e2e.serving.emulator.facts import Version
from e2e.serving.emulator.sglang_args import ServerConfig

FOLLOW_ROOM: Final = "follow_bootstrap_room"
FORCE_QUERY_ENV: Final = "SGLANG_DISAGGREGATION_FORCE_QUERY_PREFILL_DP_RANK"


@dataclass(frozen=True)
class Fact:
    """One DP rule the emulator follows: `needle` is found in the cited line or the four after it."""

    version: Version
    source: str
    """`path:line` under the wheel root (`sglang/srt/...`)."""
    needle: str
    claim: str


_S = "sglang/srt/"
DP_FACTS: Final[tuple[Fact, ...]] = (
    # --- 0.5.2 -------------------------------------------------------------------------------------------------------
    Fact("0.5.2", _S + "server_args.py:634", "if self.dp_size == 1:", "dp_size 1 turns DP attention off"),
    Fact("0.5.2", _S + "server_args.py:640", "assert self.tp_size % self.dp_size == 0", "DP attention: dp divides tp"),
    Fact("0.5.2", _S + "server_args.py:227", 'load_balance_method: str = "round_robin"', "default DP dispatch"),
    Fact(
        "0.5.2",
        _S + "server_args.py:810",
        "self.disaggregation_decode_tp is None",
        "a decode given --disaggregation-decode-tp/-dp fails start-up",
    ),
    Fact(
        "0.5.2",
        _S + "server_args.py:820",
        "if self.dp_size > 1 and not is_in_ci():",
        "a decode with dp > 1 needs --prefill-round-robin-balance (unless SGLANG_IS_IN_CI)",
    ),
    Fact(
        "0.5.2",
        _S + "server_args.py:828",
        "if self.disaggregation_decode_tp is None:",
        "a prefill's decode-tp/-dp hints default to its own tp/dp, then tp sizes must divide one another",
    ),
    Fact(
        "0.5.2",
        _S + "server_args.py:2385",
        "assert larger_tp % smaller_tp == 0",
        "validate_disagg_tp_size: the only check of the decode-tp hint",
    ),
    Fact(
        "0.5.2",
        _S + "disaggregation/prefill.py:113",
        "kv_args.decode_tp_size = self.decode_tp_size // self.decode_dp_size",
        "the hints reach the prefill's kv_args only",
    ),
    Fact(
        "0.5.2",
        _S + "disaggregation/nixl/conn.py:439",
        "decode_tp_size = self.decode_kv_args_table[req.agent_name].decode_tp_size",
        "nixl slices by the decode's own attention TP (sent by the decode, decode.py:193), not by the hint",
    ),
    Fact(
        "0.5.2",
        _S + "disaggregation/decode.py:193",
        "kv_args.decode_tp_size = attn_tp_size",
        "the decode reports its own attention TP size",
    ),
    Fact(
        "0.5.2",
        _S + "layers/dp_attention.py:157",
        "attn_tp_size = tp_size // dp_size",
        "attention TP = tp / dp; DP rank = tp_rank // attn_tp_size",
    ),
    Fact(
        "0.5.2",
        _S + "managers/data_parallel_controller.py:275",
        "if req.data_parallel_rank is not None:",
        "a request's data_parallel_rank picks the DP rank (self.workers[rank]: IndexError out of range)",
    ),
    Fact(
        "0.5.2",
        _S + "managers/data_parallel_controller.py:285",
        'if self.server_args.disaggregation_mode == "null":',
        "round_robin: a counter without PD, bootstrap_room % dp with PD",
    ),
    Fact(
        "0.5.2",
        _S + "managers/data_parallel_controller.py:292",
        "self.workers[req.bootstrap_room % len(self.workers)].send_pyobj(req)",
        "PD dispatch follows the room",
    ),
    Fact(
        "0.5.2",
        _S + "managers/data_parallel_controller.py:294",
        "def shortest_queue_scheduler(self, input_requests):",
        "shortest_queue reads an undefined `req`: NameError on the first request",
    ),
    Fact(
        "0.5.2",
        _S + "managers/data_parallel_controller.py:321",
        "target_worker = total_tokens.index(min(total_tokens))",
        "minimum_tokens: the least-loaded DP rank, whatever the room",
    ),
    Fact(
        "0.5.2",
        _S + "managers/data_parallel_controller.py:386",
        'logger.error(f"DataParallelController hit an exception: {traceback}")',
        "a dispatch exception SIGQUITs the server",
    ),
    Fact(
        "0.5.2",
        _S + "disaggregation/decode.py:253",
        "prefill_dp_rank=req.data_parallel_rank,",
        "the decode's receiver targets the request's data_parallel_rank on the prefill",
    ),
    Fact(
        "0.5.2",
        _S + "disaggregation/mooncake/conn.py:1324",
        "if prefill_dp_rank is not None:",
        "else bootstrap_room % the prefill's DP size",
    ),
    Fact(
        "0.5.2",
        _S + "disaggregation/mooncake/conn.py:1612",
        "self.dp_size = attn_dp_size if system_dp_size == 1 else system_dp_size",
        "bootstrap server: DP size from the first registration, ranks keyed by DP group",
    ),
    Fact(
        "0.5.2",
        _S + "disaggregation/mooncake/conn.py:1655",
        '"prefill_dp_size": self.dp_size,',
        "parallel info answers the DP size",
    ),
    Fact(
        "0.5.2",
        _S + "managers/scheduler_metrics_mixin.py:60",
        "if dp_rank is not None:",
        "scheduler metrics carry a dp_rank label per DP rank (not emulated)",
    ),
    # --- 0.5.23 ------------------------------------------------------------------------------------------------------
    Fact(
        "0.5.23",
        _S + "arg_groups/parallel_hook.py:52",
        "if cfg.attn_dp_size == 1:",
        "--enable-dp-attention --dp-size N is rewritten to --attn-dp-size N, dp_size 1",
    ),
    Fact(
        "0.5.23",
        _S + "arg_groups/parallel_hook.py:287",
        "if cfg.attn_dp_size > 1 and cfg.dp_size > 1:",
        "replicas and attention DP do not combine (ValueError)",
    ),
    Fact(
        "0.5.23",
        _S + "arg_groups/parallel_hook.py:326",
        "assert cfg.tp_size % cfg.attn_dp_size == 0",
        "attn_dp divides tp",
    ),
    Fact("0.5.23", _S + "runtime_context.py:207", "return cfg.dp_size * cfg.attn_dp_size", "num_dp_ranks"),
    Fact(
        "0.5.23",
        _S + "runtime_context.py:76",
        "return tp_size // attn_dp_size // attn_cp_size",
        "attention TP size",
    ),
    Fact(
        "0.5.23",
        _S + "arg_groups/serving_hook.py:222",
        'if cfg.load_balance_method == "auto":',
        "auto: follow_bootstrap_room on a prefill, round_robin elsewhere",
    ),
    Fact(
        "0.5.23",
        _S + "managers/tokenizer_manager.py:921",
        "elif obj.routed_dp_rank < 0 or obj.routed_dp_rank >= num_dp_ranks:",
        "an out-of-range routed_dp_rank is a ValueError (HTTP 400)",
    ),
    Fact(
        "0.5.23",
        _S + "managers/io_struct.py:427",
        "if self.routed_dp_rank is None:",
        "data_parallel_rank is the deprecated name of routed_dp_rank",
    ),
    Fact(
        "0.5.23",
        _S + "managers/data_parallel_controller.py:866",
        "if req.routed_dp_rank is not None:",
        "routed_dp_rank picks the DP rank",
    ),
    Fact(
        "0.5.23",
        _S + "managers/data_parallel_controller.py:909",
        "target_rank = req.bootstrap_room % len(self.workers)",
        "follow_bootstrap_room",
    ),
    Fact(
        "0.5.23",
        _S + "managers/data_parallel_controller.py:880",
        "def round_robin_scheduler(self, req: Req):",
        "round_robin: a counter",
    ),
    Fact(
        "0.5.23",
        _S + "managers/data_parallel_controller.py:142",
        "target_rank = self.total_requests.index(min(self.total_requests))",
        "total_requests / total_tokens: the least-loaded DP rank",
    ),
    Fact(
        "0.5.23",
        _S + "disaggregation/prefill.py:413",
        "req_has_disagg_prefill_dp_rank=req.disagg_prefill_dp_rank is not None,",
        "a prefill request naming disagg_prefill_dp_rank skips the room bookkeeping",
    ),
    Fact(
        "0.5.23",
        _S + "disaggregation/common/conn.py:2160",
        "if get_parallel().num_dp_ranks > 1 and not req_has_disagg_prefill_dp_rank:",
        "prefill: register the room's DP rank unless it follows the room; a room-following prefill dispatched elsewhere"
        " fails the request",
    ),
    Fact(
        "0.5.23",
        _S + "disaggregation/common/conn.py:2173",
        'f"follow_bootstrap_room conflict: dispatched to dp_rank "',
        "the conflict's failure reason",
    ),
    Fact(
        "0.5.23",
        _S + "disaggregation/common/conn.py:1601",
        '"load_balance_method": get_parallel().load_balance_method,',
        "each prefill rank registers its load-balance method",
    ),
    Fact(
        "0.5.23",
        _S + "disaggregation/common/conn.py:3150",
        'self.follow_bootstrap_room = load_balance_method == "follow_bootstrap_room"',
        "parallel info: follow_bootstrap_room",
    ),
    Fact(
        "0.5.23",
        _S + "disaggregation/decode.py:885",
        "if req.disagg_prefill_dp_rank is not None:",
        "decode: the request's disagg_prefill_dp_rank, else 0 for dp 1, else room % dp when following, else a query",
    ),
    Fact(
        "0.5.23",
        _S + "disaggregation/decode.py:1312",
        "room_to_rank = CommonKVReceiver.query_prefill_dp_ranks(",
        "decode: the pending request's rank from /query_dp_ranks",
    ),
    Fact(
        "0.5.23",
        _S + "environ.py:771",
        "SGLANG_DISAGGREGATION_FORCE_QUERY_PREFILL_DP_RANK = EnvBool(False)",
        "forces the register/query path",
    ),
    Fact(
        "0.5.23",
        _S + "observability/metrics_collector.py:1391",
        "if parallel.dp_rank is not None:",
        "scheduler metrics carry a dp_rank label per DP rank (not emulated)",
    ),
)


class StartupError(Exception):
    """What SGLang's argument checks raise at start-up (the server exits 1 before listening)."""


class DispatchError(Exception):
    """A request the DP controller cannot place: `status` 400 (0.5.23's tokenizer refuses it) or None (0.5.2: the
    controller process raises, SIGQUITs the server, which dies)."""

    def __init__(self, message: str, status: int | None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class Layout:
    """A server's DP layout as its release resolves the arguments."""

    version: Version
    mode: str
    tp_size: int
    attn_dp_size: int
    """DP-attention groups inside the TP group (1: TP attention)."""
    system_dp_size: int
    """Data-parallel replicas (plain --dp-size without DP attention)."""
    load_balance_method: str
    """Resolved (0.5.23 `auto` made concrete)."""

    @property
    def num_dp_ranks(self) -> int:
        return self.attn_dp_size * self.system_dp_size

    @property
    def attn_tp_size(self) -> int:
        return max(1, self.tp_size // self.attn_dp_size)

    @property
    def follows_room(self) -> bool:
        """Whether a PD request lands on DP rank `bootstrap_room % num_dp_ranks` (absent a routed rank)."""
        if self.version == "0.5.2":
            return self.load_balance_method == "round_robin" and self.mode != "null"
        return self.load_balance_method == FOLLOW_ROOM


def layout(cfg: ServerConfig) -> Layout:
    """The DP layout of `cfg` (see DP_FACTS for the rules of each release)."""
    method = cfg.load_balance_method
    if cfg.version == "0.5.2":
        attention = cfg.enable_dp_attention and cfg.dp_size > 1
        attn_dp, system_dp = (cfg.dp_size, 1) if attention else (1, cfg.dp_size)
        return Layout(cfg.version, cfg.disaggregation_mode, cfg.tp_size, attn_dp, system_dp, method or "round_robin")
    attn_dp, system_dp = cfg.attn_dp_size_flag, cfg.dp_size
    if cfg.enable_dp_attention and attn_dp == 1:
        attn_dp, system_dp = cfg.dp_size, 1  # the deprecated spelling
    if method in (None, "auto"):
        method = FOLLOW_ROOM if cfg.disaggregation_mode == "prefill" else "round_robin"
    return Layout(cfg.version, cfg.disaggregation_mode, cfg.tp_size, attn_dp, system_dp, method)


def startup_error(cfg: ServerConfig) -> str | None:
    """The exception SGLang's argument checks raise for this DP layout (exit 1 before listening), or None."""
    lay = layout(cfg)
    if cfg.version == "0.5.2":
        if lay.attn_dp_size > 1 and cfg.tp_size % lay.attn_dp_size != 0:
            return "AssertionError"
        if cfg.disaggregation_mode == "decode":
            if cfg.decode_tp_hint is not None:
                return "AssertionError: Cannot set --disaggregation-decode-tp for the decode engine."
            if cfg.decode_dp_hint is not None:
                return "AssertionError: Cannot set --disaggregation-decode-dp for the decode engine."
            if cfg.dp_size > 1 and not cfg.prefill_round_robin_balance and not _env_true("SGLANG_IS_IN_CI"):
                return (
                    "AssertionError: Prefill round robin balance is required when dp size > 1. Please make sure that "
                    "the prefill instance is launched with `--load-balance-method round_robin` and "
                    "`--prefill-round-robin-balance` is set for decode server."
                )
        if cfg.disaggregation_mode == "prefill":
            decode_tp = cfg.decode_tp_hint if cfg.decode_tp_hint is not None else cfg.tp_size
            larger, smaller = max(decode_tp, cfg.tp_size), min(decode_tp, cfg.tp_size)
            if smaller <= 0 or larger % smaller != 0:
                return (
                    "AssertionError: Different tp size is supported only when one tp is multiple of the other. "
                    f"decode_tp={decode_tp}, prefill_tp={cfg.tp_size}"
                )
        return None
    if cfg.attn_dp_size_flag < 1:
        return f"ValueError: --attn-dp-size must be positive (got {cfg.attn_dp_size_flag})."
    if lay.attn_dp_size > 1 and lay.system_dp_size > 1:
        return (
            f"ValueError: --dp-size {lay.system_dp_size} with --attn-dp-size {lay.attn_dp_size}: "
            "data-parallel replicas combined with attention data parallelism are not supported."
        )
    if lay.attn_dp_size > 1 and cfg.tp_size % lay.attn_dp_size != 0:
        return "AssertionError"
    return None


@dataclass
class Dispatcher:
    """A server's DP controller: places each request on a DP rank and counts what each rank was given."""

    lay: Layout
    dispatched: list[int] = field(default_factory=list)
    in_flight: list[int] = field(default_factory=list)
    _counter: int = 0

    def __post_init__(self) -> None:
        self.dispatched = [0] * self.lay.num_dp_ranks
        self.in_flight = [0] * self.lay.num_dp_ranks

    def check(self, routed: int | None) -> None:
        """0.5.23's tokenizer check of `routed_dp_rank` (a ValueError: HTTP 400)."""
        n = self.lay.num_dp_ranks
        ignored = n <= 1 and routed == 0
        if self.lay.version == "0.5.23" and routed is not None and not ignored and (routed < 0 or routed >= n):
            raise DispatchError(f"routed_dp_rank={routed} out of range [0, {n})", 400)

    def choose(self, room: int | None, routed: int | None) -> int:
        """The DP rank the controller sends this request to."""
        n = self.lay.num_dp_ranks
        if n <= 1 and (routed is None or self.lay.version == "0.5.23"):
            return 0
        if routed is not None:
            if 0 <= routed < n:
                return routed
            if self.lay.version == "0.5.2":
                raise DispatchError("IndexError: list index out of range", None)
            raise DispatchError(f"ValueError: DP rank {routed} is not active.", None)
        method = self.lay.load_balance_method
        if self.lay.version == "0.5.2" and method == "shortest_queue":
            raise DispatchError("NameError: name 'req' is not defined", None)
        if self.lay.follows_room and room is not None:
            return room % n
        if method in ("minimum_tokens", "total_requests", "total_tokens"):
            return self.in_flight.index(min(self.in_flight))
        rank = self._counter % n
        self._counter = (self._counter + 1) % n
        return rank

    def start(self, rank: int) -> None:
        self.dispatched[rank] += 1
        self.in_flight[rank] += 1

    def finish(self, rank: int) -> None:
        self.in_flight[rank] -= 1

    def report(self) -> dict[str, object]:
        """What `GET /emulator/dp` answers (emulator-only: the per-rank counts behind SGLang's dp_rank labels)."""
        return {
            "num_dp_ranks": self.lay.num_dp_ranks,
            "attn_dp_size": self.lay.attn_dp_size,
            "system_dp_size": self.lay.system_dp_size,
            "attn_tp_size": self.lay.attn_tp_size,
            "load_balance_method": self.lay.load_balance_method,
            "dispatched": list(self.dispatched),
            "in_flight": list(self.in_flight),
        }


def prefill_conflict(lay: Layout, rank: int, room: int) -> str | None:
    """0.5.23, a room-following prefill whose request was routed to another rank than the room implies: the sender's
    failure reason (the request fails its bootstrap); None when there is no conflict."""
    if lay.version != "0.5.23" or lay.num_dp_ranks <= 1 or not lay.follows_room or _env_true(FORCE_QUERY_ENV):
        return None
    implied = room % lay.num_dp_ranks
    if rank == implied:
        return None
    return (
        f"follow_bootstrap_room conflict: dispatched to dp_rank {rank} but bootstrap_room {room} implies dp_rank "
        f"{implied}. Set {FORCE_QUERY_ENV}=1 to allow mixed routing."
    )


def prefill_registers_room(lay: Layout) -> bool:
    """0.5.23: whether the prefill registers each room's DP rank with its bootstrap server (/register_dp_rank)."""
    if lay.version != "0.5.23" or lay.num_dp_ranks <= 1:
        return False
    return not lay.follows_room or _env_true(FORCE_QUERY_ENV)


def decode_static_rank(
    version: Version, room: int, prefill_dp_size: int, follow_room: bool, named: int | None
) -> int | None:
    """The prefill DP rank a decode targets without asking (None: 0.5.23 must query the bootstrap server).
    `named`: 0.5.2 the request's data_parallel_rank, 0.5.23 its disagg_prefill_dp_rank."""
    if named is not None:
        return named
    if version == "0.5.2":
        return room % max(1, prefill_dp_size)
    if prefill_dp_size == 1:
        return 0
    if follow_room and not _env_true(FORCE_QUERY_ENV):
        return room % prefill_dp_size
    return None


def target_tp_ranks(decode_attn_tp: int, prefill_attn_tp: int, engine_rank: int = 0) -> list[int]:
    """The prefill attention-TP ranks decode TP rank `engine_rank` fetches (0.5.2 mooncake/conn.py:1268-1322, 0.5.23
    common/conn.py _resolve_rank_mapping): one rank when the decode's attention TP is at least the prefill's, else
    `prefill / decode` consecutive ranks."""
    local = engine_rank % max(1, decode_attn_tp)
    if decode_attn_tp >= prefill_attn_tp:
        return [local // max(1, decode_attn_tp // max(1, prefill_attn_tp))]
    per = prefill_attn_tp // max(1, decode_attn_tp)
    return list(range(local * per, (local + 1) * per))


def request_ranks(version: Version, body: dict[str, object]) -> tuple[int | None, int | None]:
    """(routed rank, named prefill rank) a request body carries: 0.5.2 `data_parallel_rank` (io_struct.py:127), used
    for both (decode.py:253); 0.5.23 `routed_dp_rank` or its deprecated alias `data_parallel_rank`, and
    `disagg_prefill_dp_rank` (io_struct.py:298-305, :423-428). A non-integer value is ignored here."""

    def number(key: str) -> int | None:
        value = body.get(key)
        if isinstance(value, list) and len(value) == 1:
            value = value[0]
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    if version == "0.5.2":
        return number("data_parallel_rank"), None
    routed = number("routed_dp_rank")
    return (routed if routed is not None else number("data_parallel_rank")), number("disagg_prefill_dp_rank")
