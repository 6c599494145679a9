"""SGLang 0.5.2, PD + EAGLE: the first draft step on decode must see exactly what prefill's draft produced.

Each test runs the real 0.5.2 code end to end on CPU: ``Scheduler.init_disaggregation`` sizes both sides' metadata
buffers (queues replaced by mocks), the prefill mixin's ``process_batch_result_disagg_prefill`` and ``send_kv_chunk``
capture a batch's draft state into the prefill buffers via ``MetadataBuffers.set_buf``, the rows are moved with the
byte-exact aux-transfer emulation, ``DecodeTransferQueue.pop_transferred`` reads them with ``get_buf``, and
``process_prebuilt_extend`` rebuilds the draft input. Only GPU work and I/O are faked: the forward passes (their
outputs are made up here), the KV sender/receiver, the radix cache. On the unpatched wheel the EAGLE3 case crashes
in ``set_buf`` (target's 3x aux state), the others receive the target's hidden state and the ``torch.arange`` mock.
The nixl test replaces the aux emulation with the real ``NixlKVManager.send_aux`` (the nixl agent faked at its
descriptor/transfer calls): unpatched, it moves region 0 only.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
from dataclasses import dataclass
from types import SimpleNamespace
from unittest import mock

import pytest
import torch

from conftest import assert_bit_exact, emulate_aux_transfer, require_version

require_version("0.5.2")

import sglang.srt.managers.scheduler as scheduler_module  # noqa: E402
from sglang.srt.disaggregation.base import KVPoll  # noqa: E402
from sglang.srt.disaggregation.decode import DecodeRequest, DecodeTransferQueue  # noqa: E402
from sglang.srt.disaggregation.decode_schedule_batch_mixin import (  # noqa: E402
    ScheduleBatchDisaggregationDecodeMixin,
)
from sglang.srt.disaggregation.prefill import SchedulerDisaggregationPrefillMixin  # noqa: E402
from sglang.srt.disaggregation.utils import DisaggregationMode  # noqa: E402
from sglang.srt.managers.schedule_batch import FINISH_ABORT, Req  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402
from sglang.srt.sampling.sampling_params import SamplingParams  # noqa: E402
from sglang.srt.speculative.eagle_utils import EagleDraftInput  # noqa: E402
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402


@dataclass(frozen=True)
class Case:
    algorithm: str  # as given on the command line; 0.5.2's server args turn NEXTN into EAGLE
    topk: int
    target_hidden: int = 64
    target_dtype: torch.dtype = torch.bfloat16
    draft_hidden: int = 64
    draft_dtype: torch.dtype = torch.bfloat16

    @property
    def spec_algorithm(self) -> SpeculativeAlgorithm:
        return SpeculativeAlgorithm.from_string("EAGLE" if self.algorithm == "NEXTN" else self.algorithm)

    @property
    def target_capture_width(self) -> int:
        # EAGLE3's target forward captures three aux layers, concatenated.
        return 3 * self.target_hidden if self.algorithm == "EAGLE3" else self.target_hidden

    def __str__(self) -> str:
        return f"{self.algorithm}-topk{self.topk}-h{self.draft_hidden}-{str(self.draft_dtype).split('.')[-1]}"


CASES = [
    *(Case("EAGLE", k) for k in (1, 4, 8)),
    *(Case("EAGLE3", k) for k in (1, 4, 8)),  # the seed crash: 3x aux states into a 1x buffer
    *(Case("NEXTN", k) for k in (1, 4, 8)),
    # A draft whose width and dtype differ from the target's: the buffer must follow the draft.
    Case("EAGLE", 4, target_hidden=64, target_dtype=torch.bfloat16, draft_hidden=48, draft_dtype=torch.float16),
]


def model_config(hidden: int, dtype: torch.dtype):
    return SimpleNamespace(hf_text_config=SimpleNamespace(hidden_size=hidden), dtype=dtype, vocab_size=1000)


class FakeReceiver:
    """A KV receiver whose transfer has finished; has no clear(), like the fake backend's."""

    def poll(self):
        return KVPoll.Success


def build_side(case: Case, mode: DisaggregationMode, pool_size: int = 4):
    """Run the real Scheduler.init_disaggregation on a stand-in scheduler; returns it with its real buffers."""
    sched = mock.MagicMock()
    sched.server_args.disaggregation_transfer_backend = "fake"
    sched.server_args.speculative_eagle_topk = case.topk
    sched.disaggregation_mode = mode
    sched.req_to_token_pool.size = pool_size
    sched.max_running_requests = pool_size
    sched.model_config = model_config(case.target_hidden, case.target_dtype)
    # NEXTN's draft is the checkpoint's own MTP layer: its config is the target's.
    if case.algorithm == "NEXTN":
        sched.draft_worker = SimpleNamespace(model_config=sched.model_config, model_runner=mock.MagicMock())
    else:
        sched.draft_worker = SimpleNamespace(
            model_config=model_config(case.draft_hidden, case.draft_dtype), model_runner=mock.MagicMock()
        )
    sched.token_to_kv_pool_allocator.get_kvcache.return_value.maybe_get_custom_mem_pool.return_value = None
    sched.spec_algorithm = case.spec_algorithm
    with (
        mock.patch.object(scheduler_module, "DecodeTransferQueue"),
        mock.patch.object(scheduler_module, "DecodePreallocQueue"),
        mock.patch.object(scheduler_module, "PrefillBootstrapQueue"),
    ):
        scheduler_module.Scheduler.init_disaggregation(sched)
    return sched


def make_req(rid: str, prompt_len: int, pool_idx: int) -> Req:
    req = Req(rid, "", list(range(1, prompt_len + 1)), SamplingParams(max_new_tokens=16))
    req.fill_ids = req.origin_input_ids + req.output_ids
    req.extend_input_len = prompt_len
    req.req_pool_idx = pool_idx
    req.disagg_kv_sender = mock.MagicMock()
    return req


def draft_state(case: Case, rows: int, seed: int) -> EagleDraftInput:
    """What forward_draft_extend leaves in batch.spec_info: the draft's top-k of its first step and its hidden state."""
    g = torch.Generator().manual_seed(seed)
    topk_p, _ = torch.rand((rows, case.topk), generator=g).softmax(-1).sort(dim=-1, descending=True)
    topk_index = torch.randint(0, 1000, (rows, case.topk), generator=g, dtype=torch.int64)
    hidden = torch.randn((rows, case.draft_hidden), generator=g).to(case.draft_dtype)
    return EagleDraftInput(
        topk_p=topk_p.contiguous(),
        topk_index=topk_index,
        hidden_states=hidden,
        verified_id=torch.zeros(rows, dtype=torch.int32),
    )


def run_prefill(case: Case, prefill, reqs: list[Req], spec_info: EagleDraftInput, seed: int) -> None:
    """The real prefill result processing for one batch; set_buf writes each request's prefill slot."""
    prompt_lens = [len(r.origin_input_ids) for r in reqs]
    g = torch.Generator().manual_seed(seed + 1)
    target_capture = torch.randn((sum(prompt_lens), case.target_capture_width), generator=g).to(case.target_dtype)
    batch = SimpleNamespace(reqs=reqs, spec_info=spec_info, return_logprob=False)
    result = SimpleNamespace(
        logits_output=SimpleNamespace(
            hidden_states=target_capture, next_token_logprobs=None, input_token_logprobs=None
        ),
        next_token_ids=torch.tensor([100 + i for i in range(len(reqs))]),
        extend_input_len_per_req=prompt_lens,
        extend_logprob_start_len_per_req=prompt_lens,
    )
    prefill.enable_overlap = False
    prefill.disagg_prefill_inflight_queue = []
    prefill.token_to_kv_pool_allocator.page_size = 1
    prefill.req_to_token_pool.req_to_token = torch.arange(8 * 64, dtype=torch.int32).reshape(8, 64)
    prefill.send_kv_chunk = functools.partial(SchedulerDisaggregationPrefillMixin.send_kv_chunk, prefill)
    for req in reqs:
        if req.metadata_buffer_index < 0:
            req.metadata_buffer_index = prefill.req_to_metadata_buffer_idx_allocator.alloc()
    SchedulerDisaggregationPrefillMixin.process_batch_result_disagg_prefill(prefill, batch, result)


def receive(decode, reqs_and_slots, gloo_group) -> tuple[DecodeTransferQueue, list[Req]]:
    """The real decode transfer queue, polling transfers that have landed in the given decode slots."""
    queue = DecodeTransferQueue(
        gloo_group,
        decode.req_to_metadata_buffer_idx_allocator,
        0,
        decode.disagg_metadata_buffers,
        decode,
        mock.MagicMock(),
    )
    for req, slot in reqs_and_slots:
        queue.add(DecodeRequest(req=req, kv_receiver=FakeReceiver(), metadata_buffer_index=slot))
    return queue, queue.pop_transferred()


def prebuilt_extend(case: Case, decode, reqs: list[Req]) -> EagleDraftInput:
    """The real decode-side reconstruction of the draft input for a prebuilt batch."""
    lens = [len(r.origin_input_ids) for r in reqs]
    batch = SimpleNamespace(
        reqs=reqs,
        tree_cache=mock.MagicMock(),
        device="cpu",
        spec_algorithm=case.spec_algorithm,
        forward_mode=ForwardMode.EXTEND,
        seq_lens=torch.tensor(lens),
        extend_lens=lens,
        input_ids=torch.tensor(
            list(itertools.chain.from_iterable(r.origin_input_ids for r in reqs)), dtype=torch.int32
        ),
    )
    server_args = SimpleNamespace(speculative_eagle_topk=case.topk)
    ScheduleBatchDisaggregationDecodeMixin.process_prebuilt_extend(batch, server_args, decode.model_config)
    return batch.spec_info


def transfer(prefill, decode, prefill_req: Req, decode_req: Req) -> int:
    slot = decode.req_to_metadata_buffer_idx_allocator.alloc()
    emulate_aux_transfer(
        prefill.disagg_metadata_buffers, prefill_req.metadata_buffer_index, decode.disagg_metadata_buffers, slot
    )
    decode_req.metadata_buffer_index = slot
    return slot


def decode_twin(req: Req) -> Req:
    """The decode server's own Req for the same prompt (decode never sees prefill's object)."""
    twin = Req(req.rid, "", list(req.origin_input_ids), SamplingParams(max_new_tokens=16))
    twin.req_pool_idx = req.req_pool_idx
    return twin


def expected_rows(spec_info: EagleDraftInput, row: int, topk: int):
    return (
        spec_info.topk_p[row : row + 1, :topk],
        spec_info.topk_index[row : row + 1, :topk],
        spec_info.hidden_states[row : row + 1],
    )


@pytest.mark.parametrize("case", CASES, ids=str)
def test_first_draft_step_matches_prefill(case: Case, gloo_group):
    prefill = build_side(case, DisaggregationMode.PREFILL)
    decode = build_side(case, DisaggregationMode.DECODE)
    req = make_req("r0", 7, 0)
    spec_info = draft_state(case, 1, seed=case.topk)
    run_prefill(case, prefill, [req], spec_info, seed=case.topk)

    twin = decode_twin(req)
    transfer(prefill, decode, req, twin)
    _, done = receive(decode, [(twin, twin.metadata_buffer_index)], gloo_group)
    assert done == [twin]
    assert twin.output_ids == [100], "first output token lost in transfer"

    rebuilt = prebuilt_extend(case, decode, [twin])
    topk_p, topk_index, hidden = expected_rows(spec_info, 0, case.topk)
    assert_bit_exact(rebuilt.topk_p, topk_p, "topk_p")
    assert_bit_exact(rebuilt.topk_index, topk_index, "topk_index")
    assert_bit_exact(rebuilt.hidden_states, hidden, "draft hidden state")


@pytest.mark.parametrize("algorithm", ["EAGLE", "EAGLE3"])
def test_finished_request_does_not_shift_rows(algorithm: str, gloo_group):
    """forward_draft_extend drops finished requests from spec_info: rows must still reach the right request."""
    case = Case(algorithm, 4)
    prefill = build_side(case, DisaggregationMode.PREFILL)
    decode = build_side(case, DisaggregationMode.DECODE)
    reqs = [make_req(f"r{i}", 5 + i, i) for i in range(3)]
    reqs[0].finished_reason = FINISH_ABORT("aborted before its draft extend")
    spec_info = draft_state(case, 2, seed=11)  # rows for reqs[1] and reqs[2] only
    run_prefill(case, prefill, reqs, spec_info, seed=11)

    twins = [decode_twin(r) for r in reqs[1:]]
    for r, t in zip(reqs[1:], twins, strict=True):
        transfer(prefill, decode, r, t)
    _, done = receive(decode, [(t, t.metadata_buffer_index) for t in twins], gloo_group)
    assert done == twins
    rebuilt = prebuilt_extend(case, decode, twins)
    for out_row, in_row in ((0, 0), (1, 1)):
        assert_bit_exact(rebuilt.topk_p[out_row], spec_info.topk_p[in_row], f"request {out_row + 1} topk_p")
        assert_bit_exact(rebuilt.topk_index[out_row], spec_info.topk_index[in_row], f"request {out_row + 1} topk_index")
        assert_bit_exact(
            rebuilt.hidden_states[out_row], spec_info.hidden_states[in_row], f"request {out_row + 1} hidden"
        )


def test_reused_slot_does_not_corrupt_waiting_request(gloo_group):
    """A's slot is freed when its transfer is polled done; B's prefill may refill it before A's prebuilt extend."""
    case = Case("EAGLE", 4)
    prefill = build_side(case, DisaggregationMode.PREFILL)
    decode = build_side(case, DisaggregationMode.DECODE)
    req_a, req_b = make_req("a", 6, 0), make_req("b", 6, 1)
    spec_a, spec_b = draft_state(case, 1, seed=1), draft_state(case, 1, seed=2)
    run_prefill(case, prefill, [req_a], spec_a, seed=1)
    run_prefill(case, prefill, [req_b], spec_b, seed=2)

    twin_a, twin_b = decode_twin(req_a), decode_twin(req_b)
    slot_a = transfer(prefill, decode, req_a, twin_a)
    _, done = receive(decode, [(twin_a, slot_a)], gloo_group)
    assert done == [twin_a]
    received_a = (twin_a.hidden_states_tensor.clone(), getattr(twin_a, "output_topk_p", None))

    allocator = decode.req_to_metadata_buffer_idx_allocator
    while (slot := allocator.alloc()) != slot_a:  # drain until the freed slot comes round again
        assert slot is not None, "freed slot never came back"
    emulate_aux_transfer(
        prefill.disagg_metadata_buffers, req_b.metadata_buffer_index, decode.disagg_metadata_buffers, slot_a
    )
    twin_b.metadata_buffer_index = slot_a

    assert_bit_exact(twin_a.hidden_states_tensor, received_a[0], "A's hidden state after B reused its slot")
    if received_a[1] is not None:
        assert_bit_exact(twin_a.output_topk_p, received_a[1], "A's topk_p after B reused its slot")
    rebuilt = prebuilt_extend(case, decode, [twin_a])
    topk_p, topk_index, hidden = expected_rows(spec_a, 0, case.topk)
    assert_bit_exact(rebuilt.hidden_states, hidden, "A's draft hidden state")
    assert_bit_exact(rebuilt.topk_p, topk_p, "A's topk_p")
    assert_bit_exact(rebuilt.topk_index, topk_index, "A's topk_index")


def test_buffer_layouts_identical_on_both_sides():
    """Every aux region has the same row size on prefill and decode, and the hidden row follows the draft config."""
    case = Case("EAGLE3", 8, target_hidden=64, draft_hidden=48, draft_dtype=torch.float16)
    prefill = build_side(case, DisaggregationMode.PREFILL)
    decode = build_side(case, DisaggregationMode.DECODE)
    p_items = prefill.disagg_metadata_buffers.get_buf_infos()[2]
    d_items = decode.disagg_metadata_buffers.get_buf_infos()[2]
    assert p_items == d_items
    hidden = prefill.disagg_metadata_buffers.output_hidden_states
    assert hidden.shape[1] == 48 and hidden.dtype == torch.float16, "hidden row not sized/typed from the draft config"


def test_wrong_width_hidden_state_fails_with_clear_error():
    """A hidden state that does not fit the row is refused with a message naming both shapes, not a broadcast error."""
    case = Case("EAGLE3", 4)
    prefill = build_side(case, DisaggregationMode.PREFILL)
    req = make_req("x", 4, 0)
    req.metadata_buffer_index = 0
    req.output_ids = [5]
    req.hidden_states_tensor = torch.zeros(3 * 64, dtype=torch.bfloat16)
    req.output_topk_p = torch.zeros(4)
    req.output_topk_index = torch.zeros(4, dtype=torch.int64)
    with pytest.raises(
        RuntimeError, match=r"hidden state of shape \(192,\) does not fit the \(64,\) draft hidden-state"
    ):
        prefill.disagg_metadata_buffers.set_buf(req)


class FakeNixlAgent:
    """The nixl agent at its lowest calls, as NixlKVManager.send_aux uses them: descriptor lists, one WRITE transfer.
    transfer() performs the WRITE as RDMA would: each source descriptor's bytes to its destination descriptor."""

    def __init__(self) -> None:
        self.transfers: list[tuple[list, list, str]] = []

    def get_xfer_descs(self, addrs: list[tuple[int, int, int]], mem_type: str) -> list[tuple[int, int, int]]:
        assert mem_type == "DRAM", "metadata buffers are host memory"
        return list(addrs)

    def initialize_xfer(self, op: str, src_descs, dst_descs, peer_name: str, notif: bytes):
        assert op == "WRITE" and len(src_descs) == len(dst_descs)
        return (list(src_descs), list(dst_descs), notif.decode("ascii"))

    def transfer(self, handle) -> str:
        src_descs, dst_descs, _notif = handle
        for (src, src_len, _), (dst, dst_len, _) in zip(src_descs, dst_descs, strict=True):
            assert src_len == dst_len
            ctypes.memmove(dst, src, src_len)
        self.transfers.append(handle)
        return "DONE"


def nixl_send_aux(prefill, decode, prefill_req: Req, decode_req: Req) -> FakeNixlAgent:
    """The real 0.5.2 NixlKVManager.send_aux from prefill's slot to a new decode slot (agent faked at the bottom)."""
    from sglang.srt.disaggregation.nixl.conn import NixlKVManager

    slot = decode.req_to_metadata_buffer_idx_allocator.alloc()
    ptrs, _, item_lens = prefill.disagg_metadata_buffers.get_buf_infos()
    agent = FakeNixlAgent()
    mgr = SimpleNamespace(kv_args=SimpleNamespace(aux_data_ptrs=ptrs, aux_item_lens=item_lens), agent=agent)
    dst_ptrs = decode.disagg_metadata_buffers.get_buf_infos()[0]
    NixlKVManager.send_aux(mgr, "decode-0", prefill_req.metadata_buffer_index, dst_ptrs, slot, f"{slot}_aux")
    decode_req.metadata_buffer_index = slot
    return agent


def test_nixl_send_aux_moves_every_region(gloo_group):
    """Over nixl, every metadata region reaches decode in one transfer; 0.5.2 moved region 0 (output_ids) only, so
    decode rebuilt its first draft step from zero rows."""
    case = Case("EAGLE", 4)
    prefill = build_side(case, DisaggregationMode.PREFILL)
    decode = build_side(case, DisaggregationMode.DECODE)
    req = make_req("r0", 7, 0)
    spec_info = draft_state(case, 1, seed=7)
    run_prefill(case, prefill, [req], spec_info, seed=7)

    twin = decode_twin(req)
    agent = nixl_send_aux(prefill, decode, req, twin)
    ptrs = prefill.disagg_metadata_buffers.get_buf_infos()[0]
    assert len(agent.transfers) == 1, "one WRITE (one notification) per request"
    sent = len(agent.transfers[0][0])
    assert sent == len(ptrs), f"nixl send_aux moved {sent} of {len(ptrs)} metadata regions"

    _, done = receive(decode, [(twin, twin.metadata_buffer_index)], gloo_group)
    assert done == [twin]
    rebuilt = prebuilt_extend(case, decode, [twin])
    topk_p, topk_index, hidden = expected_rows(spec_info, 0, case.topk)
    assert_bit_exact(rebuilt.topk_p, topk_p, "topk_p")
    assert_bit_exact(rebuilt.topk_index, topk_index, "topk_index")
    assert_bit_exact(rebuilt.hidden_states, hidden, "draft hidden state")
