"""Conformance of `spec.<pool>.parallelism` (issue 30) against the real server arguments of the release under test.

Every layout of the matrix (DP attention sizes, expert parallelism with and without DeepEP in each mode, the DP LM head,
two-batch overlap, EPLB, a multi-node 2 x 8 server with 16 DP ranks, prefill and decode of different layouts) is
rendered by the operator and goes through the release's own `prepare_server_args` (argparse, then `__post_init__`), on
0.5.23 its `resolve_once` (the arg_groups resolution pipeline), and `check_server_args` (what the engine calls at start,
0.5.2 sglang/srt/entrypoints/engine.py:733, 0.5.23 entrypoints/engine.py:1165 after resolve_once); the resolved values
must be the spec's. Then each combination a `parallelism-*` rule refuses is rendered anyway and handed to the same
functions: the release refuses it too, or silently changes it (so the typed value would lie), or, where its server
arguments accept it and the failure comes later at run time, the test says so and shows it is accepted.

The model path is replaced by a local directory holding a DeepSeek-V3 config.json (the server arguments read the
model's config; no weights are needed), and the device is pinned to cpu so no GPU is probed.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from conftest import sglang_version

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "operator"))

from disaggspec.api import parse_service  # noqa: E402
from disaggspec.sglang.args import NODE_RANK_LEADER, server_args  # noqa: E402
from disaggspec.validation import validate  # noqa: E402

VERSION = sglang_version()
os.environ.pop("SGLANG_IS_IN_CI", None)  # 0.5.2 skips the decode's round-robin check in CI (server_args.py:821)

DEEPSEEK_V3_CONFIG: dict[str, Any] = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "num_nextn_predict_layers": 1,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "n_group": 8,
    "topk_group": 4,
    "first_k_dense_replace": 3,
    "moe_layer_freq": 1,
    "kv_lora_rank": 512,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "vocab_size": 129280,
    "max_position_embeddings": 163840,
    "rms_norm_eps": 1e-06,
    "rope_theta": 10000,
    "routed_scaling_factor": 2.5,
    "scoring_func": "sigmoid",
    "topk_method": "noaux_tc",
    "norm_topk_prob": True,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 0,
    "eos_token_id": 1,
}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("deepseek-v3")
    (path / "config.json").write_text(json.dumps(DEEPSEEK_V3_CONFIG))
    return path


def _service(
    prefill: dict[str, Any], decode: dict[str, Any], transfer: dict[str, Any] | None = None, **engine: Any
) -> Any:
    return parse_service(
        {
            "metadata": {"name": "conformance", "namespace": "conformance"},
            "spec": {
                "sglang": {"image": "example.invalid/sglang:test", "version": VERSION},
                "model": {"path": "deepseek-ai/DeepSeek-V3", "trustRemoteCode": True},
                "speculative": {"algorithm": "NEXTN", "numSteps": 3, "eagleTopk": 1, "numDraftTokens": 4},
                "engine": {"pageSize": 64, **engine},
                "transfer": transfer or {},
                "prefill": prefill,
                "decode": decode,
            },
        }
    )


def _pool(tp: int, nodes: int = 1, **parallelism: Any) -> dict[str, Any]:
    pool: dict[str, Any] = {"tensorParallelSize": tp, "parallelism": parallelism}
    if nodes > 1:
        pool["nodesPerInstance"] = nodes
    return pool


def _resolved(argv: list[str], model_dir: Path) -> Any:
    """The release's ServerArgs of a rendered command (model path swapped for the local config), after its post-init
    and start-time checks; raises what the release raises."""
    from sglang.srt.server_args import prepare_server_args

    args = list(argv[3:])
    args[args.index("--model-path") + 1] = str(model_dir)
    server = prepare_server_args([*args, "--device", "cpu"])
    if hasattr(server, "resolve_once"):
        # 0.5.23 resolves the arguments (the arg_groups pipeline) before the checks, as its engine does
        # (entrypoints/engine.py:1153-1165), and the resolved values are what the server runs with.
        server.resolve_once()
        server.check_server_args()
        return SimpleNamespace(**server.resolved_dict())
    server.check_server_args()
    return server


def _dp(server: Any) -> int:
    """The attention DP size the release resolved (0.5.2: dp_size with enable_dp_attention; 0.5.23: attn_dp_size)."""
    if hasattr(server, "attn_dp_size"):
        return int(server.attn_dp_size)
    return int(server.dp_size) if server.enable_dp_attention else 1


LAYOUTS: dict[str, dict[str, Any]] = {
    "tp8": _pool(8),
    "dp8": _pool(8, dataParallelAttention={"size": 8}),
    "dp2": _pool(8, dataParallelAttention={"size": 2}),
    "dp8-deepep-normal-all": _pool(
        8,
        dataParallelAttention={"size": 8},
        expertParallel={"size": 8, "backend": "deepep", "deepepMode": "normal"},
        denseMlpTpSize=1,
        dpLmHead=True,
        twoBatchOverlap=True,
        eplb={"redundantExperts": 32},
    ),
    "dp4-deepep-low-latency": _pool(
        8,
        dataParallelAttention={"size": 4},
        expertParallel={"size": 8, "backend": "deepep", "deepepMode": "low_latency"},
    ),
    "ep4-eplb": _pool(8, expertParallel={"size": 4}, eplb={"redundantExperts": 0}),
    "dp8-ep8-tbo": _pool(8, dataParallelAttention={"size": 8}, expertParallel={"size": 8}, twoBatchOverlap=True),
    "dense-tp-equal": _pool(8, dataParallelAttention={"size": 8}, denseMlpTpSize=8),
    "2x8-dp16-deepep": _pool(
        16,
        nodes=2,
        dataParallelAttention={"size": 16},
        expertParallel={"size": 16, "backend": "deepep"},
        denseMlpTpSize=1,
        dpLmHead=True,
    ),
}
"""Pool layouts; each is rendered as prefill against a DP-16 multi-node decode and as decode against a DP-8 prefill."""

PEER_DECODE = LAYOUTS["2x8-dp16-deepep"]
PEER_PREFILL = LAYOUTS["dp8-deepep-normal-all"]


def _cases() -> Iterator[tuple[str, str, Any]]:
    for name, layout in LAYOUTS.items():
        for role in ("prefill", "decode"):
            service = _service(layout, PEER_DECODE) if role == "prefill" else _service(PEER_PREFILL, layout)
            if validate(service):
                continue  # a layout this release refuses (denseMlpTpSize = tp on 0.5.2): the refusals below cover it
            yield f"{name}-{role}", role, service


CASES = list(_cases())


def test_the_matrix_renders_on_this_release() -> None:
    names = {name for name, _, _ in CASES}
    assert {"2x8-dp16-deepep-prefill", "2x8-dp16-deepep-decode", "dp8-deepep-normal-all-decode"} <= names
    assert ("dense-tp-equal-prefill" in names) == (VERSION != "0.5.2")


@pytest.mark.parametrize(("case", "role", "service"), CASES, ids=[c for c, _, _ in CASES])
def test_every_layout_resolves_as_the_spec_says(case: str, role: str, service: Any, model_dir: Path) -> None:
    pool = service.spec.prefill if role == "prefill" else service.spec.decode
    par = pool.parallelism
    server = _resolved(server_args(service, role, NODE_RANK_LEADER), model_dir)
    assert server.tp_size == pool.tensor_parallel_size
    dpa = par.data_parallel_attention
    assert _dp(server) == (dpa.size if dpa is not None else 1)
    ep = par.expert_parallel
    assert server.ep_size == (ep.size if ep is not None else 1)
    assert server.moe_a2a_backend == (ep.backend if ep is not None else "none")
    if ep is not None and ep.deepep_mode is not None:
        assert server.deepep_mode == ep.deepep_mode
    assert server.moe_dense_tp_size == par.dense_mlp_tp_size
    assert server.enable_dp_lm_head == par.dp_lm_head
    assert server.enable_two_batch_overlap == par.two_batch_overlap
    assert server.enable_eplb == (par.eplb is not None)
    if par.eplb is not None:
        assert server.ep_num_redundant_experts == par.eplb.redundant_experts
    if role == "prefill" and hasattr(server, "disaggregation_decode_tp"):
        # 0.5.2: the hints the operator derives from the decode pool (server_args.py:828-834 checks them).
        decode = service.spec.decode
        decode_dp = decode.parallelism.data_parallel_attention
        assert server.disaggregation_decode_tp == decode.tensor_parallel_size
        assert server.disaggregation_decode_dp == (decode_dp.size if decode_dp is not None else 1)


def test_every_node_of_a_multi_node_dp_server_resolves(model_dir: Path) -> None:
    service = _service(PEER_PREFILL, PEER_DECODE)
    for rank in ("0", "1"):
        argv = [a.replace("$(LWS_LEADER_ADDRESS)", "leader.example") for a in server_args(service, "decode", rank)]
        server = _resolved(argv, model_dir)
        assert (server.nnodes, server.node_rank, _dp(server)) == (2, int(rank), 16)


# ---- what the rules refuse, the release refuses (or changes, or fails on later) ------------------------------------


def _refused(prefill: dict[str, Any], decode: dict[str, Any], rule: str, **engine: Any) -> Any:
    """The service of a refused combination, checked to trip exactly `rule`, rendered all the same."""
    service = _service(prefill, decode, **engine)
    assert {v.rule for v in validate(service)} == {rule}
    return service


def _raises(service: Any, role: str, model_dir: Path, says: str) -> None:
    with pytest.raises((AssertionError, ValueError)) as err:
        _resolved(server_args(service, role), model_dir)
    assert says in str(err.value), str(err.value)


def test_dp_not_dividing_tp_is_refused(model_dir: Path) -> None:
    service = _refused(
        _pool(8, dataParallelAttention={"size": 3}), _pool(8), "parallelism-dp-attention-divides-tp", pageSize=1
    )
    # A bare `assert tp_size % dp_size == 0` on both releases (0.5.2 server_args.py:640; 0.5.23
    # arg_groups/parallel_hook.py:326): an AssertionError with no message.
    with pytest.raises(AssertionError):
        _resolved(server_args(service, "prefill"), model_dir)


def test_eplb_without_ep_is_refused(model_dir: Path) -> None:
    service = _refused(_pool(8, eplb={}), _pool(8), "parallelism-eplb-needs-ep")
    with pytest.raises(AssertionError):  # `assert ep_size > 1` (0.5.2 :692; 0.5.23 parallel_hook.py:791)
        _resolved(server_args(service, "prefill"), model_dir)


def test_dense_mlp_tp_size_the_release_refuses(model_dir: Path) -> None:
    service = _refused(_pool(8), _pool(8, denseMlpTpSize=2), "parallelism-dense-mlp-tp-size")
    _raises(service, "decode", model_dir, "moe_dense_tp_size only support")
    if VERSION == "0.5.2":
        service = _refused(_pool(8), _pool(8, denseMlpTpSize=8), "parallelism-dense-mlp-tp-size")
        _raises(service, "decode", model_dir, "moe_dense_tp_size only support")


def test_dp_lm_head_without_dp_attention(model_dir: Path) -> None:
    service = _refused(_pool(8, dpLmHead=True), _pool(8), "parallelism-dp-lm-head-needs-dp-attention")
    if VERSION == "0.5.2":
        _raises(service, "prefill", model_dir, "Please enable dp attention when setting enable_dp_lm_head")
    else:
        # 0.5.23 drops it without a word (arg_groups/overrides.py:1367-1370): the typed true would be a lie.
        assert _resolved(server_args(service, "prefill"), model_dir).enable_dp_lm_head is False


def test_two_batch_overlap_without_communication(model_dir: Path) -> None:
    service = _refused(_pool(8), _pool(8, twoBatchOverlap=True), "parallelism-two-batch-overlap-needs-communication")
    if VERSION == "0.5.23":
        _raises(service, "decode", model_dir, "attention DP (--attn-dp-size) is required")
    else:
        # 0.5.2 has no such check (server_args.py:348 is the field's only mention there): accepted, and the batch
        # is split with no communication to hide; the rule holds for both releases.
        assert _resolved(server_args(service, "decode"), model_dir).enable_two_batch_overlap is True


def test_deepep_with_another_ep_size_is_silently_replaced(model_dir: Path) -> None:
    service = _refused(
        _pool(8), _pool(8, expertParallel={"size": 4, "backend": "deepep"}), "parallelism-deepep-ep-equals-tp"
    )
    # Both releases overwrite ep_size with tp_size for DeepEP (0.5.2 :675; 0.5.23 arg_groups/overrides.py:1611-1619).
    assert _resolved(server_args(service, "decode"), model_dir).ep_size == 8


def test_deepep_mode_without_deepep_is_ignored(model_dir: Path) -> None:
    service = _refused(
        _pool(8, expertParallel={"size": 8, "deepepMode": "normal"}), _pool(8), "parallelism-deepep-mode-needs-deepep"
    )
    server = _resolved(server_args(service, "prefill"), model_dir)
    # Accepted and read by nothing: no a2a backend, so the mode the spec names never happens.
    assert server.moe_a2a_backend == "none" and server.deepep_mode == "normal"


def test_chunk_not_whole_pages_under_dp_attention_is_refused(model_dir: Path) -> None:
    prefill = {**_pool(8, dataParallelAttention={"size": 8}), "extraArgs": ["--chunked-prefill-size", "2112"]}
    service = _refused(prefill, _pool(8), "parallelism-dp-attention-chunk-pages")
    # 2112 is whole 64-token pages; 2112 // 8 = 264 per DP rank is not (0.5.2 :641 then :2285-2288; 0.5.23
    # arg_groups/parallel_hook.py:331 then validation_hook.py:244).
    _raises(service, "prefill", model_dir, "chunked_prefill_size must be divisible by page_size")
    without_dp = _service({**_pool(8), "extraArgs": ["--chunked-prefill-size", "2112"]}, _pool(8))
    assert validate(without_dp) == []
    _resolved(server_args(without_dp, "prefill"), model_dir)


def test_dp_decode_needs_the_derived_acknowledgement_on_0_5_2(model_dir: Path) -> None:
    service = _service(_pool(8), _pool(8, dataParallelAttention={"size": 4}))
    assert validate(service) == []
    argv = server_args(service, "decode")
    if VERSION != "0.5.2":
        assert "--prefill-round-robin-balance" not in argv
        return
    # What the operator renders passes; without the derived flag the release refuses (server_args.py:821-826), and
    # the prefill's hints may not go to a decode (810-816), which is why they are rendered on the prefill only.
    assert "--prefill-round-robin-balance" in argv
    _resolved(argv, model_dir)
    without = [a for a in argv if a != "--prefill-round-robin-balance"]
    with pytest.raises(AssertionError, match="Prefill round robin balance is required"):
        _resolved(without, model_dir)
    with pytest.raises(AssertionError, match="Cannot set --disaggregation-decode-tp for the decode engine"):
        _resolved([*argv, "--disaggregation-decode-tp", "8"], model_dir)


def test_what_fails_later_is_accepted_by_the_server_arguments(model_dir: Path) -> None:
    """Three rules guard failures that come after the server arguments, at run time: the release accepts them here.
    - parallelism-ep-divides-tp: 0.5.2 splits experts as tp // ep when it builds the MoE groups
      (distributed/parallel_state.py:1461-1462), 0.5.23 when it sets up the EP ranks (model_executor/
      model_runner_components/moe_ep_setup.py:150-153), both after the weights' process groups exist.
    - parallelism-dp-attention-ports: a port collision is a bind error when the bootstrap server or a DP scheduler
      starts (0.5.2 server_args.py:2634-2642).
    - parallelism-prefill-dp-dispatch (0.5.2): minimum_tokens dispatches a PD request to a DP rank other than
      bootstrap_room % dp, where the decode looks for it (disaggregation/common/conn.py:204); the transfer times out."""
    ep = _refused(_pool(8), _pool(8, expertParallel={"size": 3}), "parallelism-ep-divides-tp")
    assert _resolved(server_args(ep, "decode"), model_dir).ep_size == 3
    dp8 = _pool(8, dataParallelAttention={"size": 8})
    spec = _service(dp8, _pool(8), transfer={"bootstrapPort": 30240})
    assert {v.rule for v in validate(spec)} == {"parallelism-dp-attention-ports"}
    assert _resolved(server_args(spec, "prefill"), model_dir).disaggregation_bootstrap_port == 30240
    if VERSION == "0.5.2":
        prefill = {**dp8, "extraArgs": ["--load-balance-method", "minimum_tokens"]}
        dispatch = _refused(prefill, _pool(8), "parallelism-prefill-dp-dispatch")
        assert _resolved(server_args(dispatch, "prefill"), model_dir).load_balance_method == "minimum_tokens"


def test_the_sglang_teams_4_plus_9_node_layout(model_dir: Path) -> None:
    """Prefill 4 x 8 GPUs and decode 9 x 8 GPUs, DP attention over every rank (attention TP 1 on both sides), as the
    SGLang team ran DeepSeek on 96 H100s: 0.5.23 takes it (only the attention TP sizes meet in the transfer); 0.5.2's
    prefill asserts that its whole tp and the decode's divide one another, so the rule refuses it there."""
    prefill = {
        **_pool(32, nodes=4, dataParallelAttention={"size": 32}),
        "extraArgs": ["--load-balance-method", "round_robin", "--chunked-prefill-size", "393216"],
    }
    decode = {
        **_pool(72, nodes=9, dataParallelAttention={"size": 72}),
        "extraArgs": ["--chunked-prefill-size", "294912"],
    }
    service = _service(prefill, decode, transfer={"bootstrapPort": 30400})
    rules = {v.rule for v in validate(service)}
    if VERSION == "0.5.2":
        assert rules == {"transfer-tp-divisible"}
        _raises(service, "prefill", model_dir, "Different tp size is supported only when one tp is multiple")
        return
    assert rules == set()
    for role, dp in (("prefill", 32), ("decode", 72)):
        argv = [a.replace("$(LWS_LEADER_ADDRESS)", "leader.example") for a in server_args(service, role, "0")]
        server = _resolved(argv, model_dir)
        assert (server.tp_size, _dp(server)) == (dp, dp)
