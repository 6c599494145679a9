"""SGLang 0.5.23, PD + EAGLE: draft-state transfer for any top-k, and a handshake that refuses a mismatched pair.

The transfer tests run the real code: ``MetadataBuffers.set_buf`` on a ``Req`` carrying draft state as 0.5.23's
prefill leaves it, the byte-exact aux-transfer emulation, the decode queue's real ``_commit_transfer_to_req`` (which
calls ``get_buf`` and validates the bootstrap room), and ``build_eagle_disagg_draft_input``. The buffers are built
with the arguments each tree's ``Scheduler.init_disaggregation`` passes (the patched one adds the config-sized top-k
row); ``get_spec()`` is replaced by the test's speculative settings. The handshake tests run the real bootstrap server
on 127.0.0.1, register a prefill with the real ``register_to_bootstrap``, and let the real
``try_ensure_parallel_info`` of a decode fetch ``/route`` and judge it; the availability test runs the real decode
queue (``DecodePreallocQueue``, its real ``__init__`` with the KV manager replaced) with real ``CommonKVReceiver``
objects against two prefills. Unpatched, topk x steps > 16 crashes set_buf, every mismatched pair is accepted
silently, and decode's first verify under rejection sampling always uses the one-hot proposal.
"""

from __future__ import annotations

import asyncio
import functools
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from types import SimpleNamespace
from unittest import mock

import pytest
import torch

from conftest import assert_bit_exact, emulate_aux_transfer, require_version

require_version("0.5.23")

import sglang.srt.disaggregation.common.conn as common_conn  # noqa: E402
import sglang.srt.disaggregation.decode as decode_module  # noqa: E402
import sglang.srt.disaggregation.utils as disagg_utils  # noqa: E402
import sglang.srt.speculative.eagle_disaggregation as eagle_disagg  # noqa: E402
from sglang.srt.disaggregation.base import KVPoll  # noqa: E402
from sglang.srt.disaggregation.decode import DecodePreallocQueue, DecodeRequest, DecodeTransferQueue  # noqa: E402
from sglang.srt.disaggregation.utils import MetadataBuffers  # noqa: E402
from sglang.srt.managers.schedule_batch import FINISH_ABORT, Req  # noqa: E402
from sglang.srt.sampling.sampling_params import SamplingParams  # noqa: E402
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402

PATCHED = hasattr(disagg_utils, "speculative_fingerprint")


@dataclass(frozen=True)
class Spec:
    """The speculative settings get_spec() answers with (the --speculative-* flags), plus the draft's hidden row."""

    speculative_algorithm: str = "EAGLE"
    speculative_eagle_topk: int = 4
    speculative_num_steps: int = 3
    enable_multi_layer_eagle: bool = False
    speculative_use_rejection_sampling: bool = False
    # SGLANG_DISAGG_TRANSFER_DRAFT_PROBS on both servers: prefill's q travels (patch 0003, opt-in).
    transfer_draft_probs: bool = False
    draft_hidden: int = 64
    draft_dtype: torch.dtype = torch.bfloat16

    @property
    def num_states(self) -> int:
        return self.speculative_eagle_topk * (self.speculative_num_steps if self.enable_multi_layer_eagle else 1)

    def __str__(self) -> str:
        ml = f"-ml{self.speculative_num_steps}" if self.enable_multi_layer_eagle else ""
        rs = ""
        if self.speculative_use_rejection_sampling:
            rs = "-rs" if self.transfer_draft_probs else "-rs-onehot"
        return f"{self.speculative_algorithm}-topk{self.speculative_eagle_topk}{ml}{rs}"

    @property
    def draft_probs_states(self) -> int:
        """Rows of q per request: one per draft step with multi-layer EAGLE."""
        return self.speculative_num_steps if self.enable_multi_layer_eagle else 1


CASES = [
    *(Spec(alg, k) for alg in ("EAGLE", "EAGLE3", "NEXTN") for k in (1, 4, 8)),
    Spec("EAGLE", 1, speculative_num_steps=3, enable_multi_layer_eagle=True),
    # Rejection sampling (topk 1) with q carried: decode must verify against prefill's q, not a one-hot stand-in.
    Spec("EAGLE", 1, speculative_use_rejection_sampling=True, transfer_draft_probs=True),
    Spec("EAGLE3", 1, speculative_use_rejection_sampling=True, transfer_draft_probs=True),
    Spec(
        "EAGLE",
        1,
        speculative_num_steps=3,
        enable_multi_layer_eagle=True,
        speculative_use_rejection_sampling=True,
        transfer_draft_probs=True,
    ),
    # ... and without it (the default): the one-hot proposal, exact but accepting less.
    Spec("EAGLE", 1, speculative_use_rejection_sampling=True),
    Spec("EAGLE", 1, speculative_num_steps=3, enable_multi_layer_eagle=True, speculative_use_rejection_sampling=True),
    # Past the old fixed 16-wide row: these crashed the prefill scheduler.
    Spec("EAGLE", 20),
    Spec("EAGLE3", 32),
    Spec("EAGLE", 4, speculative_num_steps=5, enable_multi_layer_eagle=True),
]
VOCAB = 1000


def make_buffers(spec: Spec, size: int = 4, **kwargs) -> MetadataBuffers:
    """MetadataBuffers as this tree's Scheduler.init_disaggregation builds them (same on prefill and decode), in a
    process whose environment sets SGLANG_DISAGG_TRANSFER_DRAFT_PROBS as the spec says."""
    args = dict(hidden_size=spec.draft_hidden, hidden_states_dtype=spec.draft_dtype, max_sampling_mask_tokens=64)
    args.update(kwargs)
    if PATCHED:
        if hasattr(disagg_utils, "spec_draft_probs_metadata_shape"):
            env = {"SGLANG_DISAGG_TRANSFER_DRAFT_PROBS": "1" if spec.transfer_draft_probs else "0"}
            with mock.patch.dict(os.environ, env):
                args.setdefault("draft_probs_shape", disagg_utils.spec_draft_probs_metadata_shape(spec, VOCAB))
        buffers = MetadataBuffers(size, spec_topk_width=disagg_utils.spec_topk_metadata_width(spec), **args)
        buffers.spec_fingerprint = disagg_utils.speculative_fingerprint(spec, buffers)
        return buffers
    return MetadataBuffers(size, **args)


def prefill_req(spec: Spec, rid: str, room: int, slot: int, seed: int) -> Req:
    """A prefill Req holding the draft state of its first step, as process_batch_result_disagg_prefill sets it."""
    g = torch.Generator().manual_seed(seed)
    req = Req(rid, "", list(range(1, 8)), SamplingParams(max_new_tokens=16))
    req.bootstrap_room = room
    req.metadata_buffer_index = slot
    req.output_ids = [100 + seed]
    req.output_topk_p = torch.rand(spec.num_states, generator=g).softmax(-1)
    req.output_topk_index = torch.randint(0, 1000, (spec.num_states,), generator=g, dtype=torch.int64)
    req.hidden_states_tensor = torch.randn(spec.draft_hidden, generator=g).to(spec.draft_dtype)
    if spec.speculative_use_rejection_sampling:
        # next_draft_input.draft_probs[i]: (vocab,) single-layer, (num_steps, vocab) multi-layer.
        shape = (spec.speculative_num_steps, VOCAB) if spec.enable_multi_layer_eagle else (VOCAB,)
        req.output_draft_probs = torch.rand(shape, generator=g).softmax(-1)
    return req


def one_hot_proposal(spec: Spec, req: Req) -> torch.Tensor:
    """What decode verifies against without q: probability one on each drafted token (pd_first_draft_proposal)."""
    tokens = req.output_topk_index[: spec.num_states]
    probs = torch.zeros((spec.draft_probs_states, VOCAB), dtype=torch.float32)
    probs[torch.arange(spec.draft_probs_states), tokens] = 1.0
    return probs if spec.enable_multi_layer_eagle else probs[0]


@pytest.fixture(autouse=True)
def disagg_bag():
    """The 'disagg' config bag the decode commit path reads (a real transfer backend, not 'fake')."""
    bag = SimpleNamespace(disaggregation_transfer_backend="mooncake")
    with mock.patch.object(disagg_utils, "get_disagg", lambda: bag):
        yield


def decode_queue(spec: Spec, buffers: MetadataBuffers):
    """Stand-in for the DecodeTransferQueue whose real _commit_transfer_to_req is under test."""
    queue = mock.MagicMock()
    queue.metadata_buffers = buffers
    queue.scheduler.kv_checksum_computer = None
    queue.spec_algorithm = SpeculativeAlgorithm.from_string(spec.speculative_algorithm)
    return queue


def commit(queue, req: Req, slot: int) -> None:
    DecodeTransferQueue._commit_transfer_to_req(
        queue, DecodeRequest(req=req, kv_receiver=mock.MagicMock(), metadata_buffer_index=slot)
    )
    assert req.finished_reason is None, f"decode aborted the request: {req.finished_reason}"


def decode_req(rid: str, room: int) -> Req:
    req = Req(rid, "", list(range(1, 8)), SamplingParams(max_new_tokens=16))
    req.bootstrap_room = room
    return req


def rebuild(spec: Spec, reqs: list[Req]):
    batch = SimpleNamespace(
        reqs=reqs,
        device="cpu",
        model_config=SimpleNamespace(hf_config=SimpleNamespace(), vocab_size=VOCAB),
        enable_overlap=False,
    )
    with mock.patch.object(eagle_disagg, "get_spec", lambda: spec):
        return eagle_disagg.build_eagle_disagg_draft_input(batch, torch.tensor([r.output_ids[-1] for r in reqs]), None)


@pytest.mark.parametrize("spec", CASES, ids=str)
def test_first_draft_step_matches_prefill(spec: Spec):
    prefill, decode = make_buffers(spec), make_buffers(spec)
    sent = prefill_req(spec, "r0", room=4242, slot=1, seed=spec.num_states)
    prefill.set_buf(sent)
    emulate_aux_transfer(prefill, 1, decode, 2)
    got = decode_req("r0", room=4242)
    commit(decode_queue(spec, decode), got, slot=2)
    draft = rebuild(spec, [got])
    assert_bit_exact(draft.topk_p, sent.output_topk_p.unsqueeze(0), "topk_p")
    assert_bit_exact(draft.topk_index, sent.output_topk_index.unsqueeze(0), "topk_index")
    assert_bit_exact(draft.hidden_states, sent.hidden_states_tensor.unsqueeze(0), "draft hidden state")
    if spec.speculative_use_rejection_sampling and spec.transfer_draft_probs:
        assert_bit_exact(draft.draft_probs, sent.output_draft_probs.unsqueeze(0), "draft proposal q")
    elif spec.speculative_use_rejection_sampling:
        assert_bit_exact(draft.draft_probs, one_hot_proposal(spec, sent).unsqueeze(0), "one-hot proposal")


RS_Q = Spec("EAGLE", 1, speculative_use_rejection_sampling=True, transfer_draft_probs=True)


@pytest.mark.parametrize("row_state", ["stale", "zero"])
def test_request_without_q_takes_the_one_hot_path(row_state: str):
    """In one decode batch, A's q arrived and B's did not: B's prefill had no q, and its slot's q row holds either
    the previous occupant's q (stale) or nothing ever written (zero). The verify inputs: A's q, B's one-hot."""
    prefill, decode = make_buffers(RS_Q), make_buffers(RS_Q)
    if row_state == "stale":
        earlier = prefill_req(RS_Q, "c", room=5003, slot=1, seed=3)  # C used prefill slot 1 before B
        prefill.set_buf(earlier)
        emulate_aux_transfer(prefill, 1, decode, 2)
    a = prefill_req(RS_Q, "a", room=5001, slot=0, seed=1)
    b = prefill_req(RS_Q, "b", room=5002, slot=1, seed=2)
    b.output_draft_probs = None  # next_draft_input carried no q for B
    prefill.set_buf(a)
    prefill.set_buf(b)
    emulate_aux_transfer(prefill, 0, decode, 3)
    emulate_aux_transfer(prefill, 1, decode, 2)
    queue = decode_queue(RS_Q, decode)
    got_a, got_b = decode_req("a", 5001), decode_req("b", 5002)
    commit(queue, got_a, slot=3)
    commit(queue, got_b, slot=2)
    draft = rebuild(RS_Q, [got_a, got_b])
    assert_bit_exact(draft.draft_probs[1], one_hot_proposal(RS_Q, b), "B's proposal (one-hot fallback)")
    assert_bit_exact(draft.draft_probs[0], a.output_draft_probs, "A's draft proposal q")


def test_q_off_keeps_the_aux_layout_without_q():
    """Rejection sampling without SGLANG_DISAGG_TRANSFER_DRAFT_PROBS: the aux regions (count, row and region sizes)
    are byte-identical to those of a server that never carries q (patches 0001-0002's layout)."""
    rs = make_buffers(Spec("EAGLE", 1, speculative_use_rejection_sampling=True))
    plain = make_buffers(Spec("EAGLE", 1))
    assert rs.get_buf_infos()[1:] == plain.get_buf_infos()[1:], "q off changed the aux layout"


def test_q_on_adds_its_row_and_marker():
    """With q carried: one (states, vocab) float32 row, and one 64 B row saying whose q it holds."""
    spec = replace(RS_Q, speculative_num_steps=3, enable_multi_layer_eagle=True)
    with_q = make_buffers(spec)
    plain = make_buffers(Spec("EAGLE", 1, speculative_num_steps=3, enable_multi_layer_eagle=True))
    added = list(with_q.get_buf_infos()[2])
    for item in plain.get_buf_infos()[2]:
        added.remove(item)
    assert sorted(added) == sorted([3 * VOCAB * 4, 64]), f"aux rows added for q: {added}"


def test_reused_slot_does_not_corrupt_waiting_request():
    spec = Spec("EAGLE3", 8)
    prefill, decode = make_buffers(spec), make_buffers(spec)
    queue = decode_queue(spec, decode)
    a, b = prefill_req(spec, "a", 11, 0, seed=1), prefill_req(spec, "b", 12, 1, seed=2)
    prefill.set_buf(a)
    prefill.set_buf(b)
    emulate_aux_transfer(prefill, 0, decode, 3)
    got_a = decode_req("a", 11)
    commit(queue, got_a, slot=3)
    emulate_aux_transfer(prefill, 1, decode, 3)  # slot 3 freed and reused by B before A's prebuilt extend
    draft = rebuild(spec, [got_a])
    assert_bit_exact(draft.topk_p[0], a.output_topk_p, "A's topk_p")
    assert_bit_exact(draft.hidden_states[0], a.hidden_states_tensor, "A's hidden state")


def test_set_buf_refuses_more_states_than_the_row_holds():
    """A buffer narrower than the draft state (a misconfigured side) fails with a message, not a broadcast error."""
    narrow = Spec("EAGLE", 4)
    buffers = make_buffers(narrow)
    req = prefill_req(Spec("EAGLE", 4, speculative_num_steps=5, enable_multi_layer_eagle=True), "x", 1, 0, seed=3)
    with pytest.raises(RuntimeError, match=r"20 top-k entries exceed the 16-wide top-k buffer"):
        buffers.set_buf(req)


# --- handshake -----------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def bootstrap_servers() -> Iterator[Callable[[], str]]:
    """Starts real bootstrap servers on loopback (one per prefill) and closes them all afterwards."""
    servers = []

    def start() -> str:
        port = free_port()
        servers.append(common_conn.CommonKVBootstrapServer("127.0.0.1", port))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        return f"127.0.0.1:{port}"

    yield start
    for server in servers:
        # Cancel the server's background task first, so closing its loop leaves no pending task behind.
        loop = getattr(server, "_loop", None)
        if loop is not None and loop.is_running():
            loop.call_soon_threadsafe(lambda loop=loop: [t.cancel() for t in asyncio.all_tasks(loop)])
            time.sleep(0.05)
        server.close()


@pytest.fixture
def bootstrap_server(bootstrap_servers) -> str:
    return bootstrap_servers()


def kv_args(buffers: MetadataBuffers, role: str):
    """KVArgs as the prefill/decode queues fill them: aux regions from get_buf_infos(), plus the fingerprint."""
    args = SimpleNamespace(
        page_size=1, kv_cache_dtype_str="auto", kv_layout=None, state_types=[], engine_rank=0, rust_http_port=None
    )
    args.aux_data_ptrs, args.aux_data_lens, args.aux_item_lens = buffers.get_buf_infos()
    if PATCHED:
        args.spec_fingerprint = buffers.spec_fingerprint
    return args


def manager(buffers: MetadataBuffers, role: str, port: int = 0):
    """A CommonKVManager stand-in with one rank's topology; its handshake methods are the real ones."""
    mgr = mock.MagicMock()
    mgr.kv_args = kv_args(buffers, role)
    mgr.kv_cache_dtype_str = "auto"
    mgr.spec_fingerprint = getattr(mgr.kv_args, "spec_fingerprint", None)
    mgr.kv_layout = None
    mgr.dsv41_spec_layout = None
    for name in ("attn_tp_size", "attn_cp_size", "attn_dp_size", "pp_size", "system_dp_size"):
        setattr(mgr, name, 1)
    for name in ("attn_tp_rank", "attn_cp_rank", "attn_dp_rank", "pp_rank", "system_dp_rank"):
        setattr(mgr, name, 0)
    mgr.is_mla_backend = mgr.is_hybrid_mla_backend = False
    mgr.dcp_size = 1
    mgr.dist_init_addr = None
    mgr.bootstrap_host = "127.0.0.1"
    mgr.bootstrap_port = port
    mgr.local_ip = "127.0.0.1"
    mgr.rank_port = 12345
    mgr.prefill_info_table = {}
    mgr._register_topology_row = functools.partial(common_conn.CommonKVManager._register_topology_row, mgr)
    return mgr


@pytest.fixture
def runtime_bags():
    """The process config bags register_to_bootstrap reads (unpublished in a test process)."""
    parallel = SimpleNamespace(
        load_balance_method="follow_bootstrap_room",
        enable_dsa_cache_layer_split=False,
        enable_kv_cache_sharding=False,
        enable_cp_tp_group_sharing=False,
    )
    with (
        mock.patch.object(common_conn, "get_parallel", lambda: parallel),
        mock.patch.object(common_conn, "get_serving", lambda: SimpleNamespace(port=30000)),
        mock.patch.object(
            common_conn, "get_disagg", lambda: SimpleNamespace(disaggregation_decode_allocation_policy="early")
        ),
    ):
        yield


def register_prefill(addr: str, prefill_buffers: MetadataBuffers) -> None:
    port = int(addr.rsplit(":", 1)[1])
    common_conn.CommonKVManager.register_to_bootstrap(manager(prefill_buffers, "prefill", port))


def handshake(addr: str, prefill_buffers: MetadataBuffers, decode_buffers: MetadataBuffers) -> bool:
    register_prefill(addr, prefill_buffers)
    return common_conn.CommonKVManager.try_ensure_parallel_info(manager(decode_buffers, "decode"), addr)


BASE = Spec("EAGLE3", 4)
MISMATCHES = {
    "speculative_algorithm": replace(BASE, speculative_algorithm="EAGLE"),
    "draft_hidden_size": replace(BASE, draft_hidden=48),
    "draft_hidden_dtype": replace(BASE, draft_dtype=torch.float16),
    "speculative_eagle_topk": replace(BASE, speculative_eagle_topk=8),
    "enable_multi_layer_eagle": replace(BASE, speculative_eagle_topk=1, enable_multi_layer_eagle=True),
    "speculative_use_rejection_sampling": replace(BASE, speculative_use_rejection_sampling=True),
    # SGLANG_DISAGG_TRANSFER_DRAFT_PROBS on prefill only (both sides use rejection sampling).
    "draft_probs_shape": replace(RS_Q, speculative_algorithm="EAGLE3"),
}
# The decode side of a pair, where it is not BASE: only the named field differs.
MISMATCH_BASES = {
    "enable_multi_layer_eagle": replace(BASE, speculative_eagle_topk=1),
    "draft_probs_shape": replace(RS_Q, speculative_algorithm="EAGLE3", transfer_draft_probs=False),
}


def test_matching_pair_passes_the_handshake(bootstrap_server, runtime_bags):
    assert handshake(bootstrap_server, make_buffers(BASE), make_buffers(BASE)) is True


@pytest.mark.parametrize("field", sorted(MISMATCHES))
def test_mismatched_pair_is_refused_naming_the_field(field: str, bootstrap_server, runtime_bags):
    prefill_spec = MISMATCHES[field]
    base = MISMATCH_BASES.get(field, BASE)
    with pytest.raises(RuntimeError, match=rf"Speculative config mismatch.*{field}: prefill="):
        handshake(bootstrap_server, make_buffers(prefill_spec), make_buffers(base))


def test_prefill_without_fingerprint_is_refused_when_decode_speculates(bootstrap_server, runtime_bags):
    """An older (unpatched) prefill sends no fingerprint: a speculating decode cannot trust its draft state."""
    prefill_buffers = make_buffers(BASE)
    prefill_buffers.spec_fingerprint = None  # what an unpatched prefill publishes: nothing
    with pytest.raises(RuntimeError, match=r"prefill server sent no speculative fingerprint"):
        handshake(bootstrap_server, prefill_buffers, make_buffers(BASE))


def test_metadata_buffer_count_mismatch_is_refused(bootstrap_server, runtime_bags):
    """KV checksum on decode only: one extra aux buffer. 0.5.23 logged this and sent misaligned rows."""
    with pytest.raises(RuntimeError, match=r"metadata buffer count mismatch: prefill has \d+, decode has \d+"):
        handshake(bootstrap_server, make_buffers(BASE), make_buffers(BASE, kv_checksum_enabled=True))


def test_prefill_rejects_decode_with_other_buffer_count():
    """The prefill side's check returns a reason (mooncake rejects the peer with it) instead of only logging."""
    mgr = mock.MagicMock()
    mgr.kv_args.aux_data_ptrs = [0] * 14
    reason = common_conn.CommonKVManager.check_peer_aux_buffer_count(mgr, "decode-0", 15)
    assert reason is not None and "15 metadata buffers" in reason
    assert common_conn.CommonKVManager.check_peer_aux_buffer_count(mgr, "decode-0", 14) is None


# --- availability: one mismatched prefill must not take the decode server down ---------------------------------


class Clock:
    """decode.py's `time` module, with monotonic() under the test's control (the refusal back-off)."""

    def __init__(self) -> None:
        self.now = time.monotonic()

    def monotonic(self) -> float:
        return self.now

    def __getattr__(self, name: str):
        return getattr(time, name)


@pytest.fixture
def decode_prealloc_queue(gloo_group, runtime_bags) -> Iterator[tuple[DecodePreallocQueue, mock.MagicMock, Clock]]:
    """The real DecodePreallocQueue (its real __init__; the KV manager it would build replaced by the handshake
    stand-in, with the real try_ensure_parallel_info and the real failure bookkeeping receivers use), its manager, and
    decode.py's clock. _init_receiver (the transfer engine connection) is recorded, not run."""
    mgr = manager(make_buffers(BASE), "decode")
    for name in ("try_ensure_parallel_info", "record_failure", "update_status", "check_status"):
        setattr(mgr, name, functools.partial(getattr(common_conn.CommonKVManager, name), mgr))
    mgr.request_status, mgr.failure_records, mgr.failure_lock = {}, {}, threading.Lock()
    mgr.deferred_bootstrap, mgr.defer_decode_allocation = None, False
    parallel = SimpleNamespace(
        attn_tp_group=SimpleNamespace(cpu_group=gloo_group), tp_rank=0, pp_rank=0, pp_size=1, attn_tp_rank=0
    )
    scheduler = mock.MagicMock()
    scheduler.tp_worker.is_hybrid_swa = False
    scheduler.random_seed = 0
    clock = Clock()
    disagg = SimpleNamespace(disaggregation_enable_kv_checksum=False)
    with (
        mock.patch.object(decode_module, "get_parallel", lambda: parallel),
        mock.patch.object(decode_module, "get_disagg", lambda: disagg),
        mock.patch.object(DecodePreallocQueue, "_init_kv_manager", lambda self: mgr),
        mock.patch.object(decode_module, "time", clock),
    ):
        queue = DecodePreallocQueue(
            req_to_token_pool=mock.MagicMock(),
            token_to_kv_pool_allocator=mock.MagicMock(),
            draft_token_to_kv_pool=None,
            req_to_metadata_buffer_idx_allocator=mock.MagicMock(),
            metadata_buffers=mock.MagicMock(),
            scheduler=scheduler,
            transfer_queue=mock.MagicMock(),
            tree_cache=mock.MagicMock(),
            gpu_id=0,
            bootstrap_port=8998,
            max_total_num_tokens=4096,
            num_reserved_decode_tokens=0,
            transfer_backend="mooncake",
        )
        queue._init_receiver = mock.MagicMock()
        yield queue, mgr, clock


def pending(queue: DecodePreallocQueue, mgr, addr: str, room: int) -> DecodeRequest:
    """A request routed to the prefill at addr, queued as DecodePreallocQueue.add leaves it: in the queue and pending
    (its prefill's parallel info not yet known), with a real receiver."""
    host, port = addr.rsplit(":", 1)
    req = Req(f"rid-{room}", "", list(range(1, 8)), SamplingParams(max_new_tokens=16))
    req.bootstrap_host, req.bootstrap_port, req.bootstrap_room = host, int(port), room
    decode_req = DecodeRequest(req=req, kv_receiver=common_conn.CommonKVReceiver(mgr, addr, room))
    queue.queue.append(decode_req)
    queue.pending_reqs.append(decode_req)
    return decode_req


def test_mismatched_prefill_fails_its_requests_and_decode_keeps_serving(bootstrap_servers, decode_prealloc_queue):
    """Two prefills behind one decode, one with topk 8 instead of 4. The decode scheduler loop's pass over pending
    requests fails only the mismatched prefill's requests (client: HTTP 500 naming the field), refuses that prefill
    for a back-off, and keeps admitting the matched prefill's requests."""
    queue, mgr, clock = decode_prealloc_queue
    good, bad = bootstrap_servers(), bootstrap_servers()
    register_prefill(good, make_buffers(BASE))
    register_prefill(bad, make_buffers(MISMATCHES["speculative_eagle_topk"]))

    good_1, bad_1, bad_2 = pending(queue, mgr, good, 101), pending(queue, mgr, bad, 201), pending(queue, mgr, bad, 202)
    queue._resolve_pending_reqs()  # raised out of the scheduler loop (and killed the server) before
    served = [c.args[0] for c in queue._init_receiver.call_args_list]
    assert served == [good_1], "only the matched prefill's request may go on to its transfer"
    assert bad not in mgr.prefill_info_table, "a refused prefill's parallel info was cached"
    assert queue.pending_reqs == []

    queue._update_handshake_waiters()
    for decode_req in (bad_1, bad_2):
        reason = decode_req.req.finished_reason
        assert isinstance(reason, FINISH_ABORT), f"{decode_req.req.rid} was not aborted: {reason}"
        assert reason.status_code == 500
        assert f"Prefill server {bad} refused: Speculative config mismatch" in reason.message
        assert "speculative_eagle_topk: prefill=8 decode=4" in reason.message
    assert good_1.req.finished_reason is None

    # Within the back-off a new request for the refused prefill fails at once; the matched prefill keeps serving.
    queue._init_receiver.reset_mock()
    with mock.patch.object(mgr, "try_ensure_parallel_info", wraps=mgr.try_ensure_parallel_info) as fetch:
        bad_3, good_2 = pending(queue, mgr, bad, 203), pending(queue, mgr, good, 102)
        queue._resolve_pending_reqs()
        assert bad not in [c.args[0] for c in fetch.call_args_list], "refused prefill asked again within its back-off"
        assert bad_3.kv_receiver.poll() == KVPoll.Failed
        assert [c.args[0] for c in queue._init_receiver.call_args_list] == [good_2]

        # After the back-off the prefill is judged afresh (it may have been fixed); still mismatched, still refused.
        clock.now += 3600
        bad_4 = pending(queue, mgr, bad, 204)
        queue._resolve_pending_reqs()
        assert bad in [c.args[0] for c in fetch.call_args_list]
        assert bad_4.kv_receiver.poll() == KVPoll.Failed
