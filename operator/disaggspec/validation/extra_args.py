"""extraArgs rules: each pool's `extraArgs` and the shared `spec.engine.extraArgs` are read the way the release's
argparse parser reads them (`sglang/argv.py`, from the generated `_flags_<version>.OPTIONS`), and every option found
is judged by its class in `sglang/flag_policy.py`, keyed by dest so every alias and `--no-` spelling counts:

- `pool-extra-args-known`: the list parses (exact long options of the release, values of the right type and choices,
  no single-dash token, bare word, `--`, or value starting with '-');
- `pool-extra-args-owned`: no OWNED option (the operator renders it from a typed field), anywhere;
- `pool-extra-args-forbidden`: no FORBIDDEN option, anywhere;
- `pool-extra-args-must-match`: a pool's own list holds no MUST_MATCH option (the shared list may);
- `pool-extra-args-parallel-size`: a parallel size must divide the pool's tensorParallelSize;
- `pool-extra-args-port`: a port the server binds must not be the HTTP port, the bootstrap port, a multi-node pool's
  rendezvous port or another port of the pool;
- `engine-quantization-supported`: spec.engine.quantization is a method the release accepts.

Each violation carries a detail naming the option and its fix (the typed field, the reason). Only the owned rule has
a CEL form (a regex of every owned spelling, small enough for the API server's cost budget); the rest need the flag
tables and run in the webhook and reconcile.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from disaggspec.api.effective import PoolName, pool
from disaggspec.api.v1alpha1 import DisaggSpecService, DisaggSpecServiceSpec, EngineSpec, PoolSpec
from disaggspec.constants import POOLS
from disaggspec.sglang.args import DIST_INIT_PORT, SERVER_PORT
from disaggspec.sglang.argv import ArgProblem, ParsedOption, parse
from disaggspec.sglang.flag_policy import FlagClass, Policy, classify
from disaggspec.sglang.profiles import PROFILES, SGLangProfile
from disaggspec.validation._cel import quote
from disaggspec.validation._core import Cel, Finding, Rule, profile_of

ENGINE_PATH: Final = "spec.engine.extraArgs"


def _owned_spellings() -> tuple[str, ...]:
    """Every option string (any alias, any supported release) whose dest is OWNED in each release that knows it."""
    spellings: set[str] = set()
    rejected: set[str] = set()
    for profile in PROFILES.values():
        for flag in profile.flags:
            option = profile.option(flag)
            policy = classify(option.dest) if option is not None else None
            (spellings if policy is not None and policy.cls is FlagClass.OWNED else rejected).add(flag)
    return tuple(sorted(spellings - rejected))


OWNED_FLAGS: Final = _owned_spellings()
"""Every spelling of an option the operator renders (the CEL first line; the Python rule goes by dest)."""
# Option strings are `--` and [a-z0-9-]: no regex metacharacter, so they go in unescaped (a shorter pattern costs less
# in the API server's CEL estimate); the assertion keeps it that way.
assert all(re.fullmatch(r"--[a-z0-9-]+", f) for f in OWNED_FLAGS), OWNED_FLAGS
_OWNED_FLAG_RE: Final = "^(" + "|".join(OWNED_FLAGS) + ")(=.*)?$"
"""An element that sets an owned option, with or without `=value` (the same pattern in Python and CEL)."""


def is_owned_flag(arg: str) -> bool:
    """Whether an element (`--flag` or `--flag=value`) spells an option the operator renders, in any release."""
    return re.fullmatch(_OWNED_FLAG_RE, arg) is not None


@dataclass(frozen=True)
class _List:
    """One extraArgs list of the spec: where it is, and what it holds."""

    path: str
    args: Sequence[str]
    shared: bool
    """spec.engine.extraArgs (rendered on both pools) rather than a pool's own list."""


def _lists(service: DisaggSpecService) -> Iterator[_List]:
    spec = service.spec
    yield _List(ENGINE_PATH, spec.engine.extra_args, True)
    for p in POOLS:
        yield _List(f"spec.{p}.extraArgs", pool(spec, p).extra_args, False)


def _parsed(profile: SGLangProfile, args: Sequence[str]) -> tuple[list[ParsedOption], list[ArgProblem]]:
    return parse(args, profile.options, profile.aliases)


def _judged(service: DisaggSpecService) -> Iterator[tuple[_List, ParsedOption, Policy]]:
    """Every option of every list with its policy (an unclassified dest is reported by the known rule)."""
    profile = profile_of(service)
    for extra in _lists(service):
        for found in _parsed(profile, extra.args)[0]:
            policy = classify(found.option.dest)
            if policy is not None:
                yield extra, found, policy


def _at(extra: _List, index: int) -> str:
    return f"{extra.path}[{index}]"


# ---- the list parses ----------------------------------------------------------------------------------------------


def _known(service: DisaggSpecService) -> Iterator[Finding]:
    """argparse's reading of each list (sglang/argv.py); the flag tables are too large for CEL."""
    profile = profile_of(service)
    for extra in _lists(service):
        parsed, problems = _parsed(profile, extra.args)
        for problem in problems:
            yield Finding(_at(extra, problem.index), problem.problem)
        for found in parsed:
            if classify(found.option.dest) is None:  # a unit test keeps this empty for the supported releases
                yield Finding(_at(extra, found.index), f"{found.flag} is not classified for this release")


EXTRA_ARGS_KNOWN: Final = Rule(
    id="pool-extra-args-known",
    fields=("spec.prefill.extraArgs", "spec.decode.extraArgs", "spec.engine.extraArgs", "spec.sglang.version"),
    message="spec.<pool>.extraArgs and spec.engine.extraArgs must parse with the server parser of "
    "spec.sglang.version: each element an exact long option of that release (no abbreviation, no single-dash option "
    "such as -h, no bare word), --option=value, or a value the option before it takes, of that option's type and "
    "choices, one argument per element",
    check=_known,
)


# ---- the class of each option -------------------------------------------------------------------------------------


def _owned(service: DisaggSpecService) -> Iterator[Finding]:
    """A second value of a rendered option would win on one pool only (argparse keeps the last)."""
    for extra, found, policy in _judged(service):
        if policy.cls is FlagClass.OWNED:
            yield Finding(_at(extra, found.index), f"{found.flag} is rendered from {policy.field}")


_OWNED_CEL: Final = f"!has(self.extraArgs) || self.extraArgs.all(a, !a.matches({quote(_OWNED_FLAG_RE)}))"

EXTRA_ARGS_OWNED: Final = Rule(
    id="pool-extra-args-owned",
    fields=("spec.prefill.extraArgs", "spec.decode.extraArgs", "spec.engine.extraArgs"),
    message="spec.<pool>.extraArgs and spec.engine.extraArgs may not set an option the operator renders (under any "
    "of its SGLang spellings: "
    "--speculative-algorithm, --disaggregation-mode, --model-path, --tp-size, --port, --attention-backend, "
    "...): set the typed field under spec instead",
    check=_owned,
    cel=(Cel(PoolSpec, _OWNED_CEL, ".extraArgs"), Cel(EngineSpec, _OWNED_CEL, ".extraArgs")),
)


def _forbidden(service: DisaggSpecService) -> Iterator[Finding]:
    for extra, found, policy in _judged(service):
        if policy.cls is FlagClass.FORBIDDEN:
            yield Finding(_at(extra, found.index), f"{found.flag}: {policy.reason}")


EXTRA_ARGS_FORBIDDEN: Final = Rule(
    id="pool-extra-args-forbidden",
    fields=("spec.prefill.extraArgs", "spec.decode.extraArgs", "spec.engine.extraArgs"),
    message="spec.<pool>.extraArgs and spec.engine.extraArgs may not set an option that breaks the pod or the "
    "prefill/decode pairing (GPU ids and "
    "parallel sizes beyond the pod's GPUs, several nodes, a config file, per-phase attention backends, TLS, ...): "
    "remove it",
    check=_forbidden,
)


TYPED_FIELDS: Final[dict[str, Callable[[DisaggSpecServiceSpec], object]]] = {
    "spec.engine.contextLength": lambda spec: spec.engine.context_length,
    "spec.engine.quantization": lambda spec: spec.engine.quantization,
    "spec.engine.chatTemplate": lambda spec: spec.engine.chat_template,
    "spec.engine.tokenizerPath": lambda spec: spec.engine.tokenizer_path,
    "spec.speculative.tokenMap": lambda spec: spec.speculative.token_map,
}
"""The typed field of each TYPED_MUST_MATCH option (flag_policy), read to refuse setting it twice."""


def _must_match_in_pool(service: DisaggSpecService) -> Iterator[Finding]:
    """Each pool tokenizes and computes every request itself, so these must be equal on both: the shared list (once:
    not beside its typed field, whose value the later shared one would silently replace)."""
    for extra, found, policy in _judged(service):
        if policy.cls is not FlagClass.MUST_MATCH:
            continue
        at = _at(extra, found.index)
        if not extra.shared:
            where = f"{ENGINE_PATH} or the typed field {policy.field}" if policy.field else ENGINE_PATH
            yield Finding(at, f"{found.flag} must be identical on both pools: move it to {where}")
        elif policy.field is not None and TYPED_FIELDS[policy.field](service.spec) is not None:
            yield Finding(at, f"{found.flag} is set by {policy.field} too: keep one")


EXTRA_ARGS_MUST_MATCH: Final = Rule(
    id="pool-extra-args-must-match",
    fields=("spec.prefill.extraArgs", "spec.decode.extraArgs", "spec.engine.extraArgs"),
    message="spec.<pool>.extraArgs may not set an option that changes what the pool computes (tokenizer, templates, "
    "weights and their format, model overrides, quantization, precision, sampling, LoRA, the draft): prefill and "
    "decode must agree on it, so set it once, in spec.engine.extraArgs or its typed field (not both)",
    check=_must_match_in_pool,
)


# ---- values ------------------------------------------------------------------------------------------------------


def _pool_options(service: DisaggSpecService, p: PoolName) -> Iterator[tuple[_List, ParsedOption, Policy]]:
    """The options rendered on pool `p`: the shared list's, then the pool's own."""
    for extra, found, policy in _judged(service):
        if extra.shared or extra.path == f"spec.{p}.extraArgs":
            yield extra, found, policy


def _parallel_size(service: DisaggSpecService) -> Iterator[Finding]:
    """Expert, MoE data, context and shared-expert groups are carved from the tensor-parallel ranks (citations in
    flag_policy.PER_POOL_SAFE), and the pod has exactly tensorParallelSize GPUs for them."""
    reported: set[str] = set()
    for p in POOLS:
        tp = pool(service.spec, p).tensor_parallel_size
        for extra, found, policy in _pool_options(service, p):
            at = _at(extra, found.index)
            if policy.check != "divides-tp" or at in reported:
                continue
            size = int(found.values[-1][1])
            if size < 1 or tp % size:
                reported.add(at)
                yield Finding(at, f"{found.flag} {size} does not divide spec.{p}.tensorParallelSize {tp}")


EXTRA_ARGS_PARALLEL_SIZE: Final = Rule(
    id="pool-extra-args-parallel-size",
    fields=(
        "spec.prefill.extraArgs",
        "spec.decode.extraArgs",
        "spec.engine.extraArgs",
        "spec.prefill.tensorParallelSize",
        "spec.decode.tensorParallelSize",
    ),
    message="a parallel size in spec.<pool>.extraArgs or spec.engine.extraArgs (--moe-dp-size, --attn-cp-size, "
    "--dcp-size, ...) must divide spec.<pool>.tensorParallelSize: those groups are carved from the "
    "pod's tensorParallelSize GPUs",
    check=_parallel_size,
)


def _ports(service: DisaggSpecService) -> Iterator[Finding]:
    """Two servers of one pod cannot bind one port; the HTTP and bootstrap ports are rendered by the operator, and so
    is a multi-node pool's rendezvous port on its leader (DIST_INIT_PORT)."""
    reported: set[str] = set()
    bootstrap = service.spec.transfer.bootstrap_port
    fixed = {SERVER_PORT: "the HTTP port", bootstrap: "spec.transfer.bootstrapPort"}
    for p in POOLS:
        taken = dict(fixed)
        if pool(service.spec, p).nodes_per_instance > 1:
            taken.setdefault(DIST_INIT_PORT, "the multi-node rendezvous port (--dist-init-addr)")
        for extra, found, policy in _pool_options(service, p):
            if policy.check != "port":
                continue
            at = _at(extra, found.index)
            port = int(found.values[-1][1])
            clash = taken.get(port)
            if clash is None:
                taken[port] = found.flag
            elif at not in reported:
                reported.add(at)
                yield Finding(at, f"{found.flag} {port} is already {clash} on spec.{p}")


EXTRA_ARGS_PORT: Final = Rule(
    id="pool-extra-args-port",
    fields=(
        "spec.prefill.extraArgs",
        "spec.decode.extraArgs",
        "spec.engine.extraArgs",
        "spec.transfer.bootstrapPort",
        "spec.prefill.nodesPerInstance",
        "spec.decode.nodesPerInstance",
    ),
    message=f"a port in spec.<pool>.extraArgs or spec.engine.extraArgs (--nccl-port, --grpc-port, "
    f"--engine-info-bootstrap-port, ...) must differ from the server's HTTP port {SERVER_PORT}, "
    f"spec.transfer.bootstrapPort, the rendezvous port {DIST_INIT_PORT} of a pool whose nodesPerInstance > 1, and "
    "every other port of the pool: one bind fails",
    check=_ports,
)


# ---- typed must-match fields -------------------------------------------------------------------------------------


def _quantization(service: DisaggSpecService) -> Iterator[str]:
    """Each release has its own `--quantization` choices (the generated OPTIONS table)."""
    value = service.spec.engine.quantization
    option = profile_of(service).option("--quantization")
    if value is not None and option is not None and option.choices and value not in option.choices:
        yield "spec.engine.quantization"


ENGINE_QUANTIZATION_SUPPORTED: Final = Rule(
    id="engine-quantization-supported",
    fields=("spec.engine.quantization", "spec.sglang.version"),
    message="spec.engine.quantization must be a method the --quantization of spec.sglang.version accepts",
    check=_quantization,
)

RULES: Final = (
    EXTRA_ARGS_KNOWN,
    EXTRA_ARGS_OWNED,
    EXTRA_ARGS_FORBIDDEN,
    EXTRA_ARGS_MUST_MATCH,
    EXTRA_ARGS_PARALLEL_SIZE,
    EXTRA_ARGS_PORT,
    ENGINE_QUANTIZATION_SUPPORTED,
)
"""This family's rows, in table order."""
