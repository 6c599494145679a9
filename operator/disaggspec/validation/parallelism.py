"""Parallelism rules: each pool's `parallelism` block (DP attention, expert parallelism, DeepEP, dense-MLP TP, DP LM
head, two-batch overlap, EPLB) against its tensorParallelSize, the release, the engine and the ports its server binds.

Each rule is a combination a pinned release refuses in its server-args checks (or would silently change, so the typed
value would lie), with that release's reason cited `file:line` in the wheel; the flags themselves and the per-release
classification are `disaggspec.sglang.parallelism`. What speculative decoding needs with DP attention: neither release
refuses EAGLE, EAGLE3 or NEXTN with DP attention (0.5.2 sglang/srt/server_args.py:724-728 and 0.5.23
sglang/srt/arg_groups/speculative_hook.py:1078-1084 refuse only STANDALONE; 0.5.23 also NGRAM, DFLASH, DSpark and UNO,
which the API does not offer), so no rule ties the two. Plain data-parallel replicas stay forbidden in extraArgs
(flag_policy), so 0.5.2's "multi-node data parallel is not supported unless dp attention" (server_args.py:2262-2264)
and 0.5.23's (arg_groups/validation_hook.py:199-202) cannot trip.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Final

from disaggspec.api.effective import PoolName, pool
from disaggspec.api.v1alpha1 import DisaggSpecService, DisaggSpecServiceSpec, PoolSpec
from disaggspec.constants import POOLS
from disaggspec.sglang.args import DIST_INIT_PORT, SERVER_PORT
from disaggspec.sglang.argv import parse
from disaggspec.sglang.parallelism import dp_attention_size
from disaggspec.sglang.profiles import SGLangVersion
from disaggspec.validation._cel import string_list
from disaggspec.validation._core import Cel, Rule, pool_spec_rule, profile_of

_PAR = "self.parallelism"
_DPA = f"has({_PAR}) && has({_PAR}.dataParallelAttention)"
_EP = f"has({_PAR}) && has({_PAR}.expertParallel)"
_DEEPEP = f"{_EP} && has({_PAR}.expertParallel.backend) && {_PAR}.expertParallel.backend == 'deepep'"


def _both(field: str) -> tuple[str, str]:
    """A pool field's path under each pool, for a rule's `fields`."""
    return (f"spec.prefill.{field}", f"spec.decode.{field}")


def _flag(field: str) -> str:
    """CEL: a boolean field of the pool's parallelism block is set and true."""
    return f"has({_PAR}) && has({_PAR}.{field}) && {_PAR}.{field}"


def _deepep(pool_spec: PoolSpec) -> bool:
    par = pool_spec.parallelism
    return par is not None and par.expert_parallel is not None and par.expert_parallel.backend == "deepep"


def _dp_divides_tp(pool_spec: PoolSpec) -> bool:
    """0.5.2 sglang/srt/server_args.py:638-640 asserts tp_size % dp_size == 0 under DP attention; 0.5.23
    sglang/srt/arg_groups/parallel_hook.py:326 asserts tp_size % attn_dp_size == 0."""
    return pool_spec.tensor_parallel_size % dp_attention_size(pool_spec) == 0


DP_DIVIDES_TP: Final = pool_spec_rule(
    "parallelism-dp-attention-divides-tp",
    (*_both("parallelism.dataParallelAttention.size"), *_both("tensorParallelSize")),
    "spec.<pool>.parallelism.dataParallelAttention.size must divide spec.<pool>.tensorParallelSize (each attention "
    "DP rank gets tensorParallelSize / size GPUs): choose a divisor, such as size equal to tensorParallelSize",
    wire="parallelism.dataParallelAttention.size",
    holds=_dp_divides_tp,
    cel=f"!({_DPA}) || self.tensorParallelSize % {_PAR}.dataParallelAttention.size == 0",
)


def _ep_divides_tp(pool_spec: PoolSpec) -> bool:
    """Experts are carved from the tensor-parallel ranks: 0.5.2 sglang/srt/distributed/parallel_state.py:1461-1462
    (moe_tp_size = tp // ep), 0.5.23 sglang/srt/model_executor/model_runner_components/moe_ep_setup.py:150-153."""
    par = pool_spec.parallelism
    if par is None or par.expert_parallel is None:
        return True
    return pool_spec.tensor_parallel_size % par.expert_parallel.size == 0


EP_DIVIDES_TP: Final = pool_spec_rule(
    "parallelism-ep-divides-tp",
    (*_both("parallelism.expertParallel.size"), *_both("tensorParallelSize")),
    "spec.<pool>.parallelism.expertParallel.size must divide spec.<pool>.tensorParallelSize (the experts are spread "
    "over the server's tensor-parallel GPUs): choose a divisor, usually tensorParallelSize itself",
    wire="parallelism.expertParallel.size",
    holds=_ep_divides_tp,
    cel=f"!({_EP}) || self.tensorParallelSize % {_PAR}.expertParallel.size == 0",
)


def _deepep_spans_tp(pool_spec: PoolSpec) -> bool:
    """DeepEP spans every rank: 0.5.2 sglang/srt/server_args.py:671-678 and 0.5.23 sglang/srt/arg_groups/
    overrides.py:1578-1619 overwrite ep_size with tp_size, so another size would be silently replaced."""
    par = pool_spec.parallelism
    if not _deepep(pool_spec) or par is None or par.expert_parallel is None:
        return True
    return par.expert_parallel.size == pool_spec.tensor_parallel_size


DEEPEP_SPANS_TP: Final = pool_spec_rule(
    "parallelism-deepep-ep-equals-tp",
    (*_both("parallelism.expertParallel.size"), *_both("parallelism.expertParallel.backend")),
    "spec.<pool>.parallelism.expertParallel.size must equal spec.<pool>.tensorParallelSize when backend is deepep "
    "(SGLang sets the expert-parallel size to the tensor-parallel size for DeepEP): set size to tensorParallelSize",
    wire="parallelism.expertParallel.size",
    holds=_deepep_spans_tp,
    cel=f"!({_DEEPEP}) || {_PAR}.expertParallel.size == self.tensorParallelSize",
)


def _deepep_mode_needs_deepep(pool_spec: PoolSpec) -> bool:
    """--deepep-mode is read only by the DeepEP dispatcher (0.5.2 sglang/srt/server_args.py:671-674, 0.5.23
    sglang/srt/arg_groups/moe_hook.py:362-398); set without it, it would say something that does not happen."""
    par = pool_spec.parallelism
    if par is None or par.expert_parallel is None or par.expert_parallel.deepep_mode is None:
        return True
    return par.expert_parallel.backend == "deepep"


DEEPEP_MODE: Final = pool_spec_rule(
    "parallelism-deepep-mode-needs-deepep",
    (*_both("parallelism.expertParallel.deepepMode"), *_both("parallelism.expertParallel.backend")),
    "spec.<pool>.parallelism.expertParallel.deepepMode needs expertParallel.backend deepep: set backend to deepep "
    "or remove deepepMode",
    wire="parallelism.expertParallel.deepepMode",
    holds=_deepep_mode_needs_deepep,
    cel=f"!({_EP}) || !has({_PAR}.expertParallel.deepepMode) || ({_DEEPEP})",
)


def _dp_lm_head(pool_spec: PoolSpec) -> bool:
    """0.5.2 sglang/srt/server_args.py:646-649 asserts DP attention; 0.5.23 drops the flag without it
    (sglang/srt/arg_groups/overrides.py:1367-1370) before asserting it (1422-1426)."""
    par = pool_spec.parallelism
    return par is None or not par.dp_lm_head or par.data_parallel_attention is not None


DP_LM_HEAD: Final = pool_spec_rule(
    "parallelism-dp-lm-head-needs-dp-attention",
    (*_both("parallelism.dpLmHead"), *_both("parallelism.dataParallelAttention")),
    "spec.<pool>.parallelism.dpLmHead needs spec.<pool>.parallelism.dataParallelAttention (the LM head is split "
    "within each attention DP rank): set dataParallelAttention or remove dpLmHead",
    wire="parallelism.dpLmHead",
    holds=_dp_lm_head,
    cel=f"!({_flag('dpLmHead')}) || has({_PAR}.dataParallelAttention)",
)


def _two_batch_overlap(pool_spec: PoolSpec) -> bool:
    """0.5.23 sglang/srt/arg_groups/validation_hook.py:756-768 refuses two-batch overlap with no a2a backend and no
    DP attention: there is no communication to overlap. 0.5.2 does not check it (server_args.py:348 is its only
    mention there) and would split batches for nothing; the rule holds for both releases."""
    par = pool_spec.parallelism
    return par is None or not par.two_batch_overlap or par.data_parallel_attention is not None or _deepep(pool_spec)


TWO_BATCH_OVERLAP: Final = pool_spec_rule(
    "parallelism-two-batch-overlap-needs-communication",
    (
        *_both("parallelism.twoBatchOverlap"),
        *_both("parallelism.expertParallel.backend"),
        *_both("parallelism.dataParallelAttention"),
    ),
    "spec.<pool>.parallelism.twoBatchOverlap needs communication to overlap: expertParallel with backend deepep, or "
    "dataParallelAttention; set one of them or remove twoBatchOverlap",
    wire="parallelism.twoBatchOverlap",
    holds=_two_batch_overlap,
    cel=f"!({_flag('twoBatchOverlap')}) || has({_PAR}.dataParallelAttention) || ({_DEEPEP})",
)


def _eplb_needs_ep(pool_spec: PoolSpec) -> bool:
    """0.5.2 sglang/srt/server_args.py:691-692 and 0.5.23 sglang/srt/arg_groups/parallel_hook.py:790-791 assert
    ep_size > 1 with EPLB (expertParallel.size is at least 2 by the schema)."""
    par = pool_spec.parallelism
    return par is None or par.eplb is None or par.expert_parallel is not None


EPLB_NEEDS_EP: Final = pool_spec_rule(
    "parallelism-eplb-needs-ep",
    (*_both("parallelism.eplb"), *_both("parallelism.expertParallel")),
    "spec.<pool>.parallelism.eplb needs spec.<pool>.parallelism.expertParallel (EPLB balances experts across "
    "expert-parallel GPUs): set expertParallel or remove eplb",
    wire="parallelism.eplb",
    holds=_eplb_needs_ep,
    cel=f"!(has({_PAR}) && has({_PAR}.eplb)) || has({_PAR}.expertParallel)",
)

DENSE_TP_MAY_EQUAL_TP: Final[dict[SGLangVersion, bool]] = {
    "0.5.2": False,  # sglang/srt/server_args.py:2269-2272: moe_dense_tp_size in {1, None}
    "0.5.23": True,  # sglang/srt/arg_groups/validation_hook.py:207-211: in (None, 1, tp_size)
}
"""Whether a release accepts --moe-dense-tp-size equal to tp_size besides 1 (tests/unit/test_parallelism.py keeps the
keys of these per-release tables equal to the supported releases)."""


def _dense_tp_ok(service: DisaggSpecService, pool_spec: PoolSpec) -> bool:
    par = pool_spec.parallelism
    if par is None or par.dense_mlp_tp_size is None or par.dense_mlp_tp_size == 1:
        return True
    return DENSE_TP_MAY_EQUAL_TP[service.spec.sglang.version] and (
        par.dense_mlp_tp_size == pool_spec.tensor_parallel_size
    )


def _pool_rule(
    rule_id: str,
    fields: tuple[str, ...],
    message: str,
    *,
    wire: str,
    holds: Callable[[DisaggSpecService, PoolSpec], bool],
    cel: Callable[[PoolName], str],
) -> Rule:
    """A rule over each pool that also reads the rest of the spec (the release, the transfer): `holds` in Python,
    `cel(pool)` on the spec node once per pool; a violation points at `spec.<pool>.<wire>`."""

    def check(service: DisaggSpecService) -> Iterator[str]:
        for p in POOLS:
            if not holds(service, pool(service.spec, p)):
                yield f"spec.{p}.{wire}"

    cels = tuple(Cel(DisaggSpecServiceSpec, cel(p), f".{p}.{wire}") for p in POOLS)
    return Rule(rule_id, fields, message, check, cels)


def _dense_tp_cel(p: PoolName) -> str:
    par = f"self.{p}.parallelism"
    equal = string_list(v for v, ok in DENSE_TP_MAY_EQUAL_TP.items() if ok)
    return (
        f"!has({par}) || !has({par}.denseMlpTpSize) || {par}.denseMlpTpSize == 1 || "
        f"(self.sglang.version in {equal} && {par}.denseMlpTpSize == self.{p}.tensorParallelSize)"
    )


DENSE_MLP_TP_SIZE: Final = _pool_rule(
    "parallelism-dense-mlp-tp-size",
    (*_both("parallelism.denseMlpTpSize"), *_both("tensorParallelSize"), "spec.sglang.version"),
    "spec.<pool>.parallelism.denseMlpTpSize must be 1 (every release), or equal spec.<pool>.tensorParallelSize on "
    "0.5.23 (0.5.2 accepts only 1): set it to 1, or leave it unset",
    wire="parallelism.denseMlpTpSize",
    holds=_dense_tp_ok,
    cel=_dense_tp_cel,
)


def _dp_port_base(pool_spec: PoolSpec) -> int:
    """Where a DP-attention server derives its ZMQ ports from: the rendezvous port of a multi-node server
    (--dist-init-addr, DIST_INIT_PORT), else the HTTP port + 233 (0.5.2 sglang/srt/server_args.py:2570, 2619-2620;
    0.5.23 sglang/srt/server_args.py:728, 817-825)."""
    return DIST_INIT_PORT if pool_spec.nodes_per_instance > 1 else SERVER_PORT + 233


def _dp_ports_free(service: DisaggSpecService, pool_spec: PoolSpec) -> bool:
    """With DP attention a server binds base+1 .. base+5 and, on 0.5.2, one scheduler input port per DP rank from
    base+6 (0.5.2 sglang/srt/server_args.py:2634-2642; 0.5.23 sglang/srt/server_args.py:830-852 binds base+1 ..
    base+6); the bootstrap server binds spec.transfer.bootstrapPort in the same pod."""
    size = dp_attention_size(pool_spec)
    if size == 1:
        return True
    base = _dp_port_base(pool_spec)
    return not base + 1 <= service.spec.transfer.bootstrap_port <= base + 5 + size


def _dp_ports_cel(p: PoolName) -> str:
    par = f"self.{p}.parallelism"
    size = f"{par}.dataParallelAttention.size"
    base = f"(self.{p}.nodesPerInstance > 1 ? {DIST_INIT_PORT} : {SERVER_PORT + 233})"
    port = "self.transfer.bootstrapPort"
    return f"!(has({par}) && has({par}.dataParallelAttention)) || {port} < {base} + 1 || {port} > {base} + 5 + {size}"


DP_ATTENTION_PORTS: Final = _pool_rule(
    "parallelism-dp-attention-ports",
    ("spec.transfer.bootstrapPort", *_both("parallelism.dataParallelAttention.size")),
    f"spec.transfer.bootstrapPort must stay clear of the ports a DP-attention server derives: {DIST_INIT_PORT + 1} "
    f"to {DIST_INIT_PORT + 5} + dataParallelAttention.size on a multi-node pool, {SERVER_PORT + 234} to "
    f"{SERVER_PORT + 238} + size on a one-node pool; pick another bootstrap port (the default 8998 is clear)",
    wire="parallelism.dataParallelAttention.size",
    holds=_dp_ports_free,
    cel=_dp_ports_cel,
)

DEFAULT_CHUNKED_PREFILL_SIZES: Final = (2048, 4096, 8192, 16384)
"""Every --chunked-prefill-size a release picks when it is unset, by GPU memory: 0.5.2 sglang/srt/server_args.py:
509-518; 0.5.23 sglang/srt/arg_groups/memory_hook.py:93-177 (some models turn it off with -1, which passes)."""
CHECKS_DECODE_CHUNK: Final[dict[SGLangVersion, bool]] = {
    "0.5.2": True,  # sglang/srt/server_args.py:2283-2288 checks every server
    "0.5.23": False,  # sglang/srt/arg_groups/validation_hook.py:240-246 skips disaggregation-mode decode
}
"""Whether a release checks chunked_prefill_size % page_size on a decode server too."""


def _chunk_sizes(service: DisaggSpecService, p: PoolName) -> tuple[int, ...]:
    """The pool's --chunked-prefill-size: the last one of spec.engine.extraArgs then the pool's extraArgs (argparse
    keeps the last), else every default the release may pick."""
    profile = profile_of(service)
    chunk: int | None = None
    for args in (service.spec.engine.extra_args, pool(service.spec, p).extra_args):
        for found in parse(args, profile.options, profile.aliases)[0]:
            if found.option.dest == "chunked_prefill_size" and found.values:
                try:
                    chunk = int(found.values[-1][1])
                except ValueError:
                    continue  # pool-extra-args-known reports it
    return DEFAULT_CHUNKED_PREFILL_SIZES if chunk is None else (chunk,)


def _chunk_fits_pages(service: DisaggSpecService) -> Iterator[str]:
    """Under DP attention each rank prefills chunked_prefill_size // size tokens (0.5.2 sglang/srt/server_args.py:
    641; 0.5.23 sglang/srt/arg_groups/parallel_hook.py:328-332), and the server asserts that chunk is a multiple of
    the page size (0.5.2 server_args.py:2285-2288; 0.5.23 arg_groups/validation_hook.py:240-246, prefill only)."""
    page = service.spec.engine.page_size
    if page == 1:
        return
    for p in POOLS:
        size = dp_attention_size(pool(service.spec, p))
        if size == 1 or (p == "decode" and not CHECKS_DECODE_CHUNK[service.spec.sglang.version]):
            continue
        if any(chunk > 0 and (chunk // size) % page for chunk in _chunk_sizes(service, p)):
            yield f"spec.{p}.parallelism.dataParallelAttention.size"


CHUNK_FITS_PAGES: Final = Rule(
    id="parallelism-dp-attention-chunk-pages",
    fields=(
        *_both("parallelism.dataParallelAttention.size"),
        "spec.engine.pageSize",
        *_both("extraArgs"),
        "spec.engine.extraArgs",
    ),
    message="with spec.<pool>.parallelism.dataParallelAttention each DP rank prefills --chunked-prefill-size / size "
    "tokens at a time, which SGLang requires to be a multiple of spec.engine.pageSize: set --chunked-prefill-size "
    "in spec.<pool>.extraArgs to a multiple of size x pageSize (unset, every default the release may pick, 2048 to "
    "16384, must pass), or change the size or the page size",
    check=_chunk_fits_pages,
)

PD_DISPATCH_METHOD: Final[dict[SGLangVersion, frozenset[str] | None]] = {
    "0.5.2": frozenset({"round_robin"}),
    "0.5.23": None,
}
"""The --load-balance-method values a DP-attention prefill may use, per release (None: any). 0.5.2's decode finds a
request's prefill DP rank as bootstrap_room % dp (sglang/srt/disaggregation/common/conn.py:204), which only the
round_robin dispatcher follows in PD mode (sglang/srt/managers/data_parallel_controller.py:282-291; the decode's
assertion says so, server_args.py:821-826). 0.5.23's prefill reports its rank when it dispatches otherwise
(sglang/srt/disaggregation/common/conn.py:2162-2180)."""


def _prefill_dispatch(service: DisaggSpecService) -> Iterator[str]:
    allowed = PD_DISPATCH_METHOD[service.spec.sglang.version]
    if allowed is None or dp_attention_size(service.spec.prefill) == 1:
        return
    profile = profile_of(service)
    lists = (
        ("spec.engine.extraArgs", service.spec.engine.extra_args),
        ("spec.prefill.extraArgs", service.spec.prefill.extra_args),
    )
    for path, args in lists:
        for found in parse(args, profile.options, profile.aliases)[0]:
            if found.option.dest == "load_balance_method" and found.values and found.values[-1][1] not in allowed:
                yield f"{path}[{found.index}]"


PREFILL_DP_DISPATCH: Final = Rule(
    id="parallelism-prefill-dp-dispatch",
    fields=("spec.prefill.extraArgs", "spec.engine.extraArgs", "spec.prefill.parallelism.dataParallelAttention"),
    message="on 0.5.2 a prefill with spec.prefill.parallelism.dataParallelAttention must dispatch requests to its DP "
    "ranks by --load-balance-method round_robin (the default; the decode finds the rank from the request's "
    "bootstrap room): remove --load-balance-method from spec.prefill.extraArgs and spec.engine.extraArgs",
    check=_prefill_dispatch,
)

RULES: Final[tuple[Rule, ...]] = (
    DP_DIVIDES_TP,
    EP_DIVIDES_TP,
    DEEPEP_SPANS_TP,
    DEEPEP_MODE,
    DP_LM_HEAD,
    TWO_BATCH_OVERLAP,
    EPLB_NEEDS_EP,
    DENSE_MLP_TP_SIZE,
    DP_ATTENTION_PORTS,
    CHUNK_FITS_PAGES,
    PREFILL_DP_DISPATCH,
)
"""The family, in the order the table reports it."""
