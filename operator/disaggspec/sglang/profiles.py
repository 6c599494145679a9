"""Per-version SGLang profiles: what each supported release's server accepts, derived from its released wheel.

A profile is a set of facts read from `sglang==<version>` (`pip download --no-deps sglang==<version>`): the
speculative algorithms and transfer backends its parser accepts, which PD/speculative flags exist, the width of the
top-k metadata buffer that carries the first draft proposal from prefill to decode, and the full set of option strings
the server-args parser registers (`_flags_*.py`, used to reject unknown `extraArgs` and, later, for conformance tests).
Citations are `file:line` inside each wheel. The validation table and the renderer read profiles; nothing here imports
SGLang.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from disaggspec.sglang import _flags_0_5_2, _flags_0_5_23
from disaggspec.sglang.options import Option

SGLangVersion = Literal["0.5.2", "0.5.23"]

ROUTER_READY_HELPER: Final = "/usr/local/bin/disaggspec-router-ready"
DRAIN_WAIT_HELPER: Final = "/usr/local/bin/disaggspec-drain-wait"
"""The project's SGLang image installs images/sglang/drain_wait.py here: the pool servers' preStop hook."""
TRANSFER_DRAFT_PROBS_ENV: Final = "SGLANG_DISAGG_TRANSFER_DRAFT_PROBS"
"""Patch 0003 of the project's 0.5.23 image: an EnvBool (default off) that carries the draft proposal q to decode."""
RUST_SERVER_ENV: Final = "SGLANG_RUST_SERVER"
"""0.5.23's switch to the Rust bootstrap registry, whose /route answer drops the speculative fingerprint (patch 0002):
a speculative decode then refuses every prefill, so the operator never lets a pool enable it."""
"""Path of the readiness helper inside the project's router image (images/router/router_ready.py)."""


@dataclass(frozen=True)
class RouterProfile:
    """The PD router a supported SGLang release is served with: a pinned PyPI package and how it is started.

    Every field is a fact about that package's wheel (`pip download --no-deps <package>==<version>`); citations are
    `file:line` inside it. The operator renders `launch` + flags, the project's router image (images/router/) installs
    exactly `package==version`, and the local serving simulation runs the same wheel from a cached venv.
    """

    package: str
    """PyPI distribution name."""
    version: str
    """Pinned version of `package`."""
    launch: tuple[str, ...]
    """The argv prefix that starts the router; the rendered flags follow it."""
    image: str
    """Default router image (built from images/router/ with exactly this package and version)."""
    discovery_policies: frozenset[str]
    """`--policy` values that can select workers the router discovers itself (`--service-discovery`)."""
    default_policy: str
    """The policy rendered when spec.router.policy is unset."""
    discovery_forces_multi_model: bool
    """Whether `--service-discovery` switches the router into its multi-model mode, in which its own /readiness means
    "any one worker" and requests must name the model; the operator then gates readiness with the helper."""
    shutdown_grace_flag: str | None = None
    """The option that bounds how long the router waits for its in-flight requests after SIGTERM (the operator sets it
    to the pools' longest drainSeconds, the time the router pod has left after its preStop pause); None: the package
    has no such option."""

    @property
    def requirement(self) -> str:
        """The pip requirement string of the pinned router."""
        return f"{self.package}=={self.version}"


# sglang-router 0.1.9 (wheel built 2025-08-07) is the newest release before sglang 0.5.2 (2025-09-11); 0.2.0 followed
# on 2025-10-15. `python3 -m sglang_router.launch_router` (sglang_router/launch_router.py). Its PD /readiness answers
# 503 "no healthy prefill workers" / "no healthy decode workers" unless both roles have a healthy worker
# (sglang_router_rs: routers/pd_router.rs), so its own readiness already means "can serve PD".
ROUTER_0_1_9: Final = RouterProfile(
    package="sglang-router",
    version="0.1.9",
    launch=("python3", "-m", "sglang_router.launch_router"),
    image="disaggspec/router:sglang-router-0.1.9",
    # Measured in the serving simulation (requests through this wheel to pods it discovered): with cache_aware, for
    # either role, every PD request fails "No available servers: Failed to select prefill (decode) worker": workers
    # added by discovery never enter the cache-aware trees, which only static --prefill/--decode URLs seed.
    # random, round_robin and power_of_two serve.
    discovery_policies=frozenset({"random", "round_robin", "power_of_two"}),
    default_policy="round_robin",
    discovery_forces_multi_model=False,
)

# SGLang images after 0.5.8 no longer ship sglang_router (sgl-project/sglang#20767); the router moved to `smg`.
# `python3 -m smg launch` (smg/__main__.py -> smg/cli.py `launch`). smg/launch_router.py enables IGW (multi-model)
# mode whenever a discovery provider is selected ("IGW mode automatically enabled because service discovery is
# turned on"), where /readiness counts any healthy worker.
ROUTER_SMG_1_13_0: Final = RouterProfile(
    package="smg",
    version="1.13.0",
    launch=("python3", "-m", "smg", "launch"),
    image="disaggspec/router:smg-1.13.0",
    # Every policy the operator exposes serves discovered workers (measured in the serving simulation).
    discovery_policies=frozenset({"random", "round_robin", "cache_aware", "power_of_two"}),
    default_policy="cache_aware",
    discovery_forces_multi_model=True,
    # smg/router_args.py:1597-1602 ("Grace period in seconds to wait for in-flight requests during shutdown"),
    # default 180 (:142): shorter than a pool's default drainSeconds (600), so streams the pools are still finishing
    # would be cut when a router pod stops.
    shutdown_grace_flag="--shutdown-grace-period-secs",
)

HEALTH_CHECK_TIMEOUT_SECONDS: Final = 20
"""The default of `SGLANG_HEALTH_CHECK_TIMEOUT` in both releases (0.5.2 sglang/srt/entrypoints/http_server.py:120,
0.5.23 :218): `/health` runs a one-token generation and answers 503 when nothing came back within it."""

# 0.5.23 allocates the top-k metadata rows with a fixed width of 16 (sglang/srt/disaggregation/utils.py:468-473,
# `torch.zeros((size, 16), ...)`, and the comment at :650 "speculative_eagle_topk should not be greater than 16
# currently"), and copies topk entries into them, so a wider top-k fails at prefill.
TOPK_BUFFER_WIDTH: Final = 16


@dataclass(frozen=True)
class SGLangProfile:
    """What one SGLang release accepts; every field is a fact about that release's wheel."""

    version: SGLangVersion
    speculative_algorithms: frozenset[str]
    """Values `--speculative-algorithm` accepts (built-ins only)."""
    transfer_backends: frozenset[str]
    """Values `--disaggregation-transfer-backend` accepts."""
    kv_cache_dtypes: frozenset[str]
    """Values `--kv-cache-dtype` accepts."""
    draft_kv_cache_dtypes: frozenset[str]
    """Values `--speculative-draft-kv-cache-dtype` accepts; empty when the flag does not exist."""
    paged_topk_attention_backends: frozenset[str]
    """Attention backends that support eagle topk > 1 together with page size > 1."""
    has_decode_tp_dp: bool
    """Whether `--disaggregation-decode-tp`, `--disaggregation-decode-dp` and `--disaggregation-prefill-pp` exist."""
    has_rejection_sampling: bool
    """Whether `--speculative-use-rejection-sampling` exists."""
    has_multi_layer_eagle: bool
    """Whether `--enable-multi-layer-eagle` exists."""
    has_decode_allocation_policy: bool
    """Whether `--disaggregation-decode-allocation-policy` exists."""
    has_kv_checksum: bool
    """Whether `--disaggregation-enable-kv-checksum` exists."""
    has_disagg_sampling_mask: bool
    """Whether the `SGLANG_ENABLE_DISAGG_SAMPLING_MASK` environment switch exists."""
    per_gpu_ib_device_map: bool
    """Whether `--disaggregation-ib-device` accepts a per-GPU JSON map (otherwise one device or a comma list)."""
    topk_buffer_width: int | None
    """Width of the top-k metadata rows sent from prefill to decode, which eagle topk (x num steps) must fit; None
    when the rows are sized from topk, so there is no fixed limit."""
    flags: frozenset[str]
    """Every option string the server-args parser registers."""
    aliases: Mapping[str, str]
    """Each option string of an action with several -> its canonical option (`_flags_*.ALIASES`)."""
    options: Mapping[str, Option]
    """Each canonical option -> its dest, nargs, value type and choices (`_flags_*.OPTIONS`)."""
    router: RouterProfile
    """The PD router this release is served with."""
    ready_path: str | None
    """A cheap readiness route (no generation; 503 while starting, paused or draining after SIGTERM), or None when
    the release has only `/health`."""
    health_check_timeout_seconds: int = HEALTH_CHECK_TIMEOUT_SECONDS
    """How long `/health` waits for a one-token generation before answering 503 (`SGLANG_HEALTH_CHECK_TIMEOUT`);
    a probe of `/health` must allow longer, or the kubelet gives up before SGLang answers."""

    def knows_flag(self, flag: str) -> bool:
        """Whether `flag` (`--name` or `--name=value`) is an option of this release's server."""
        return flag.split("=", 1)[0] in self.flags

    def option(self, flag: str) -> Option | None:
        """The table row of `flag` (any of its spellings), or None when the release does not know it."""
        return self.options.get(self.aliases.get(flag, flag))


PROFILE_0_5_2: Final = SGLangProfile(
    version="0.5.2",
    # sglang/srt/server_args.py:1536-1540 (`choices=["EAGLE", "EAGLE3", "NEXTN", "STANDALONE"]`); NEXTN is rewritten
    # to EAGLE at :719-721.
    speculative_algorithms=frozenset({"EAGLE", "EAGLE3", "NEXTN", "STANDALONE"}),
    # sglang/srt/server_args.py:107 (DISAGG_TRANSFER_BACKEND_CHOICES), used at :2118-2123.
    transfer_backends=frozenset({"mooncake", "nixl", "ascend", "fake"}),
    # sglang/srt/server_args.py:1027-1032.
    kv_cache_dtypes=frozenset({"auto", "fp8_e5m2", "fp8_e4m3"}),
    draft_kv_cache_dtypes=frozenset(),
    # sglang/srt/server_args.py:784-792: topk > 1 with page_size > 1 only on flashinfer.
    paged_topk_attention_backends=frozenset({"flashinfer"}),
    # sglang/srt/server_args.py:2131-2148 (and the prefill-side defaults at :827-834).
    has_decode_tp_dp=True,
    # Neither flag is registered by the 0.5.2 parser (absent from _flags_0_5_2.FLAGS).
    has_rejection_sampling=False,
    has_multi_layer_eagle=False,
    has_decode_allocation_policy=False,
    has_kv_checksum=False,
    has_disagg_sampling_mask=False,
    # sglang/srt/server_args.py:2149-2155 documents a single device or a comma list; the string reaches the mooncake
    # transfer engine unparsed (disaggregation/mooncake/conn.py:279-283, mooncake/transfer_engine.py:24-28).
    per_gpu_ib_device_map=False,
    # Stock 0.5.2 sends no top-k rows at all (sglang/srt/disaggregation/utils.py:100-125 allocates none; decode mocks
    # them), and the project's patch sizes them max(16, speculative_eagle_topk) on both sides
    # (images/sglang/patches/0.5.2/0002-scheduler-size-hidden-row-from-draft.patch), so no fixed width applies.
    topk_buffer_width=None,
    flags=_flags_0_5_2.FLAGS,
    aliases=_flags_0_5_2.ALIASES,
    options=_flags_0_5_2.OPTIONS,
    router=ROUTER_0_1_9,
    # sglang/srt/entrypoints/http_server.py:344-345 registers /health and /health_generate only (both generate).
    ready_path=None,
)

PROFILE_0_5_23: Final = SGLangProfile(
    version="0.5.23",
    # sglang/srt/arg_groups/fields/spec.py:31-34 (free string, builtins listed in the help) and
    # sglang/srt/speculative/spec_info.py:32-47 (the enum; NEXTN is a reserved alias of EAGLE, :60-61).
    speculative_algorithms=frozenset(
        {"EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO", "FROZEN_KV_MTP"}
    ),
    # sglang/srt/arg_groups/choices.py:122-129, used at arg_groups/fields/disagg.py:65-71.
    transfer_backends=frozenset({"mooncake", "nixl", "ascend", "fake", "mori", "mooncake_tcp"}),
    # sglang/srt/arg_groups/fields/model.py:197-221.
    kv_cache_dtypes=frozenset({"auto", "bf16", "bfloat16", "fp8_e4m3", "fp8_e5m2", "fp4_mx_block16", "mxfp8", "nvfp4"}),
    # sglang/srt/arg_groups/fields/spec.py:151-164.
    draft_kv_cache_dtypes=frozenset({"auto", "bf16", "bfloat16", "fp8_e4m3", "fp8_e5m2"}),
    # sglang/srt/arg_groups/speculative_hook.py:1268-1282 (_PAGE_TREE_SPEC_BACKENDS).
    paged_topk_attention_backends=frozenset({"flashinfer", "fa3", "triton"}),
    # Removed after 0.5.9: absent from _flags_0_5_23.FLAGS and from arg_groups/fields/disagg.py.
    has_decode_tp_dp=False,
    # sglang/srt/arg_groups/fields/spec.py:117-119.
    has_rejection_sampling=True,
    # sglang/srt/arg_groups/fields/spec.py:230-236.
    has_multi_layer_eagle=True,
    # sglang/srt/arg_groups/fields/disagg.py:59-64.
    has_decode_allocation_policy=True,
    # sglang/srt/arg_groups/fields/disagg.py:72-80.
    has_kv_checksum=True,
    # sglang/srt/environ.py:756, read at disaggregation/utils.py:414.
    has_disagg_sampling_mask=True,
    # sglang/srt/arg_groups/fields/disagg.py:84-87 and arg_groups/validation_hook.py:489-499 (per-GPU JSON mapping).
    per_gpu_ib_device_map=True,
    topk_buffer_width=TOPK_BUFFER_WIDTH,
    flags=_flags_0_5_23.FLAGS,
    aliases=_flags_0_5_23.ALIASES,
    options=_flags_0_5_23.OPTIONS,
    router=ROUTER_SMG_1_13_0,
    # sglang/srt/entrypoints/http_server.py:714-718: /ready answers from tokenizer_manager.is_ready() (not paused,
    # status Up, no SIGTERM yet: managers/tokenizer_manager.py:728-734) without generating.
    ready_path="/ready",
)

PROFILES: Final[dict[SGLangVersion, SGLangProfile]] = {p.version: p for p in (PROFILE_0_5_2, PROFILE_0_5_23)}


def profile_for(version: SGLangVersion) -> SGLangProfile:
    """The profile of a supported SGLang version (the API's `spec.sglang.version` enum guarantees it exists)."""
    return PROFILES[version]
