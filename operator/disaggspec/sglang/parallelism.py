"""Renders a pool's `parallelism` block (DP attention, expert parallelism, DeepEP, dense-MLP TP, DP LM head, two-batch
overlap, EPLB) and the layout hints a pool needs about its peer, per release; pure.

Every option below is classified in `flag_policy` as OWNED: the typed ones point at their field, the derived ones at
"the operator, from the peer pool", so extraArgs can set none of them. Must-match: none; SGLang's PD transfer pairs a
prefill and a decode of different layouts (the decode learns the prefill's DP size and attention TP size from the
bootstrap server: 0.5.2 disaggregation/common/conn.py:137-163, 264-272; 0.5.23 disaggregation/decode.py:879-895), and
the KV of each request moves between the attention-TP groups of one DP rank on each side.

The classification, per option (`file:line` in each wheel; 0.5.2 paths under sglang/srt, server_args.py unless
named; 0.5.23 paths under sglang/srt):

- dataParallelAttention.size [per-pool]
  - 0.5.2: `--enable-dp-attention --dp-size N` (226, 346; dp_size 1 turns DP attention off, 634-635; tp % dp == 0,
    640; chunked prefill divided by dp, 641)
  - 0.5.23: `--attn-dp-size N` (arg_groups/fields/parallel.py:81-89); `--dp-size N --enable-dp-attention` is the
    deprecated spelling it resolves to that (arg_groups/parallel_hook.py:39-62); tp % attn_dp == 0 and chunk //
    attn_dp (parallel_hook.py:326-331)
- expertParallel.size [per-pool]
  - 0.5.2: `--ep-size` (272); moe_tp = tp // ep (distributed/parallel_state.py:1461-1462)
  - 0.5.23: `--ep-size` (arg_groups/fields/parallel.py:281-288)
- expertParallel.backend [per-pool]
  - 0.5.2: `--moe-a2a-backend deepep` (273); forces ep_size = tp_size (671-675)
  - 0.5.23: same flag (arg_groups/fields/exec_.py:836-852); deepep forces ep_size = tp_size
    (arg_groups/overrides.py:1578-1619)
- expertParallel.deepepMode [per-pool]
  - 0.5.2: `--deepep-mode` (284); normal disables CUDA graphs (672-674)
  - 0.5.23: same (arg_groups/moe_hook.py:383-398)
- denseMlpTpSize [per-pool]
  - 0.5.2: `--moe-dense-tp-size`, only 1 (2269-2272)
  - 0.5.23: same, 1 or tp_size (arg_groups/validation_hook.py:207-211)
- dpLmHead [per-pool]
  - 0.5.2: `--enable-dp-lm-head`, asserts DP attention (646-649)
  - 0.5.23: same; silently dropped without DP attention (arg_groups/overrides.py:1367-1370, 1422-1426)
- twoBatchOverlap [per-pool]
  - 0.5.2: `--enable-two-batch-overlap` (348)
  - 0.5.23: same; refused without an a2a backend or DP attention (arg_groups/validation_hook.py:756-768)
- eplb [per-pool]
  - 0.5.2: `--enable-eplb` (288), asserts ep_size > 1 (691-692); `--ep-num-redundant-experts` (285)
  - 0.5.23: same (arg_groups/parallel_hook.py:750-791: ep_size > 1)
- decode's TP and DP [derived (prefill)]
  - 0.5.2: `--disaggregation-decode-tp/-dp` (380-381), defaulting to the prefill's own (828-831), refused on a
    decode (810-816); tp sizes must divide one another (834, 2382-2388); the prefill passes decode_tp // decode_dp
    to its KV manager (disaggregation/prefill.py:113)
  - 0.5.23: no such flags (nor any reader of them): the decode learns the prefill's layout from its bootstrap
    server, as above
- decode's DP dispatch acknowledgement [derived (decode)]
  - 0.5.2: `--prefill-round-robin-balance` (229): asserted on a DP decode (821-826), read nowhere else; the prefill
    dispatches a PD request to DP rank bootstrap_room % dp (managers/data_parallel_controller.py:282-291) and the
    decode looks it up the same way (disaggregation/common/conn.py:204)
  - 0.5.23: removed; the prefill dispatches by `follow_bootstrap_room` by default
    (arg_groups/serving_hook.py:217-235) and otherwise reports its rank to the decode
    (disaggregation/common/conn.py:2162-2180)
- plain `--dp-size` (data-parallel replicas) [forbidden]
  - 0.5.2: the dest `data_parallel_size` is the DP-attention size, rendered from dataParallelAttention
  - 0.5.23: `dp_size` counts replicas, which multiply a server's GPUs (and may not combine with attn_dp_size,
    arg_groups/parallel_hook.py:287-292)

Flags are emitted only when the release registers them (`profile.knows_flag`), and nothing is rendered for a service
without `parallelism`, so its command is what it was before the block existed.
"""

from __future__ import annotations

from disaggspec.api import DisaggSpecService, PoolName, pool
from disaggspec.api.v1alpha1 import ParallelismSpec, PoolSpec
from disaggspec.sglang.profiles import SGLangProfile

ATTN_DP_FLAG = "--attn-dp-size"
"""0.5.23's DP-attention size; a release without it takes `--enable-dp-attention --dp-size`."""


def dp_attention_size(pool_spec: PoolSpec) -> int:
    """The pool's attention data-parallel ranks per server (1: tensor-parallel attention)."""
    par = pool_spec.parallelism
    if par is None or par.data_parallel_attention is None:
        return 1
    return par.data_parallel_attention.size


def parallelism_args(par: ParallelismSpec | None, profile: SGLangProfile) -> list[str]:
    """The flags of one pool's own `parallelism` block, in a fixed order (empty when unset)."""
    if par is None:
        return []
    args: list[str] = []
    dpa = par.data_parallel_attention
    if dpa is not None:
        if profile.knows_flag(ATTN_DP_FLAG):
            args += [ATTN_DP_FLAG, str(dpa.size)]
        else:
            args += ["--enable-dp-attention", "--dp-size", str(dpa.size)]
    ep = par.expert_parallel
    if ep is not None:
        args += ["--ep-size", str(ep.size)]
        if ep.backend != "none":
            args += ["--moe-a2a-backend", ep.backend]
        if ep.deepep_mode is not None:
            args += ["--deepep-mode", ep.deepep_mode]
    if par.dense_mlp_tp_size is not None:
        args += ["--moe-dense-tp-size", str(par.dense_mlp_tp_size)]
    if par.dp_lm_head:
        args.append("--enable-dp-lm-head")
    if par.two_batch_overlap:
        args.append("--enable-two-batch-overlap")
    if par.eplb is not None:
        args += ["--enable-eplb", "--ep-num-redundant-experts", str(par.eplb.redundant_experts)]
    return args


def peer_layout_args(service: DisaggSpecService, role: PoolName, profile: SGLangProfile) -> list[str]:
    """The hints a pool of a release that has them needs about the layouts in play, derived from the specs (never
    typed). Rendered only when a pool uses DP attention, the case they exist for: without it both default correctly
    (the decode hints to the prefill's own TP, whose check the rule `transfer-tp-divisible` already makes)."""
    spec = service.spec
    if dp_attention_size(spec.prefill) == 1 and dp_attention_size(spec.decode) == 1:
        return []
    args: list[str] = []
    if role == "prefill" and profile.knows_flag("--disaggregation-decode-tp"):
        args += ["--disaggregation-decode-tp", str(spec.decode.tensor_parallel_size)]
        args += ["--disaggregation-decode-dp", str(dp_attention_size(spec.decode))]
    if role == "decode" and dp_attention_size(spec.decode) > 1 and profile.knows_flag("--prefill-round-robin-balance"):
        args.append("--prefill-round-robin-balance")
    return args


def pool_parallelism_args(service: DisaggSpecService, role: PoolName, profile: SGLangProfile) -> list[str]:
    """Everything this module renders for one pool: its own block, then the peer-layout hints."""
    return parallelism_args(pool(service.spec, role).parallelism, profile) + peer_layout_args(service, role, profile)
