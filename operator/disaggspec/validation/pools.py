"""Pool rules: the resource name the children are named after, each pool's GPUs, and what a pool's extraArgs and env
may set."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Final

from disaggspec.api.effective import POOL_NAMES, pool
from disaggspec.api.v1alpha1 import GPU_RESOURCE, DisaggSpecService, EnvVar, PoolSpec
from disaggspec.validation._cel import quote, string_list
from disaggspec.validation._core import Cel, Rule, pool_spec_rule, profile_of

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
"""An argument that sets an owned flag, with or without `=value` (the same pattern in Python and CEL)."""


def is_owned_flag(arg: str) -> bool:
    """Whether an argument (`--flag` or `--flag=value`) is a flag the operator renders and extraArgs may not set."""
    return re.fullmatch(_OWNED_FLAG_RE, arg) is not None


# ---- the resource name -------------------------------------------------------------------------------------------


def _name_length(service: DisaggSpecService) -> Iterator[str]:
    """Children are named `<name>-prefill`, `<name>-decode`, `<name>-router`; see MAX_NAME_LENGTH for the margin."""
    if len(service.metadata.name) > MAX_NAME_LENGTH:
        yield "metadata.name"


NAME_LENGTH: Final = Rule(
    id="name-length",
    fields=("metadata.name",),
    message=f"metadata.name must be at most {MAX_NAME_LENGTH} characters: the operator names children "
    "<name>-prefill, <name>-decode and <name>-router; choose a shorter name",
    check=_name_length,
    cel=Cel("root", f"self.metadata.name.size() <= {MAX_NAME_LENGTH}"),
)


def _name_dns_label(service: DisaggSpecService) -> Iterator[str]:
    """Services are named after the resource and must be RFC 1035 labels (no dots, starting with a letter)."""
    name = service.metadata.name
    if name and re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name) is None:
        yield "metadata.name"


NAME_DNS_LABEL: Final = Rule(
    id="name-dns-label",
    fields=("metadata.name",),
    message="metadata.name must be a DNS label (lowercase letters, digits and '-', starting with a letter, no "
    "dots): the operator creates Services named after it",
    check=_name_dns_label,
    cel=Cel("root", "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')"),
)


# ---- GPUs --------------------------------------------------------------------------------------------------------


def _is_whole(value: int | str) -> bool:
    return isinstance(value, int) or re.fullmatch(r"[0-9]+", value) is not None


def pool_gpus(pool_spec: PoolSpec) -> int:
    """GPUs one pod of the pool gets: resources.limits[nvidia.com/gpu] when set to a whole number, else
    tensorParallelSize (what the renderer requests when the limit is unset)."""
    limit = pool_spec.resources.limits.get(GPU_RESOURCE)
    if limit is not None and _is_whole(limit):
        return int(limit)
    return pool_spec.tensor_parallel_size


def pool_gpus_cel(prefix: str) -> str:
    """`pool_gpus` in CEL, for the pool spec at `prefix`."""
    limits = f"{prefix}.resources.limits"
    key = quote(GPU_RESOURCE)
    has_limit = f"has({prefix}.resources) && has({limits}) && {key} in {limits}"
    whole = f"string({limits}[{key}]).matches('^[0-9]+$')"
    return f"(({has_limit} && {whole}) ? int(string({limits}[{key}])) : {prefix}.tensorParallelSize)"


def _gpu_whole(pool_spec: PoolSpec) -> bool:
    """GPUs are counted devices; a fractional or suffixed quantity cannot be a GPU count."""
    limit = pool_spec.resources.limits.get(GPU_RESOURCE)
    return limit is None or _is_whole(limit)


GPU_COUNT_WHOLE: Final = pool_spec_rule(
    "pool-gpu-count-whole",
    ("spec.prefill.resources.limits", "spec.decode.resources.limits"),
    f"resources.limits[{GPU_RESOURCE}] must be a whole number of GPUs",
    wire="resources.limits",
    holds=_gpu_whole,
    cel=f"!has(self.resources) || !has(self.resources.limits) || !({quote(GPU_RESOURCE)} in self.resources.limits) || "
    f"string(self.resources.limits[{quote(GPU_RESOURCE)}]).matches('^[0-9]+$')",
)


def _gpus_cover_tp(pool_spec: PoolSpec) -> bool:
    """With one node per pod (nnodes is operator-owned), a server starts tp_size scheduler processes, one per GPU id
    base_gpu_id + tp_rank (0.5.2 sglang/srt/entrypoints/engine.py:754-772; --tp-size at server_args.py:1124-1130;
    0.5.23 sglang/srt/arg_groups/fields/parallel.py:45), so a pod needs at least tensorParallelSize GPUs."""
    return pool_gpus(pool_spec) >= pool_spec.tensor_parallel_size


GPUS_COVER_TP: Final = pool_spec_rule(
    "pool-gpus-cover-tp",
    (
        "spec.prefill.tensorParallelSize",
        "spec.prefill.resources.limits",
        "spec.decode.tensorParallelSize",
        "spec.decode.resources.limits",
    ),
    f"a pool's resources.limits[{GPU_RESOURCE}] must be at least its tensorParallelSize (one GPU per rank): raise "
    "the GPU limit or lower tensorParallelSize",
    wire="resources.limits",
    holds=_gpus_cover_tp,
    cel=f"{pool_gpus_cel('self')} >= self.tensorParallelSize",
)


# ---- extraArgs and env -------------------------------------------------------------------------------------------


def _extra_args_not_owned(pool_spec: PoolSpec) -> bool:
    """Flags the operator renders from typed fields (0.5.2 sglang/srt/server_args.py:1535-1597 speculative,
    :2109-2156 disaggregation); a second value in extraArgs would silently win or clash on one pool only."""
    return not any(is_owned_flag(arg) for arg in pool_spec.extra_args)


EXTRA_ARGS_OWNED: Final = pool_spec_rule(
    "pool-extra-args-owned",
    ("spec.prefill.extraArgs", "spec.decode.extraArgs"),
    "extraArgs may not set flags the operator renders (--speculative-*, --disaggregation-*, --model-path, "
    "--tp-size, --host, --port, --enable-metrics, --page-size, --kv-cache-dtype, --attention-backend, ...): use the "
    "typed fields under spec instead",
    wire="extraArgs",
    holds=_extra_args_not_owned,
    cel=f"!has(self.extraArgs) || self.extraArgs.all(a, !a.matches({quote(_OWNED_FLAG_RE)}))",
)


def _unknown_flags(service: DisaggSpecService) -> Iterator[str]:
    """Every `--flag` must be an exact option of the chosen release: argparse accepts unique prefixes
    (0.5.2 sglang/srt/server_args.py:2563, 0.5.23 sglang/srt/server_args.py:679, allow_abbrev left on), so an
    abbreviation like `--speculative-alg` would slip past the owned-flag rule; and a flag of another release fails at
    start. Python-only: the flag sets are too large for CEL."""
    profile = profile_of(service)
    for p in POOL_NAMES:
        for index, arg in enumerate(pool(service.spec, p).extra_args):
            if arg.startswith("--") and not profile.knows_flag(arg.split("=", 1)[0]):
                yield f"spec.{p}.extraArgs[{index}]"


EXTRA_ARGS_KNOWN: Final = Rule(
    id="pool-extra-args-known",
    fields=("spec.prefill.extraArgs", "spec.decode.extraArgs", "spec.sglang.version"),
    message="extraArgs contains a flag spec.sglang.version does not know (abbreviations are not accepted): spell the "
    "flag in full as that SGLang release names it, or remove it",
    check=_unknown_flags,
)


def _env_not_owned(pool_spec: PoolSpec) -> bool:
    """Variables rendered from typed fields (0.5.23 sglang/srt/environ.py:756 for the sampling mask)."""
    return not any(e.name in OWNED_ENV for e in pool_spec.env)


ENV_OWNED: Final = pool_spec_rule(
    "pool-env-owned",
    ("spec.prefill.env", "spec.decode.env"),
    "env may not set " + ", ".join(OWNED_ENV) + ": use spec.engine.disaggSamplingMask and "
    "spec.transfer.rdma.gidIndex instead",
    wire="env",
    holds=_env_not_owned,
    cel=f"!has(self.env) || self.env.all(e, !(e.name in {string_list(OWNED_ENV)}))",
)


def _env_value_exclusive(service: DisaggSpecService) -> Iterator[str]:
    """As in a Pod, an EnvVar with both value and valueFrom is invalid; rejecting here names the field earlier."""
    for p in POOL_NAMES:
        for index, env in enumerate(pool(service.spec, p).env):
            if env.value is not None and env.value_from is not None:
                yield f"spec.{p}.env[{index}]"


ENV_VALUE_EXCLUSIVE: Final = Rule(
    id="env-value-exclusive",
    fields=("spec.prefill.env", "spec.decode.env"),
    message="an env entry sets either value or valueFrom, not both",
    check=_env_value_exclusive,
    cel=Cel(EnvVar, "!(has(self.value) && has(self.valueFrom))"),
)
