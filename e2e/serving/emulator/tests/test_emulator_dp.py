"""DP attention in the PD handshake (e2e/serving/emulator/dp.py), per release: a prefill and a decode with several DP
ranks pair and spread their requests over every rank, layouts of different DP and TP sizes pair where SGLang pairs
them, a wrong layout fails the way SGLang fails, and both real routers serve DP servers with nothing added to their
command line (see /tmp/notes/B-router.md and docs/serving-emulator.md, "DP attention").

Requests are sent to both halves at once with the same bootstrap room, as a PD router does; every room is chosen, so
which DP rank serves it is known in advance (`room % dp` on a room-following prefill).
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from disaggspec.sglang.profiles import PROFILES
from e2e.serving.emulator.tests.harness import Stack, request, sglang_args, wait_for
from e2e.serving.routers import ensure_router_venv

VERSIONS = ("0.5.2", "0.5.23")
FAST_ENV = {"SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT": "2", "SGLANG_DISAGGREGATION_WAITING_TIMEOUT": "2"}
FAST = ("ensure-retries=3", "ensure-retry-interval=0.2", "tokens-per-second=400")


def dp_args(version: str, role: str, tp: int, dp: int, *extra: str) -> list[str]:
    """A pool pod's arguments with `dp` DP-attention ranks over `tp` GPUs, spelled as each release takes them (what
    the operator renders: 0.5.2 `--enable-dp-attention --dp-size`, plus `--prefill-round-robin-balance` on a DP
    decode; 0.5.23 `--attn-dp-size`)."""
    layout = ["--tp-size", str(tp)]
    if dp > 1:
        if version == "0.5.2":
            layout += ["--enable-dp-attention", "--dp-size", str(dp)]
            if role == "decode":
                layout.append("--prefill-round-robin-balance")
        else:
            layout += ["--attn-dp-size", str(dp)]
    return sglang_args(role, extra=[*layout, *extra])


def start(stack: Stack, version: str, role: str, host: int, args: list[str], *emulate: str) -> None:
    proc = stack.emulator(version, role, host, args=args, emulate=(*FAST, *emulate), env=FAST_ENV)
    wait_for(f"http://{stack.ip(host)}:30000/health", proc=proc, timeout=30)


def pd_request(
    stack: Stack, prefill: int, decode: int, room: int, **fields: Any
) -> tuple[tuple[int, Any], tuple[int, Any]]:
    """One /generate sent to both halves at once: ((decode status, JSON or text), (prefill's)). `fields` go to both
    bodies (a router's DP-rank fields, for instance)."""
    body = {
        "text": "hello there",
        "sampling_params": {"max_new_tokens": 4},
        "bootstrap_host": stack.ip(prefill),
        "bootstrap_port": 8998,
        "bootstrap_room": room,
        **fields,
    }

    def parse(raw: bytes) -> Any:
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode(errors="replace")

    with ThreadPoolExecutor(max_workers=2) as pool:
        to_prefill = pool.submit(request, "POST", f"http://{stack.ip(prefill)}:30000/generate", body, timeout=30)
        status, raw, _ = request("POST", f"http://{stack.ip(decode)}:30000/generate", body, timeout=30)
        prefill_status, prefill_raw, _ = to_prefill.result()
    return (status, parse(raw)), (prefill_status, parse(prefill_raw))


def dp_report(stack: Stack, host: int) -> dict[str, Any]:
    status, raw, _ = request("GET", f"http://{stack.ip(host)}:30000/emulator/dp")
    assert status == 200, raw
    result: dict[str, Any] = json.loads(raw)
    return result


def parallel_info(stack: Stack, version: str, host: int) -> dict[str, Any]:
    query = (
        "engine_rank=-1&target_dp_group=-1&target_pp_rank=-1"
        if version == "0.5.2"
        else "prefill_dp_rank=-1&prefill_cp_rank=-1&target_tp_rank=-1&target_pp_rank=-1"
    )
    status, raw, _ = request("GET", f"http://{stack.ip(host)}:8998/route?{query}")
    assert status == 200, raw
    info: dict[str, Any] = json.loads(raw)
    return info


def served(result: tuple[tuple[int, Any], tuple[int, Any]]) -> dict[str, Any]:
    """The decode's pairing report of a request both halves served."""
    (status, payload), (prefill_status, prefill_payload) = result
    assert status == 200 and prefill_status == 200, (payload, prefill_payload)
    report: dict[str, Any] = payload["meta_info"]["emulator"]
    return report


@pytest.mark.parametrize("version", VERSIONS)
def test_same_dp_size_pairs_and_spreads_over_every_dp_rank(stack: Stack, version: str) -> None:
    start(stack, version, "prefill", 1, dp_args(version, "prefill", 4, 4))
    start(stack, version, "decode", 2, dp_args(version, "decode", 4, 4))
    info = parallel_info(stack, version, 1)
    if version == "0.5.2":
        assert info == {"prefill_attn_tp_size": 1, "prefill_dp_size": 4, "prefill_pp_size": 1}
    else:
        assert (info["attn_tp_size"], info["dp_size"], info["follow_bootstrap_room"]) == (1, 4, True)
    info_path = "/get_server_info" if version == "0.5.2" else "/server_info"
    args = json.loads(request("GET", f"http://{stack.ip(1)}:30000{info_path}")[1])
    if version == "0.5.2":  # the prefill's decode hints default to its own sizes (server_args.py:828-831)
        assert (args["enable_dp_attention"], args["dp_size"], args["disaggregation_decode_dp"]) == (True, 4, 4)
    else:  # attention DP is not dp_size any more (arg_groups/parallel_hook.py:39-62)
        assert (args["attn_dp_size"], args["dp_size"], args["load_balance_method"]) == (4, 1, "follow_bootstrap_room")
    for room in range(16):
        report = served(pd_request(stack, 1, 2, room))
        # The prefill's DP controller followed the room, and the decode found the KV on that rank.
        assert report["prefill_dp_rank"] == room % 4, report
    prefill, decode = dp_report(stack, 1), dp_report(stack, 2)
    assert prefill["dispatched"] == [4, 4, 4, 4] and prefill["attn_tp_size"] == 1
    # The decode's own controller: 0.5.2 follows the room too (round_robin in PD), 0.5.23 round-robins.
    assert decode["dispatched"] == [4, 4, 4, 4]
    assert decode["load_balance_method"] == "round_robin"
    assert prefill["load_balance_method"] == ("round_robin" if version == "0.5.2" else "follow_bootstrap_room")


@pytest.mark.parametrize("version", VERSIONS)
def test_different_dp_and_tp_layouts_pair(stack: Stack, version: str) -> None:
    """Prefill DP 4 with decode DP 8, TP-only prefill with a DP decode, and a DP prefill with a TP-only decode: SGLang
    pairs them all (the decode reads the prefill's DP size and attention TP size from the bootstrap server)."""
    start(stack, version, "prefill", 1, dp_args(version, "prefill", 4, 4))  # attention TP 1
    start(stack, version, "prefill", 2, dp_args(version, "prefill", 2, 1))  # attention TP 2, one DP rank
    start(stack, version, "decode", 3, dp_args(version, "decode", 8, 8))
    start(stack, version, "decode", 4, dp_args(version, "decode", 1, 1))
    rooms = iter(range(1000, 2000))
    for prefill, prefill_dp in ((1, 4), (2, 1)):
        for decode in (3, 4):
            for _ in range(8):
                room = next(rooms)
                report = served(pd_request(stack, prefill, decode, room))
                assert report["prefill_dp_rank"] == room % prefill_dp, report
                assert report["prefill_ip"] == stack.ip(prefill) and report["decode_ip"] == stack.ip(decode)
    assert dp_report(stack, 1)["dispatched"] == [4, 4, 4, 4]
    assert sum(dp_report(stack, 3)["dispatched"]) == 16 and dp_report(stack, 3)["num_dp_ranks"] == 8


def test_0_5_23_registered_rooms_pair(stack: Stack) -> None:
    """A 0.5.23 prefill with `--load-balance-method round_robin` does not follow the room: it says so in its
    parallel info, registers each room's DP rank (/register_dp_rank) and the decode asks /query_dp_ranks."""
    version = "0.5.23"
    start(stack, version, "prefill", 1, dp_args(version, "prefill", 4, 4, "--load-balance-method", "round_robin"))
    start(stack, version, "decode", 2, dp_args(version, "decode", 2, 2))
    assert parallel_info(stack, version, 1)["follow_bootstrap_room"] is False
    ranks = []
    for room in (7, 7 + 4, 7 + 8, 7 + 12):  # one room residue: only round robin spreads them
        ranks.append(served(pd_request(stack, 1, 2, room))["prefill_dp_rank"])
    assert sorted(ranks) == [0, 1, 2, 3]
    status, raw, _ = request("POST", f"http://{stack.ip(1)}:8998/query_dp_ranks", {"bootstrap_rooms": [7, 11, 99]})
    assert status == 200 and set(json.loads(raw)) == {"7", "11"}


def _exits(stack: Stack, version: str, role: str, host: int, args: list[str]) -> str:
    """Start a server that SGLang refuses; return its log once it exited 1 (it never listens)."""
    proc = stack.emulator(version, role, host, args=args, env=FAST_ENV)
    assert proc.popen.wait(timeout=30) == 1, proc.output()
    assert request("GET", f"http://{stack.ip(host)}:30000/health", timeout=2)[0] == 0
    return proc.output()


def test_0_5_2_layout_mistakes_fail_at_start_up(stack: Stack) -> None:
    """0.5.2's argument checks (server_args.py:640, :809-834, :2382-2388): each exits 1 before listening."""
    v = "0.5.2"
    out = _exits(stack, v, "prefill", 1, dp_args(v, "prefill", 8, 1, "--disaggregation-decode-tp", "3"))
    assert "Different tp size is supported only when one tp is multiple of the other. decode_tp=3, prefill_tp=8" in out
    no_promise = sglang_args("decode", extra=["--tp-size", "4", "--enable-dp-attention", "--dp-size", "4"])
    assert "Prefill round robin balance is required when dp size > 1." in _exits(stack, v, "decode", 2, no_promise)
    hint_on_decode = dp_args(v, "decode", 4, 4, "--disaggregation-decode-dp", "4")
    assert "Cannot set --disaggregation-decode-dp for the decode engine." in _exits(
        stack, v, "decode", 3, hint_on_decode
    )
    assert "AssertionError" in _exits(stack, v, "prefill", 4, dp_args(v, "prefill", 6, 4))  # tp % dp != 0


def test_0_5_2_wrong_decode_dp_hint_is_ignored_as_sglang_ignores_it(stack: Stack) -> None:
    """A prefill told `--disaggregation-decode-dp 4` (and a wrong, divisible `--disaggregation-decode-tp`) while the
    decode runs TP 8 / DP 8: SGLang 0.5.2 passes the hint only into the prefill's kv_args (prefill.py:113), which
    neither mooncake nor nixl reads on the prefill (nixl slices by the attention TP the decode itself sends), so the
    pair serves. The emulator does the same: the only visible failure of a hint is the start-up check above."""
    v = "0.5.2"
    wrong = ("--disaggregation-decode-tp", "4", "--disaggregation-decode-dp", "4")
    start(stack, v, "prefill", 1, dp_args(v, "prefill", 4, 4, *wrong))
    start(stack, v, "decode", 2, dp_args(v, "decode", 8, 8))
    for room in range(8):
        assert served(pd_request(stack, 1, 2, room))["prefill_dp_rank"] == room % 4


def test_0_5_2_prefill_not_following_the_room_times_out_requests(stack: Stack) -> None:
    """A 0.5.2 prefill whose DP controller does not follow the room (`--load-balance-method minimum_tokens`): the
    decode still looks for the KV on rank room % dp (mooncake/conn.py:1324-1328), where the request never runs. Both
    halves time out (the prefill in KVPoll.Bootstrapping, the decode in KVPoll.WaitingForInput), as on GPUs; a room
    that happens to land on the least-loaded rank (0, the requests being sequential) serves."""
    v = "0.5.2"
    start(stack, v, "prefill", 1, dp_args(v, "prefill", 4, 4, "--load-balance-method", "minimum_tokens"))
    start(stack, v, "decode", 2, dp_args(v, "decode", 4, 4))
    assert served(pd_request(stack, 1, 2, 8))["prefill_dp_rank"] == 0
    tic = time.monotonic()
    (status, payload), (prefill_status, prefill_payload) = pd_request(stack, 1, 2, 9)
    assert status == 500 and "in KVPoll.WaitingForInput" in payload["message"], payload
    assert prefill_status == 500 and "in KVPoll.Bootstrapping" in prefill_payload["message"], prefill_payload
    assert time.monotonic() - tic >= 2  # SGLANG_DISAGGREGATION_*_TIMEOUT=2


def test_0_5_23_layout_mistakes(stack: Stack) -> None:
    """0.5.23 has no decode-layout hints (argparse exit 2), refuses replicas combined with attention DP, answers 400
    for an out-of-range routed rank, and fails a request routed against a room-following prefill's room."""
    v = "0.5.23"
    hint = stack.emulator(v, "prefill", 1, args=dp_args(v, "prefill", 4, 4, "--disaggregation-decode-dp", "4"))
    assert hint.popen.wait(timeout=30) == 2
    assert "unrecognized arguments: --disaggregation-decode-dp 4" in hint.output()
    both = sglang_args("decode", extra=["--tp-size", "8", "--attn-dp-size", "4", "--dp-size", "2"])
    assert "data-parallel replicas combined with attention data parallelism are not supported" in _exits(
        stack, v, "decode", 2, both
    )
    start(stack, v, "prefill", 3, dp_args(v, "prefill", 4, 4))
    start(stack, v, "decode", 4, dp_args(v, "decode", 4, 4))
    (status, payload), (prefill_status, prefill_payload) = pd_request(stack, 3, 4, 5, routed_dp_rank=9)
    assert status == prefill_status == 400
    assert payload["error"]["message"] == "routed_dp_rank=9 out of range [0, 4)"
    # Room 5 implies prefill rank 1; a router that routes it to rank 3 without telling the decode.
    (status, payload), (prefill_status, prefill_payload) = pd_request(stack, 3, 4, 5, routed_dp_rank=3)
    assert prefill_status == 500, prefill_payload
    assert (
        "follow_bootstrap_room conflict: dispatched to dp_rank 3 but bootstrap_room 5 implies dp_rank 1"
        in (prefill_payload["message"])
    )
    assert status == 500 and "in KVPoll.WaitingForInput" in payload["message"], payload
    # The deprecated spelling is the same layout.
    start(
        stack,
        v,
        "prefill",
        5,
        sglang_args("prefill", extra=["--tp-size", "4", "--enable-dp-attention", "--dp-size", "4"]),
    )
    assert parallel_info(stack, v, 5)["dp_size"] == 4 and dp_report(stack, 5)["attn_dp_size"] == 4


@pytest.fixture(scope="module")
def router_venvs() -> None:
    for version in VERSIONS:
        ensure_router_venv(PROFILES[version].router)  # type: ignore[index]


@pytest.mark.parametrize("version", VERSIONS)
def test_real_router_serves_dp_servers_over_several_dp_ranks(stack: Stack, version: str, router_venvs: None) -> None:
    """The release's real router, started as the operator starts it (no DP flag): it picks a random bootstrap room
    and names no DP rank, and both SGLang sides place the request by that room."""
    stack.emulator(version, "prefill", 1, args=dp_args(version, "prefill", 4, 4), emulate=FAST, env=FAST_ENV)
    stack.emulator(version, "decode", 2, args=dp_args(version, "decode", 8, 8), emulate=FAST, env=FAST_ENV)
    router = stack.router(version, 1, 2, 3, extra=("--worker-startup-check-interval", "1"))
    url = f"http://{stack.ip(3)}:30000"
    wait_for(url + "/readiness", proc=router, timeout=60)
    body = {"text": "tell me something", "sampling_params": {"max_new_tokens": 4}}
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda _: request("POST", url + "/generate", body, timeout=30), range(24)))
    reports = []
    for status, raw, _ in results:
        assert status == 200, raw[:500]
        reports.append(json.loads(raw)["meta_info"]["emulator"])
    for report in reports:
        # The router named no DP rank; both sides placed the request by the room it drew.
        assert report["routed_dp_rank"] is None and report["disagg_prefill_dp_rank"] is None, report
        assert report["prefill_dp_rank"] == report["bootstrap_room"] % 4, report
    assert len({r["prefill_dp_rank"] for r in reports}) >= 3
    assert len({r["decode_dp_rank"] for r in reports}) >= 3
    prefill = dp_report(stack, 1)["dispatched"]
    assert sum(prefill) == 24 and sum(1 for n in prefill if n) >= 3


def test_smg_dp_aware_fights_a_room_following_0_5_23_prefill(stack: Stack, router_venvs: None) -> None:
    """Why the operator does not render smg's `--dp-aware`: smg 1.13.0 then names the DP ranks itself
    (`routed_dp_rank` to the prefill, `disagg_prefill_dp_rank` to the decode) but still draws a random room, while a
    0.5.23 prefill follows the room by default and fails any request routed to another rank than the room implies
    (common/conn.py:2160-2181). smg retries such failures, so some requests still succeed."""
    v = "0.5.23"
    stack.emulator(v, "prefill", 1, args=dp_args(v, "prefill", 4, 4), emulate=FAST, env=FAST_ENV)
    stack.emulator(v, "decode", 2, args=dp_args(v, "decode", 4, 4), emulate=FAST, env=FAST_ENV)
    router = stack.router(v, 1, 2, 3, extra=("--worker-startup-check-interval", "1", "--dp-aware"))
    url = f"http://{stack.ip(3)}:30000"
    wait_for(url + "/readiness", proc=router, timeout=60)
    body = {"text": "tell me something", "sampling_params": {"max_new_tokens": 4}}
    results = [request("POST", url + "/generate", body, timeout=30) for _ in range(8)]
    for status, raw, _ in results:
        if status == 200:
            report = json.loads(raw)["meta_info"]["emulator"]
            assert report["routed_dp_rank"] is not None and report["disagg_prefill_dp_rank"] is not None, report
            assert report["bootstrap_room"] % 4 == report["prefill_dp_rank"], report
    prefill_log = next(p for p in stack.procs if p.name == "prefill-1").output()
    assert "follow_bootstrap_room conflict: dispatched to dp_rank" in prefill_log
