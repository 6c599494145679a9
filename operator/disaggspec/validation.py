"""The rule table: every cross-field rule of a DisaggSpecService, with its Python check and, where CEL can say it,
the CEL expression the CRD carries.

One table serves three callers: the CRD generator (`disaggspec.api.crd`) places each rule's CEL on the schema node it
names, so `kubectl apply` rejects a bad spec with no operator running; the admission webhook and reconcile call
`validate(service)` (and `validate_update(old, new)`), which run the Python twin of every rule, including the ones CEL
cannot express. A rule's message is static, names the field(s) and the fix, and is the same string in both places.

The pools share one `model`, `sglang`, `engine` and `transfer` block, so "engine settings identical on both sides"
(model path/revision/dtype, sglang version, page size, KV cache dtype, transfer backend, bootstrap port) holds by
construction and needs no rule; only what a pool may override (its `speculative` block) is cross-checked. Likewise
the algorithm enum of the API (EAGLE, EAGLE3, NEXTN) is accepted by every supported release, which a unit test
asserts against the profiles instead of a rule that could never fire. Citations are `file:line` inside the released
wheels (`pip download --no-deps sglang==<version>`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Final, Literal

from pydantic import BaseModel

from disaggspec.api.effective import POOL_NAMES, EffectiveSpeculative, PoolName, effective_speculative, pool
from disaggspec.api.v1alpha1 import (
    GPU_RESOURCE,
    MAX_GPUS_PER_POD,
    DisaggSpecService,
    DisaggSpecServiceSpec,
    EnvVar,
    ModelSpec,
    ModelVolume,
    PoolSpec,
    RdmaSpec,
    TransferSpec,
)
from disaggspec.sglang.args import SERVER_PORT
from disaggspec.sglang.profiles import PROFILES, SGLangProfile, profile_for

MAX_NAME_LENGTH: Final = 44
"""Longest metadata.name: children are `<name>-prefill` (8 more characters), and a StatefulSet-style child adds a
`-<10-character hash>` to a label value limited to 63: 63 - 11 - 8 = 44. Deployments alone would allow 55."""

OWNED_FLAG_PREFIXES: Final = ("--speculative-", "--disaggregation-")
"""Flag families the operator renders from typed fields."""
OWNED_FLAGS: Final = (
    "--model-path",
    "--model",
    "--revision",
    "--dtype",
    "--trust-remote-code",
    "--served-model-name",
    "--tp-size",
    "--tensor-parallel-size",
    "--host",
    "--port",
    "--enable-metrics",
    "--page-size",
    "--kv-cache-dtype",
    "--attention-backend",
    "--enable-multi-layer-eagle",
    "--nnodes",
    "--node-rank",
    "--dist-init-addr",
)
"""Single flags the operator renders (typed fields, or fixed by the pod layout: one node per pod)."""
OWNED_ENV: Final = ("SGLANG_ENABLE_DISAGG_SAMPLING_MASK", "MC_GID_INDEX", "NCCL_IB_GID_INDEX")
"""Environment variables the operator sets from typed fields (engine.disaggSamplingMask, transfer.rdma.gidIndex)."""

_OWNED_FLAG_RE: Final = (
    "^("
    + "|".join(re.escape(p) + "[a-z0-9-]*" for p in OWNED_FLAG_PREFIXES)
    + "|"
    + "|".join(re.escape(f) for f in OWNED_FLAGS)
    + ")(=.*)?$"
)
HF_TOKEN_ENV: Final = "HF_TOKEN"
"""Set from spec.model.hfTokenSecretRef when that is given."""
_EAGLE_WITH_DRAFT: Final = ("EAGLE", "EAGLE3")
_REJECTION_SAMPLING_ALGORITHMS: Final = ("EAGLE", "EAGLE3", "NEXTN")
_RDMA_LESS_BACKENDS: Final = ("fake", "mooncake_tcp")
_NO_WIDTH_LIMIT: Final = 2**31
"""Stands for "no fixed top-k width" in CEL, which has no null: larger than any topk x numSteps the schema admits."""


@dataclass(frozen=True)
class Violation:
    """One failed rule: which rule, the field path it points at, and the rule's message."""

    rule: str
    field: str
    message: str


@dataclass(frozen=True)
class Cel:
    """A rule's CEL form: the expression, the schema node it sits on, and an optional fieldPath relative to it."""

    node: type[BaseModel] | Literal["root"]
    expression: str
    field_path: str | None = None


Check = Callable[[DisaggSpecService], Iterable[str]]
"""Yields the field path of every place the rule is violated (nothing when it holds)."""
TransitionCheck = Callable[[DisaggSpecService, DisaggSpecService], Iterable[str]]


@dataclass(frozen=True)
class Rule:
    """One row of the table."""

    id: str
    fields: tuple[str, ...]
    message: str
    check: Check
    cel: Cel | None = None


@dataclass(frozen=True)
class TransitionRule:
    """A rule over an update (old -> new); its CEL form is a transition rule using `oldSelf`."""

    id: str
    fields: tuple[str, ...]
    message: str
    check: TransitionCheck
    cel: Cel


# ---- CEL building blocks -----------------------------------------------------------------------------------------


def _q(value: str) -> str:
    """A CEL string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _list(values: Iterable[str]) -> str:
    return "[" + ", ".join(_q(v) for v in sorted(values)) + "]"


def _eff(p: PoolName, field: str, shared: str) -> str:
    """CEL for a pool's effective speculative field: the pool's override if set, else `shared`."""
    return f"(has(self.{p}.speculative) && has(self.{p}.speculative.{field}) ? self.{p}.speculative.{field} : {shared})"


def _eff_required(p: PoolName, field: str) -> str:
    """Effective value of a shared field that always has a value (required or defaulted)."""
    return _eff(p, field, f"self.speculative.{field}")


def _eff_optional(p: PoolName, field: str, unset: str) -> str:
    """Effective value of an optional shared field, `unset` when neither side sets it."""
    return _eff(p, field, f"(has(self.speculative.{field}) ? self.speculative.{field} : {unset})")


def _has_eff(p: PoolName, field: str) -> str:
    return f"((has(self.{p}.speculative) && has(self.{p}.speculative.{field})) || has(self.speculative.{field}))"


def _draft(p: PoolName, sub: str) -> str:
    """Effective draftModel.<sub> ('' when unset); the pool's draftModel replaces the shared one as a whole."""
    mine = f"self.{p}.speculative.draftModel"
    shared = "self.speculative.draftModel"
    return (
        f"(has(self.{p}.speculative) && has({mine}) ? (has({mine}.{sub}) ? {mine}.{sub} : '') : "
        f"(has({shared}) && has({shared}.{sub}) ? {shared}.{sub} : ''))"
    )


def _topk(p: PoolName) -> str:
    return _eff_required(p, "eagleTopk")


def _steps(p: PoolName) -> str:
    return _eff_required(p, "numSteps")


def _multi(p: PoolName) -> str:
    return _eff_required(p, "multiLayer")


def _both(template: Callable[[PoolName], str]) -> str:
    return " && ".join(f"({template(p)})" for p in POOL_NAMES)


def _by_version(holds: Callable[[SGLangProfile], str]) -> str:
    """CEL that is true when `holds(profile)` is true for the profile of spec.sglang.version."""
    parts = [f"(self.sglang.version == {_q(v)} && ({holds(p)}))" for v, p in sorted(PROFILES.items())]
    return "(" + " || ".join(parts) + ")"


def _versions_where(flag: Callable[[SGLangProfile], bool]) -> str:
    return _list(v for v, p in PROFILES.items() if flag(p))


def _gpus(prefix: str) -> str:
    """CEL for GPUs of a pod: resources.limits[nvidia.com/gpu] when it is a whole number, else tensorParallelSize."""
    limits = f"{prefix}.resources.limits"
    key = _q(GPU_RESOURCE)
    has_limit = f"has({prefix}.resources) && has({limits}) && {key} in {limits}"
    whole = f"string({limits}[{key}]).matches('^[0-9]+$')"
    return f"(({has_limit} && {whole}) ? int(string({limits}[{key}])) : {prefix}.tensorParallelSize)"


_MISSING_GPUS: Final = f"{list(range(MAX_GPUS_PER_POD))}.filter(i, !(string(i) in self.transfer.rdma.ibDevicesPerGpu))"
"""CEL: the GPU indexes 0..MAX_GPUS_PER_POD-1 absent from the per-GPU ib device map, in ascending order."""


# ---- Python helpers ----------------------------------------------------------------------------------------------


def _effs(service: DisaggSpecService) -> dict[PoolName, EffectiveSpeculative]:
    return {p: effective_speculative(service.spec, p) for p in POOL_NAMES}


def _spec_path(p: PoolName, field: str) -> str:
    """Where a pool's effective speculative field comes from: the pool's override if it sets it, else the shared."""
    return f"spec.{p}.speculative.{field}"


def _overriding_pool(service: DisaggSpecService, attr: str) -> PoolName:
    """The pool whose own speculative block sets `attr` (decode when both or neither do): where a mismatch points."""
    for p in POOL_NAMES:
        other = pool(service.spec, "decode" if p == "prefill" else "prefill").speculative
        mine = pool(service.spec, p).speculative
        if mine is not None and getattr(mine, attr) is not None and (other is None or getattr(other, attr) is None):
            return p
    return "decode"


def _mismatch(attr: str, wire: str) -> Check:
    def check(service: DisaggSpecService) -> Iterator[str]:
        effs = _effs(service)
        if getattr(effs["prefill"], attr) != getattr(effs["decode"], attr):
            yield _spec_path(_overriding_pool(service, attr), wire)

    return check


def _per_pool(holds: Callable[[DisaggSpecService, PoolName, EffectiveSpeculative], bool], wire: str) -> Check:
    def check(service: DisaggSpecService) -> Iterator[str]:
        for p, eff in _effs(service).items():
            if not holds(service, p, eff):
                yield _spec_path(p, wire)

    return check


def _profile(service: DisaggSpecService) -> SGLangProfile:
    return profile_for(service.spec.sglang.version)


def _buffer_width(service: DisaggSpecService) -> int | None:
    """The top-k row width eagle topk must fit, or None when the release sizes the rows from topk."""
    return service.spec.sglang.topk_buffer_width or _profile(service).topk_buffer_width


def _gpu_limit(pool_spec: PoolSpec) -> int | str | None:
    return pool_spec.resources.limits.get(GPU_RESOURCE)


def _is_whole(value: int | str) -> bool:
    return isinstance(value, int) or re.fullmatch(r"[0-9]+", value) is not None


def pool_gpus(pool_spec: PoolSpec) -> int:
    """GPUs one pod of the pool gets: resources.limits[nvidia.com/gpu] when set to a whole number, else
    tensorParallelSize (what the renderer requests when the limit is unset)."""
    limit = _gpu_limit(pool_spec)
    if limit is not None and _is_whole(limit):
        return int(limit)
    return pool_spec.tensor_parallel_size


def _flag_of(arg: str) -> str | None:
    return arg.split("=", 1)[0] if arg.startswith("--") else None


def is_owned_flag(arg: str) -> bool:
    """Whether an argument (`--flag` or `--flag=value`) is a flag the operator renders and extraArgs may not set."""
    return re.fullmatch(_OWNED_FLAG_RE, arg) is not None


# ---- the checks --------------------------------------------------------------------------------------------------


def _check_name_length(service: DisaggSpecService) -> Iterator[str]:
    """Children are named `<name>-prefill`, `<name>-decode`, `<name>-router`; see MAX_NAME_LENGTH for the margin."""
    if len(service.metadata.name) > MAX_NAME_LENGTH:
        yield "metadata.name"


def _check_name_dns_label(service: DisaggSpecService) -> Iterator[str]:
    """Services are named after the resource and must be RFC 1035 labels (no dots, starting with a letter)."""
    name = service.metadata.name
    if name and re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name) is None:
        yield "metadata.name"


def _check_num_steps_match(service: DisaggSpecService) -> Iterator[str]:
    """Multi-layer EAGLE sends topk x num_steps top-k entries and decode reads that many (0.5.23
    sglang/srt/speculative/eagle_disaggregation.py:58-60), so num steps must then match; without it prefill sends
    topk entries only and decode's num steps is its own business."""
    effs = _effs(service)
    if (effs["prefill"].multi_layer or effs["decode"].multi_layer) and effs["prefill"].num_steps != effs[
        "decode"
    ].num_steps:
        yield _spec_path(_overriding_pool(service, "num_steps"), "numSteps")


def _check_draft_kv_dtype_match(service: DisaggSpecService) -> Iterator[str]:
    """The draft KV dtype defaults to --kv-cache-dtype (0.5.23 sglang/srt/arg_groups/fields/spec.py:151-164), so
    unset compares as engine.kvCacheDtype; both sides size draft KV pages from it."""
    resolved = {eff.draft_kv_cache_dtype or service.spec.engine.kv_cache_dtype for eff in _effs(service).values()}
    if len(resolved) > 1:
        yield _spec_path(_overriding_pool(service, "draft_kv_cache_dtype"), "draftKvCacheDtype")


def _check_draft_model_required(service: DisaggSpecService, p: PoolName, eff: EffectiveSpeculative) -> bool:
    """EAGLE and EAGLE3 load a separate draft checkpoint; only DeepSeek-V3/R1 and GLM-4-MoE (NEXTN, MTP) default it to
    the target model (0.5.2 sglang/srt/server_args.py:743-751; 0.5.23 routes NEXTN the same way,
    sglang/srt/speculative/spec_info.py:60-61)."""
    return eff.algorithm not in _EAGLE_WITH_DRAFT or eff.draft_model is not None


def _check_backend_supported(service: DisaggSpecService) -> Iterator[str]:
    """0.5.2 sglang/srt/server_args.py:107 and :2118-2123; 0.5.23 sglang/srt/arg_groups/choices.py:122-129."""
    if service.spec.transfer.backend not in _profile(service).transfer_backends:
        yield "spec.transfer.backend"


def _check_kv_dtype_supported(service: DisaggSpecService) -> Iterator[str]:
    """0.5.2 sglang/srt/server_args.py:1027-1032; 0.5.23 sglang/srt/arg_groups/fields/model.py:197-221."""
    if service.spec.engine.kv_cache_dtype not in _profile(service).kv_cache_dtypes:
        yield "spec.engine.kvCacheDtype"


def _check_chain_draft_tokens(service: DisaggSpecService, p: PoolName, eff: EffectiveSpeculative) -> bool:
    """With topk 1 SGLang silently rewrites num_draft_tokens to num_steps + 1 (0.5.2 sglang/srt/server_args.py:775-782;
    0.5.23 sglang/srt/arg_groups/speculative_hook.py:1256-1265); rejecting keeps the spec equal to what runs."""
    return eff.eagle_topk != 1 or eff.num_draft_tokens == eff.num_steps + 1


def _check_tree_draft_tokens(service: DisaggSpecService, p: PoolName, eff: EffectiveSpeculative) -> bool:
    """With topk > 1 SGLang has no rule to derive num_draft_tokens (it auto-chooses all three only when all are unset,
    0.5.2 sglang/srt/server_args.py:754-763), so the operator requires it to know the verify width."""
    return eff.eagle_topk == 1 or eff.num_draft_tokens is not None


def _check_rejection_topk(service: DisaggSpecService, p: PoolName, eff: EffectiveSpeculative) -> bool:
    """0.5.23 sglang/srt/arg_groups/speculative_hook.py:1210-1224: rejection sampling needs topk 1 and EAGLE/EAGLE3
    (NEXTN resolves to EAGLE); every algorithm of this API qualifies, so topk is what can fail."""
    return not eff.rejection_sampling or (eff.eagle_topk == 1 and eff.algorithm in _REJECTION_SAMPLING_ALGORITHMS)


def _check_rejection_version(service: DisaggSpecService, p: PoolName, eff: EffectiveSpeculative) -> bool:
    """`--speculative-use-rejection-sampling` exists in 0.5.23 (sglang/srt/arg_groups/fields/spec.py:117-119), not in
    0.5.2 (absent from its parser, sglang/srt/server_args.py:1535-1597)."""
    return not eff.rejection_sampling or _profile(service).has_rejection_sampling


def _check_multi_layer_version(service: DisaggSpecService, p: PoolName, eff: EffectiveSpeculative) -> bool:
    """`--enable-multi-layer-eagle` exists in 0.5.23 (sglang/srt/arg_groups/fields/spec.py:230-236), not in 0.5.2."""
    return not eff.multi_layer or _profile(service).has_multi_layer_eagle


def _check_draft_kv_dtype_version(service: DisaggSpecService, p: PoolName, eff: EffectiveSpeculative) -> bool:
    """`--speculative-draft-kv-cache-dtype` exists in 0.5.23 (sglang/srt/arg_groups/fields/spec.py:151-164) only."""
    return eff.draft_kv_cache_dtype is None or eff.draft_kv_cache_dtype in _profile(service).draft_kv_cache_dtypes


def _check_topk_width(service: DisaggSpecService, p: PoolName, eff: EffectiveSpeculative) -> bool:
    """Prefill copies topk (x num_steps with multi-layer) entries into 16-wide rows (0.5.23
    sglang/srt/disaggregation/utils.py:468-473 and :650-657; eagle_disaggregation.py:58-60); more overflows at prefill.
    `spec.sglang.topkBufferWidth` models an image whose patch widens the rows. 0.5.2 has no fixed width: stock it
    sends no top-k rows, and the project's patch sizes them from topk (see profiles.PROFILE_0_5_2)."""
    width = _buffer_width(service)
    return width is None or eff.topk_entries <= width


def _check_topk_trtllm(service: DisaggSpecService, p: PoolName, eff: EffectiveSpeculative) -> bool:
    """0.5.2 sglang/srt/server_args.py:768-773; 0.5.23 sglang/srt/arg_groups/speculative_hook.py:1176-1180."""
    return eff.eagle_topk == 1 or service.spec.engine.attention_backend != "trtllm_mha"


def _check_topk_paged(service: DisaggSpecService, p: PoolName, eff: EffectiveSpeculative) -> bool:
    """topk > 1 with page_size > 1 only on flashinfer (0.5.2 sglang/srt/server_args.py:784-792) or flashinfer, fa3,
    triton (0.5.23 sglang/srt/arg_groups/speculative_hook.py:1268-1282). An unset backend is chosen by SGLang per GPU,
    so the operator cannot prove it allowed and asks for it."""
    engine = service.spec.engine
    if eff.eagle_topk == 1 or engine.page_size == 1:
        return True
    return engine.attention_backend in _profile(service).paged_topk_attention_backends


def _check_engine_options_version(service: DisaggSpecService) -> Iterator[str]:
    """0.5.23 sglang/srt/arg_groups/fields/disagg.py:59-64 (allocation policy), :72-80 (KV checksum),
    sglang/srt/environ.py:756 (sampling mask); none exists in 0.5.2."""
    engine, profile = service.spec.engine, _profile(service)
    if engine.decode_allocation_policy is not None and not profile.has_decode_allocation_policy:
        yield "spec.engine.decodeAllocationPolicy"
    if engine.kv_checksum is not None and not profile.has_kv_checksum:
        yield "spec.engine.kvChecksum"
    if engine.disagg_sampling_mask is not None and not profile.has_disagg_sampling_mask:
        yield "spec.engine.disaggSamplingMask"


def _check_ib_map_version(service: DisaggSpecService) -> Iterator[str]:
    """0.5.2 passes --disaggregation-ib-device unparsed to the mooncake engine (sglang/srt/disaggregation/mooncake/
    conn.py:279-283); 0.5.23 parses a per-GPU JSON map (sglang/srt/arg_groups/validation_hook.py:489-499)."""
    rdma = service.spec.transfer.rdma
    if rdma is not None and rdma.ib_devices_per_gpu and not _profile(service).per_gpu_ib_device_map:
        yield "spec.transfer.rdma.ibDevicesPerGpu"


def _check_ib_map_covers(service: DisaggSpecService) -> Iterator[str]:
    """Map keys are process-visible GPU ids (0.5.23 sglang/srt/arg_groups/fields/disagg.py:84-87), and a GPU missing
    from the map makes the server fail at start with "No IB devices configured for GPU n" (0.5.23
    sglang/srt/distributed/device_communicators/mooncake_transfer_engine.py:78-107), so every GPU 0..n-1 of each
    pool's pods must be listed."""
    rdma = service.spec.transfer.rdma
    if rdma is None or not rdma.ib_devices_per_gpu:
        return
    for p in POOL_NAMES:
        if any(str(i) not in rdma.ib_devices_per_gpu for i in range(pool_gpus(pool(service.spec, p)))):
            yield "spec.transfer.rdma.ibDevicesPerGpu"
            return


def _check_ib_exclusive(service: DisaggSpecService) -> Iterator[str]:
    """--disaggregation-ib-device takes one form: a comma list or a per-GPU map (0.5.23 fields/disagg.py:84-87)."""
    rdma = service.spec.transfer.rdma
    if rdma is not None and rdma.ib_devices and rdma.ib_devices_per_gpu:
        yield "spec.transfer.rdma"


def _check_rdma_backend(service: DisaggSpecService) -> Iterator[str]:
    """RDMA devices are used by mooncake, nixl, mori and ascend; `fake` moves nothing and `mooncake_tcp` is TCP
    (0.5.23 sglang/srt/arg_groups/choices.py:122-129)."""
    if service.spec.transfer.rdma is not None and service.spec.transfer.backend in _RDMA_LESS_BACKENDS:
        yield "spec.transfer.backend"


def _pool_checks(holds: Callable[[PoolSpec], bool], wire: str) -> Check:
    def check(service: DisaggSpecService) -> Iterator[str]:
        for p in POOL_NAMES:
            if not holds(pool(service.spec, p)):
                yield f"spec.{p}.{wire}"

    return check


def _gpu_whole(pool_spec: PoolSpec) -> bool:
    """GPUs are counted devices; a fractional or suffixed quantity cannot be a GPU count."""
    limit = _gpu_limit(pool_spec)
    return limit is None or _is_whole(limit)


def _gpus_cover_tp(pool_spec: PoolSpec) -> bool:
    """With one node per pod (nnodes is operator-owned), a server starts tp_size scheduler processes, one per GPU id
    base_gpu_id + tp_rank (0.5.2 sglang/srt/entrypoints/engine.py:754-772; --tp-size at server_args.py:1124-1130;
    0.5.23 sglang/srt/arg_groups/fields/parallel.py:45), so a pod needs at least tensorParallelSize GPUs."""
    return pool_gpus(pool_spec) >= pool_spec.tensor_parallel_size


def _extra_args_not_owned(pool_spec: PoolSpec) -> bool:
    """Flags the operator renders from typed fields (0.5.2 sglang/srt/server_args.py:1535-1597 speculative,
    :2109-2156 disaggregation); a second value in extraArgs would silently win or clash on one pool only."""
    return not any(is_owned_flag(arg) for arg in pool_spec.extra_args)


def _env_not_owned(pool_spec: PoolSpec) -> bool:
    """Variables rendered from typed fields (0.5.23 sglang/srt/environ.py:756 for the sampling mask)."""
    return not any(e.name in OWNED_ENV for e in pool_spec.env)


def _check_unknown_flags(service: DisaggSpecService) -> Iterator[str]:
    """Every `--flag` must be an exact option of the chosen release: argparse accepts unique prefixes
    (0.5.2 sglang/srt/server_args.py:2563, 0.5.23 sglang/srt/server_args.py:679, allow_abbrev left on), so an
    abbreviation like `--speculative-alg` would slip past the owned-flag rule; and a flag of another release fails at
    start. Python-only: the flag sets are too large for CEL."""
    profile = _profile(service)
    for p in POOL_NAMES:
        for index, arg in enumerate(pool(service.spec, p).extra_args):
            flag = _flag_of(arg)
            if flag is not None and not profile.knows_flag(flag):
                yield f"spec.{p}.extraArgs[{index}]"


def _check_bootstrap_port_free(service: DisaggSpecService) -> Iterator[str]:
    """The prefill server binds its HTTP port and, separately, the bootstrap server on --disaggregation-bootstrap-port
    (0.5.2 sglang/srt/disaggregation/common/conn.py:51 reads the port for the bootstrap server); one port cannot be
    both."""
    if service.spec.transfer.bootstrap_port == SERVER_PORT:
        yield "spec.transfer.bootstrapPort"


def _check_hf_token_env(service: DisaggSpecService) -> Iterator[str]:
    """With model.hfTokenSecretRef the operator sets HF_TOKEN itself; a second HF_TOKEN in env would be ambiguous."""
    if service.spec.model.hf_token_secret_ref is None:
        return
    for p in POOL_NAMES:
        if any(env.name == HF_TOKEN_ENV for env in pool(service.spec, p).env):
            yield f"spec.{p}.env"


def _check_model_local_path(service: DisaggSpecService) -> Iterator[str]:
    """An absolute model path is read from the pod's filesystem; without a volume it does not exist there."""
    if service.spec.model.path.startswith("/") and service.spec.model.volume is None:
        yield "spec.model.volume"


def _check_volume_source(service: DisaggSpecService) -> Iterator[str]:
    """A Pod volume has exactly one source; the model volume becomes one."""
    volume = service.spec.model.volume
    if volume is not None and (volume.host_path is None) == (volume.persistent_volume_claim is None):
        yield "spec.model.volume"


def _check_env_value(service: DisaggSpecService) -> Iterator[str]:
    """As in a Pod, an EnvVar with both value and valueFrom is invalid; rejecting here names the field earlier."""
    for p in POOL_NAMES:
        for index, env in enumerate(pool(service.spec, p).env):
            if env.value is not None and env.value_from is not None:
                yield f"spec.{p}.env[{index}]"


# ---- the table ---------------------------------------------------------------------------------------------------

_SPEC = DisaggSpecServiceSpec
_PREFILL_DECODE = "spec.speculative, spec.prefill.speculative and spec.decode.speculative"

RULES: Final[tuple[Rule, ...]] = (
    Rule(
        id="name-length",
        fields=("metadata.name",),
        message=f"metadata.name must be at most {MAX_NAME_LENGTH} characters: the operator names children "
        "<name>-prefill, <name>-decode and <name>-router; choose a shorter name",
        check=_check_name_length,
        cel=Cel("root", f"self.metadata.name.size() <= {MAX_NAME_LENGTH}"),
    ),
    Rule(
        id="name-dns-label",
        fields=("metadata.name",),
        message="metadata.name must be a DNS label (lowercase letters, digits and '-', starting with a letter, no "
        "dots): the operator creates Services named after it",
        check=_check_name_dns_label,
        cel=Cel("root", "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')"),
    ),
    Rule(
        id="spec-algorithm-match",
        fields=(
            "spec.speculative.algorithm",
            "spec.prefill.speculative.algorithm",
            "spec.decode.speculative.algorithm",
        ),
        message="prefill and decode must run the same speculative algorithm: remove the algorithm override from "
        "spec.prefill.speculative or spec.decode.speculative, or make both equal",
        check=_mismatch("algorithm", "algorithm"),
        cel=Cel(_SPEC, f"{_eff_required('prefill', 'algorithm')} == {_eff_required('decode', 'algorithm')}"),
    ),
    Rule(
        id="spec-draft-model-match",
        fields=(
            "spec.speculative.draftModel",
            "spec.prefill.speculative.draftModel",
            "spec.decode.speculative.draftModel",
        ),
        message="prefill and decode must load the same draft model (path and revision): remove the draftModel "
        "override from spec.prefill.speculative or spec.decode.speculative, or make both equal",
        check=_mismatch("draft_model", "draftModel"),
        cel=Cel(
            _SPEC,
            f"{_draft('prefill', 'path')} == {_draft('decode', 'path')} && "
            f"{_draft('prefill', 'revision')} == {_draft('decode', 'revision')}",
        ),
    ),
    Rule(
        id="spec-topk-match",
        fields=(
            "spec.speculative.eagleTopk",
            "spec.prefill.speculative.eagleTopk",
            "spec.decode.speculative.eagleTopk",
        ),
        message="prefill and decode must use the same eagleTopk (decode reads the top-k rows prefill sends): remove "
        "the eagleTopk override from spec.prefill.speculative or spec.decode.speculative, or make both equal",
        check=_mismatch("eagle_topk", "eagleTopk"),
        cel=Cel(_SPEC, f"{_topk('prefill')} == {_topk('decode')}"),
    ),
    Rule(
        id="spec-multi-layer-match",
        fields=(
            "spec.speculative.multiLayer",
            "spec.prefill.speculative.multiLayer",
            "spec.decode.speculative.multiLayer",
        ),
        message="prefill and decode must agree on multiLayer (it changes how many top-k entries prefill sends): "
        "remove the multiLayer override from spec.prefill.speculative or spec.decode.speculative",
        check=_mismatch("multi_layer", "multiLayer"),
        cel=Cel(_SPEC, f"{_multi('prefill')} == {_multi('decode')}"),
    ),
    Rule(
        id="spec-num-steps-match",
        fields=("spec.speculative.numSteps", "spec.prefill.speculative.numSteps", "spec.decode.speculative.numSteps"),
        message="with multiLayer, prefill and decode must use the same numSteps (prefill sends eagleTopk x numSteps "
        "top-k entries): remove the numSteps override from spec.prefill.speculative or spec.decode.speculative",
        check=_check_num_steps_match,
        cel=Cel(_SPEC, f"!({_multi('prefill')} || {_multi('decode')}) || {_steps('prefill')} == {_steps('decode')}"),
    ),
    Rule(
        id="spec-rejection-sampling-match",
        fields=(
            "spec.speculative.rejectionSampling",
            "spec.prefill.speculative.rejectionSampling",
            "spec.decode.speculative.rejectionSampling",
        ),
        message="prefill and decode must agree on rejectionSampling: remove the rejectionSampling override from "
        "spec.prefill.speculative or spec.decode.speculative",
        check=_mismatch("rejection_sampling", "rejectionSampling"),
        cel=Cel(
            _SPEC,
            f"{_eff_required('prefill', 'rejectionSampling')} == {_eff_required('decode', 'rejectionSampling')}",
        ),
    ),
    Rule(
        id="spec-draft-kv-dtype-match",
        fields=(
            "spec.speculative.draftKvCacheDtype",
            "spec.prefill.speculative.draftKvCacheDtype",
            "spec.decode.speculative.draftKvCacheDtype",
        ),
        message="prefill and decode must use the same draftKvCacheDtype: remove the draftKvCacheDtype override from "
        "spec.prefill.speculative or spec.decode.speculative, or make both equal",
        check=_check_draft_kv_dtype_match,
        cel=Cel(
            _SPEC,
            f"{_eff_optional('prefill', 'draftKvCacheDtype', 'self.engine.kvCacheDtype')} == "
            f"{_eff_optional('decode', 'draftKvCacheDtype', 'self.engine.kvCacheDtype')}",
        ),
    ),
    Rule(
        id="spec-draft-model-required",
        fields=("spec.speculative.algorithm", "spec.speculative.draftModel"),
        message="algorithm EAGLE and EAGLE3 need a draft model: set spec.speculative.draftModel.path (or use NEXTN "
        "for models with built-in MTP layers)",
        check=_per_pool(_check_draft_model_required, "draftModel"),
        cel=Cel(
            _SPEC,
            _both(
                lambda p: (
                    f"!({_eff_required(p, 'algorithm')} in {_list(_EAGLE_WITH_DRAFT)}) || {_has_eff(p, 'draftModel')}"
                )
            ),
        ),
    ),
    Rule(
        id="transfer-backend-supported",
        fields=("spec.transfer.backend", "spec.sglang.version"),
        message="spec.transfer.backend is not supported by spec.sglang.version (0.5.2: mooncake, nixl, ascend, fake; "
        "0.5.23 adds mori and mooncake_tcp): pick a supported backend or another sglang version",
        check=_check_backend_supported,
        cel=Cel(_SPEC, _by_version(lambda prof: f"self.transfer.backend in {_list(prof.transfer_backends)}")),
    ),
    Rule(
        id="engine-kv-cache-dtype-supported",
        fields=("spec.engine.kvCacheDtype", "spec.sglang.version"),
        message="spec.engine.kvCacheDtype is not supported by spec.sglang.version (0.5.2: auto, fp8_e4m3, fp8_e5m2): "
        "pick a supported dtype or another sglang version",
        check=_check_kv_dtype_supported,
        cel=Cel(_SPEC, _by_version(lambda prof: f"self.engine.kvCacheDtype in {_list(prof.kv_cache_dtypes)}")),
    ),
    Rule(
        id="spec-num-draft-tokens-chain",
        fields=("spec.speculative.eagleTopk", "spec.speculative.numDraftTokens", "spec.speculative.numSteps"),
        message="with eagleTopk 1, numDraftTokens must equal numSteps + 1 (SGLang would silently change it): set "
        "spec.speculative.numDraftTokens to numSteps + 1 or leave it unset",
        check=_per_pool(_check_chain_draft_tokens, "numDraftTokens"),
        cel=Cel(
            _SPEC,
            _both(
                lambda p: (
                    f"{_topk(p)} != 1 || !{_has_eff(p, 'numDraftTokens')} || "
                    f"{_eff_optional(p, 'numDraftTokens', '0')} == {_steps(p)} + 1"
                )
            ),
        ),
    ),
    Rule(
        id="spec-num-draft-tokens-required",
        fields=("spec.speculative.eagleTopk", "spec.speculative.numDraftTokens"),
        message="with eagleTopk > 1, spec.speculative.numDraftTokens is required: set the number of tree tokens to "
        "verify per step",
        check=_per_pool(_check_tree_draft_tokens, "numDraftTokens"),
        cel=Cel(_SPEC, _both(lambda p: f"{_topk(p)} == 1 || {_has_eff(p, 'numDraftTokens')}")),
    ),
    Rule(
        id="spec-rejection-sampling-topk",
        fields=("spec.speculative.rejectionSampling", "spec.speculative.eagleTopk"),
        message="rejectionSampling requires eagleTopk 1 and algorithm EAGLE, EAGLE3 or NEXTN: set "
        "spec.speculative.eagleTopk to 1 or turn rejectionSampling off",
        check=_per_pool(_check_rejection_topk, "rejectionSampling"),
        cel=Cel(
            _SPEC,
            _both(
                lambda p: (
                    f"!{_eff_required(p, 'rejectionSampling')} || ({_topk(p)} == 1 && "
                    f"{_eff_required(p, 'algorithm')} in {_list(_REJECTION_SAMPLING_ALGORITHMS)})"
                )
            ),
        ),
    ),
    Rule(
        id="spec-rejection-sampling-version",
        fields=("spec.speculative.rejectionSampling", "spec.sglang.version"),
        message="rejectionSampling needs spec.sglang.version 0.5.23 (0.5.2 has no "
        "--speculative-use-rejection-sampling): turn it off or use 0.5.23",
        check=_per_pool(_check_rejection_version, "rejectionSampling"),
        cel=Cel(
            _SPEC,
            _both(
                lambda p: (
                    f"!{_eff_required(p, 'rejectionSampling')} || self.sglang.version in "
                    f"{_versions_where(lambda prof: prof.has_rejection_sampling)}"
                )
            ),
        ),
    ),
    Rule(
        id="spec-multi-layer-version",
        fields=("spec.speculative.multiLayer", "spec.sglang.version"),
        message="multiLayer needs spec.sglang.version 0.5.23 (0.5.2 has no --enable-multi-layer-eagle): turn it off "
        "or use 0.5.23",
        check=_per_pool(_check_multi_layer_version, "multiLayer"),
        cel=Cel(
            _SPEC,
            _both(
                lambda p: (
                    f"!{_multi(p)} || self.sglang.version in {_versions_where(lambda prof: prof.has_multi_layer_eagle)}"
                )
            ),
        ),
    ),
    Rule(
        id="spec-draft-kv-dtype-version",
        fields=("spec.speculative.draftKvCacheDtype", "spec.sglang.version"),
        message="draftKvCacheDtype needs spec.sglang.version 0.5.23 (0.5.2 has no --speculative-draft-kv-cache-dtype): "
        "remove it or use 0.5.23",
        check=_per_pool(_check_draft_kv_dtype_version, "draftKvCacheDtype"),
        cel=Cel(
            _SPEC,
            _both(
                lambda p: (
                    f"!{_has_eff(p, 'draftKvCacheDtype')} || self.sglang.version in "
                    f"{_versions_where(lambda prof: bool(prof.draft_kv_cache_dtypes))}"
                )
            ),
        ),
    ),
    Rule(
        id="spec-topk-buffer-width",
        fields=(
            "spec.speculative.eagleTopk",
            "spec.speculative.numSteps",
            "spec.speculative.multiLayer",
            "spec.sglang.topkBufferWidth",
        ),
        message="eagleTopk (times numSteps with multiLayer) must fit the top-k buffer prefill sends to decode (16 "
        "wide in SGLang 0.5.23): lower spec.speculative.eagleTopk or numSteps, or set spec.sglang.topkBufferWidth if "
        "your image's patch widens the buffer",
        check=_per_pool(_check_topk_width, "eagleTopk"),
        cel=Cel(
            _SPEC,
            _both(
                lambda p: _by_version(
                    lambda prof: (
                        f"({_multi(p)} ? {_topk(p)} * {_steps(p)} : {_topk(p)}) <= "
                        f"(has(self.sglang.topkBufferWidth) ? self.sglang.topkBufferWidth : "
                        f"{prof.topk_buffer_width if prof.topk_buffer_width is not None else _NO_WIDTH_LIMIT})"
                    )
                )
            ),
        ),
    ),
    Rule(
        id="engine-topk-trtllm-mha",
        fields=("spec.speculative.eagleTopk", "spec.engine.attentionBackend"),
        message="the trtllm_mha attention backend only supports eagleTopk 1: set spec.speculative.eagleTopk to 1 or "
        "choose another spec.engine.attentionBackend",
        check=_per_pool(_check_topk_trtllm, "eagleTopk"),
        cel=Cel(
            _SPEC,
            _both(
                lambda p: (
                    f"{_topk(p)} == 1 || !has(self.engine.attentionBackend) || "
                    "self.engine.attentionBackend != 'trtllm_mha'"
                )
            ),
        ),
    ),
    Rule(
        id="engine-topk-paged-attention",
        fields=("spec.speculative.eagleTopk", "spec.engine.pageSize", "spec.engine.attentionBackend"),
        message="eagleTopk > 1 with engine.pageSize > 1 needs spec.engine.attentionBackend set to a backend that "
        "supports it (0.5.2: flashinfer; 0.5.23: flashinfer, fa3, triton), or pageSize 1",
        check=_per_pool(_check_topk_paged, "eagleTopk"),
        cel=Cel(
            _SPEC,
            _both(
                lambda p: (
                    f"{_topk(p)} == 1 || self.engine.pageSize == 1 || (has(self.engine.attentionBackend) && "
                    + _by_version(
                        lambda prof: f"self.engine.attentionBackend in {_list(prof.paged_topk_attention_backends)}"
                    )
                    + ")"
                )
            ),
        ),
    ),
    Rule(
        id="engine-option-version",
        fields=(
            "spec.engine.decodeAllocationPolicy",
            "spec.engine.kvChecksum",
            "spec.engine.disaggSamplingMask",
            "spec.sglang.version",
        ),
        message="spec.engine.decodeAllocationPolicy, kvChecksum and disaggSamplingMask need spec.sglang.version "
        "0.5.23: remove them or use 0.5.23",
        check=_check_engine_options_version,
        cel=Cel(
            _SPEC,
            "!(has(self.engine.decodeAllocationPolicy) || has(self.engine.kvChecksum) || "
            "has(self.engine.disaggSamplingMask)) || self.sglang.version in "
            + _versions_where(
                lambda p: p.has_decode_allocation_policy and p.has_kv_checksum and p.has_disagg_sampling_mask
            ),
        ),
    ),
    Rule(
        id="transfer-rdma-ib-map-version",
        fields=("spec.transfer.rdma.ibDevicesPerGpu", "spec.sglang.version"),
        message="spec.transfer.rdma.ibDevicesPerGpu needs spec.sglang.version 0.5.23 (0.5.2 takes one device or a "
        "comma list): use spec.transfer.rdma.ibDevices or 0.5.23",
        check=_check_ib_map_version,
        cel=Cel(
            _SPEC,
            "!has(self.transfer.rdma) || !has(self.transfer.rdma.ibDevicesPerGpu) || "
            "size(self.transfer.rdma.ibDevicesPerGpu) == 0 || self.sglang.version in "
            + _versions_where(lambda p: p.per_gpu_ib_device_map),
        ),
    ),
    Rule(
        id="transfer-rdma-ib-map-covers-gpus",
        fields=(
            "spec.transfer.rdma.ibDevicesPerGpu",
            "spec.prefill.tensorParallelSize",
            "spec.decode.tensorParallelSize",
            "spec.prefill.resources.limits",
            "spec.decode.resources.limits",
        ),
        message="spec.transfer.rdma.ibDevicesPerGpu must list every GPU index of both pools' pods ('0' up to GPUs "
        "per pod - 1): add the missing GPU indexes",
        check=_check_ib_map_covers,
        cel=Cel(
            _SPEC,
            "!has(self.transfer.rdma) || !has(self.transfer.rdma.ibDevicesPerGpu) || "
            "size(self.transfer.rdma.ibDevicesPerGpu) == 0 || "
            # The smallest GPU index missing from the map must be at least the pool's GPU count; filtering once and
            # comparing outside the loop keeps the CEL cost estimate within budget (CRD CEL has no cel.bind).
            + _both(lambda p: f"size({_MISSING_GPUS}) == 0 || {_MISSING_GPUS}[0] >= {_gpus('self.' + p)}"),
        ),
    ),
    Rule(
        id="transfer-rdma-ib-devices-exclusive",
        fields=("spec.transfer.rdma.ibDevices", "spec.transfer.rdma.ibDevicesPerGpu"),
        message="set either spec.transfer.rdma.ibDevices or spec.transfer.rdma.ibDevicesPerGpu, not both",
        check=_check_ib_exclusive,
        cel=Cel(
            RdmaSpec,
            "!(has(self.ibDevices) && size(self.ibDevices) > 0 && has(self.ibDevicesPerGpu) && "
            "size(self.ibDevicesPerGpu) > 0)",
        ),
    ),
    Rule(
        id="transfer-rdma-backend",
        fields=("spec.transfer.rdma", "spec.transfer.backend"),
        message="spec.transfer.rdma needs an RDMA transfer backend: set spec.transfer.backend to mooncake, nixl or "
        "mori, or remove spec.transfer.rdma",
        check=_check_rdma_backend,
        cel=Cel(_SPEC, f"!has(self.transfer.rdma) || !(self.transfer.backend in {_list(_RDMA_LESS_BACKENDS)})"),
    ),
    Rule(
        id="transfer-bootstrap-port-free",
        fields=("spec.transfer.bootstrapPort",),
        message=f"spec.transfer.bootstrapPort must differ from the server's HTTP port {SERVER_PORT}: pick another "
        "bootstrap port (the default is 8998)",
        check=_check_bootstrap_port_free,
        cel=Cel(TransferSpec, f"self.bootstrapPort != {SERVER_PORT}", ".bootstrapPort"),
    ),
    Rule(
        id="pool-gpu-count-whole",
        fields=("spec.prefill.resources.limits", "spec.decode.resources.limits"),
        message=f"resources.limits[{GPU_RESOURCE}] must be a whole number of GPUs",
        check=_pool_checks(_gpu_whole, "resources.limits"),
        cel=Cel(
            PoolSpec,
            f"!has(self.resources) || !has(self.resources.limits) || !({_q(GPU_RESOURCE)} in self.resources.limits) || "
            f"string(self.resources.limits[{_q(GPU_RESOURCE)}]).matches('^[0-9]+$')",
        ),
    ),
    Rule(
        id="pool-gpus-cover-tp",
        fields=(
            "spec.prefill.tensorParallelSize",
            "spec.prefill.resources.limits",
            "spec.decode.tensorParallelSize",
            "spec.decode.resources.limits",
        ),
        message=f"a pool's resources.limits[{GPU_RESOURCE}] must be at least its tensorParallelSize (one GPU per "
        "rank): raise the GPU limit or lower tensorParallelSize",
        check=_pool_checks(_gpus_cover_tp, "resources.limits"),
        cel=Cel(PoolSpec, f"{_gpus('self')} >= self.tensorParallelSize"),
    ),
    Rule(
        id="pool-extra-args-owned",
        fields=("spec.prefill.extraArgs", "spec.decode.extraArgs"),
        message="extraArgs may not set flags the operator renders (--speculative-*, --disaggregation-*, --model-path, "
        "--tp-size, --host, --port, --enable-metrics, --page-size, --kv-cache-dtype, --attention-backend, ...): use "
        "the typed fields under spec instead",
        check=_pool_checks(_extra_args_not_owned, "extraArgs"),
        cel=Cel(PoolSpec, f"!has(self.extraArgs) || self.extraArgs.all(a, !a.matches({_q(_OWNED_FLAG_RE)}))"),
    ),
    Rule(
        id="pool-extra-args-known",
        fields=("spec.prefill.extraArgs", "spec.decode.extraArgs", "spec.sglang.version"),
        message="extraArgs contains a flag spec.sglang.version does not know (abbreviations are not accepted): spell "
        "the flag in full as that SGLang release names it, or remove it",
        check=_check_unknown_flags,
    ),
    Rule(
        id="pool-env-owned",
        fields=("spec.prefill.env", "spec.decode.env"),
        message="env may not set " + ", ".join(OWNED_ENV) + ": use spec.engine.disaggSamplingMask and "
        "spec.transfer.rdma.gidIndex instead",
        check=_pool_checks(_env_not_owned, "env"),
        cel=Cel(PoolSpec, f"!has(self.env) || self.env.all(e, !(e.name in {_list(OWNED_ENV)}))"),
    ),
    Rule(
        id="model-hf-token-env",
        fields=("spec.model.hfTokenSecretRef", "spec.prefill.env", "spec.decode.env"),
        message="spec.model.hfTokenSecretRef already sets HF_TOKEN: remove HF_TOKEN from the pools' env, or remove "
        "hfTokenSecretRef",
        check=_check_hf_token_env,
        cel=Cel(
            _SPEC,
            "!has(self.model.hfTokenSecretRef) || "
            + _both(lambda p: f"!has(self.{p}.env) || self.{p}.env.all(e, e.name != {_q(HF_TOKEN_ENV)})"),
        ),
    ),
    Rule(
        id="env-value-exclusive",
        fields=("spec.prefill.env", "spec.decode.env"),
        message="an env entry sets either value or valueFrom, not both",
        check=_check_env_value,
        cel=Cel(EnvVar, "!(has(self.value) && has(self.valueFrom))"),
    ),
    Rule(
        id="model-volume-one-source",
        fields=("spec.model.volume.hostPath", "spec.model.volume.persistentVolumeClaim"),
        message="spec.model.volume needs exactly one of hostPath or persistentVolumeClaim",
        check=_check_volume_source,
        cel=Cel(ModelVolume, "has(self.hostPath) != has(self.persistentVolumeClaim)"),
    ),
    Rule(
        id="model-local-path-volume",
        fields=("spec.model.path", "spec.model.volume"),
        message="an absolute spec.model.path is read from a volume: set spec.model.volume, or use a Hugging Face "
        "repo id",
        check=_check_model_local_path,
        cel=Cel(ModelSpec, "!self.path.startsWith('/') || has(self.volume)"),
    ),
)


def _unchanged(attr_path: tuple[str, ...], wire: str) -> TransitionCheck:
    def check(old: DisaggSpecService, new: DisaggSpecService) -> Iterator[str]:
        a: object = old.spec
        b: object = new.spec
        for attr in attr_path:
            a, b = getattr(a, attr), getattr(b, attr)
        if a != b:
            yield wire

    return check


def _effective_algorithm_unchanged(old: DisaggSpecService, new: DisaggSpecService) -> Iterator[str]:
    """Each pool's effective algorithm (override over shared) is the same before and after the update."""
    for p in POOL_NAMES:
        if effective_speculative(old.spec, p).algorithm != effective_speculative(new.spec, p).algorithm:
            yield "spec.speculative.algorithm"
            return


TRANSITION_RULES: Final[tuple[TransitionRule, ...]] = (
    TransitionRule(
        id="immutable-speculative-algorithm",
        fields=(
            "spec.speculative.algorithm",
            "spec.prefill.speculative.algorithm",
            "spec.decode.speculative.algorithm",
        ),
        message="the speculative algorithm (spec.speculative.algorithm and any pool override) is immutable: during a "
        "rollout old and new pods would exchange hidden states of different widths; create a new DisaggSpecService "
        "instead",
        check=_effective_algorithm_unchanged,
        # On the spec node and over the effective values, so moving the change into both pools' overrides (which
        # a transition rule on spec.speculative alone would not see) is caught too.
        cel=Cel(
            _SPEC,
            _both(
                lambda p: (
                    f"{_eff_required(p, 'algorithm')} == " + _eff_required(p, "algorithm").replace("self.", "oldSelf.")
                )
            ),
            ".speculative.algorithm",
        ),
    ),
    TransitionRule(
        id="immutable-transfer-backend",
        fields=("spec.transfer.backend",),
        message="spec.transfer.backend is immutable: during a rollout old and new pods could not reach each other; "
        "create a new DisaggSpecService instead",
        check=_unchanged(("transfer", "backend"), "spec.transfer.backend"),
        cel=Cel(TransferSpec, "self.backend == oldSelf.backend", ".backend"),
    ),
)

ALL_RULES: Final[tuple[Rule | TransitionRule, ...]] = (*RULES, *TRANSITION_RULES)
"""Both tables in order: what the CRD generator places and the CEL-twin test compares."""
RULES_BY_ID: Final[dict[str, Rule | TransitionRule]] = {rule.id: rule for rule in ALL_RULES}


def validate(service: DisaggSpecService) -> list[Violation]:
    """Every violation of the rule table, in table order (empty when the service is consistent)."""
    return [Violation(rule.id, path, rule.message) for rule in RULES for path in rule.check(service)]


def validate_update(old: DisaggSpecService, new: DisaggSpecService) -> list[Violation]:
    """`validate(new)` plus the update-only rules (immutable fields) comparing `old` to `new`."""
    changes = [Violation(rule.id, path, rule.message) for rule in TRANSITION_RULES for path in rule.check(old, new)]
    return changes + validate(new)
