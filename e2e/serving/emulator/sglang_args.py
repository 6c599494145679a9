"""Parse an SGLang server command line the way the pinned release's argparse parser does, for the flags we need.

The option inventory is the generated one (`disaggspec.sglang._flags_<version>`: FLAGS, ALIASES, DESTS, read from the
real parser of each wheel), so an option the release does not register is rejected exactly like argparse does:
`unrecognized arguments: ...` (exit 2), including the following values argparse cannot place. Like argparse
(`allow_abbrev=True`, the default both releases use: sglang/srt/server_args.py:2563 in 0.5.2, :679 in 0.5.23), a
unique prefix of an option is accepted and an ambiguous one is an error. Flags whose arity the emulator knows are
parsed exactly (`BOOL_FLAGS` take no value, the rest of `TYPED` one); any other registered option takes the values
that follow it (argparse would also take them, or reject them as unrecognized: the emulator accepts them then).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Final

from disaggspec.sglang import _flags_0_5_2, _flags_0_5_23
from e2e.serving.emulator.facts import Version, facts_for

_TABLES: Final[dict[str, ModuleType]] = {"0.5.2": _flags_0_5_2, "0.5.23": _flags_0_5_23}

# store_true options (argparse `_StoreTrueAction`, nargs=0) in both releases; tests/test_emulator_args.py checks this
# against the real parser of each wheel.
BOOL_FLAGS: Final = frozenset(
    {
        "--enable-dp-attention",
        "--enable-metrics",
        "--skip-server-warmup",
        "--trust-remote-code",
        "--enable-cache-report",
        "--disaggregation-enable-kv-checksum",  # 0.5.23 only
        "--speculative-use-rejection-sampling",  # 0.5.23 only
        "--enable-multi-layer-eagle",  # 0.5.23 only
        "--prefill-round-robin-balance",  # 0.5.2 only (server_args.py:1406-1410)
    }
)

# Canonical option -> converter for the single-valued options the emulator reads.
TYPED: Final[dict[str, Callable[[str], Any]]] = {
    "--model-path": str,
    "--served-model-name": str,
    "--tokenizer-path": str,
    "--host": str,
    "--port": int,
    "--dtype": str,
    "--kv-cache-dtype": str,
    "--page-size": int,
    "--context-length": int,
    "--api-key": str,
    "--weight-version": str,
    "--disaggregation-mode": str,
    "--disaggregation-bootstrap-port": int,
    "--disaggregation-transfer-backend": str,
    "--speculative-algorithm": str,
    "--speculative-draft-model-path": str,
    "--speculative-num-steps": int,
    "--speculative-eagle-topk": int,
    "--speculative-num-draft-tokens": int,
    # 0.5.2 names these --tensor-parallel-size etc. canonically (aliases --tp-size ...); 0.5.23 the other way round.
    "--tp-size": int,
    "--tensor-parallel-size": int,
    "--dp-size": int,
    "--data-parallel-size": int,
    "--pp-size": int,
    "--pipeline-parallel-size": int,
    # Multi-node (one server over several pods): 0.5.2 server_args.py:1414-1425 (str, int, int);
    # 0.5.23 arg_groups/fields/parallel.py:32-44.
    "--nnodes": int,
    "--node-rank": int,
    "--dist-init-addr": str,
    # DP attention and its PD hints (dp.py): 0.5.2 server_args.py:1395-1404 and :2130-2141; 0.5.23
    # arg_groups/fields/parallel.py:81-103. 0.5.23 has --attn-dp-size (alias --attention-data-parallel-size) and no
    # decode hints; 0.5.2 the hints and no --attn-dp-size. Expert-parallel sizes: 0.5.2's canonical option is
    # --expert-parallel-size (alias --ep-size), 0.5.23's --ep-size.
    "--attn-dp-size": int,
    "--load-balance-method": str,
    "--disaggregation-decode-tp": int,
    "--disaggregation-decode-dp": int,
    "--ep-size": int,
    "--expert-parallel-size": int,
}
CHOICES: Final[dict[str, tuple[str, ...]]] = {
    # 0.5.2 server_args.py:2057-2062; 0.5.23 arg_groups/fields/disagg.py:55-58.
    "--disaggregation-mode": ("null", "prefill", "decode"),
}
VERSION_CHOICES: Final[dict[tuple[str, str], tuple[str, ...]]] = {
    # 0.5.2 server_args.py:1395-1404; 0.5.23 arg_groups/fields/parallel.py:91-102.
    ("0.5.2", "--load-balance-method"): ("round_robin", "shortest_queue", "minimum_tokens"),
    ("0.5.23", "--load-balance-method"): (
        "auto",
        "round_robin",
        "follow_bootstrap_room",
        "total_requests",
        "total_tokens",
    ),
}
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


class ArgvError(Exception):
    """What argparse would print after `<prog>: error: ` before exiting with status 2."""


@dataclass(frozen=True)
class Parsed:
    """The options given on the command line: canonical option -> value (True for a bool flag, a list for an option
    of unknown arity that took several values)."""

    values: dict[str, Any] = field(default_factory=dict)

    def get(self, canonical: str, default: Any = None) -> Any:
        return self.values.get(canonical, default)


def flag_table(version: Version) -> ModuleType:
    return _TABLES[version]


def canonical(version: Version, option: str) -> str:
    """The canonical option of `option` (the first long option string of its action)."""
    table = flag_table(version)
    aliases: dict[str, str] = table.ALIASES
    return aliases.get(option, option)


def _is_option(token: str) -> bool:
    return token.startswith("-") and token != "-" and not _NEGATIVE_NUMBER.match(token)


def _resolve(version: Version, token: str) -> tuple[str | None, str | None]:
    """(registered option string, inline value) for an option-like token, (None, None) if unknown."""
    flags: frozenset[str] = flag_table(version).FLAGS
    name, eq, inline = token.partition("=")
    value = inline if eq else None
    if token in flags:
        return token, None
    if name in flags:
        return name, value
    if not name.startswith("--") or len(name) <= 2:
        return None, None
    matches = sorted(f for f in flags if f.startswith(name))
    if len(matches) > 1:
        raise ArgvError(f"ambiguous option: {name} could match {', '.join(matches)}")
    if len(matches) == 1:
        return matches[0], value
    return None, None


def parse(version: Version, argv: Sequence[str]) -> Parsed:
    """Parse `argv` (what follows `python3 -m sglang.launch_server`) or raise ArgvError with argparse's message."""
    values: dict[str, Any] = {}
    unknown: list[str] = []
    i = 0
    args = list(argv)
    while i < len(args):
        token = args[i]
        if token == "--":
            unknown.extend(args[i + 1 :])  # argparse: everything after `--` is positional; SGLang has none
            break
        if not _is_option(token):
            unknown.append(token)
            i += 1
            continue
        if token in ("-h", "--help"):
            raise SystemExit(0)  # argparse prints its help and exits 0
        option, inline = _resolve(version, token)
        if option is None:
            unknown.append(token)
            i += 1
            continue
        canon = canonical(version, option)
        followers: list[str] = []
        j = i + 1
        while j < len(args) and not _is_option(args[j]) and args[j] != "--":
            followers.append(args[j])
            j += 1
        if canon in BOOL_FLAGS or option in BOOL_FLAGS:
            if inline is not None:
                raise ArgvError(f"argument {_option_strings(version, canon)}: ignored explicit argument {inline!r}")
            values[canon] = True
            i += 1
            continue
        if canon in TYPED:
            if inline is not None:
                raw, rest = inline, followers
            elif followers:
                raw, rest = followers[0], followers[1:]
            else:
                raise ArgvError(f"argument {_option_strings(version, canon)}: expected one argument")
            values[canon] = _convert(version, canon, raw)
            unknown.extend(rest)
            i = j
            continue
        # A registered option whose arity the emulator does not model: it takes what follows.
        if inline is not None:
            values[canon] = inline
            unknown.extend(followers)
        else:
            values[canon] = followers[0] if len(followers) == 1 else (followers or True)
        i = j
    if "--model-path" not in values:
        raise ArgvError(f"the following arguments are required: {_option_strings(version, '--model-path', sep='/')}")
    if unknown:
        raise ArgvError(f"unrecognized arguments: {' '.join(unknown)}")
    return Parsed(values)


def _option_strings(version: Version, canon: str, sep: str = "/") -> str:
    aliases: dict[str, str] = flag_table(version).ALIASES
    names = [canon, *sorted(o for o, c in aliases.items() if c == canon and o != canon)]
    if sep == "/" and len(names) == 1:
        return canon
    return sep.join(names)


def _convert(version: Version, canon: str, raw: str) -> Any:
    converter = TYPED[canon]
    try:
        value = converter(raw)
    except ValueError:
        raise ArgvError(
            f"argument {_option_strings(version, canon)}: invalid {converter.__name__} value: {raw!r}"
        ) from None
    choices = CHOICES.get(canon) or VERSION_CHOICES.get((version, canon))
    if choices is not None and value not in choices:
        listed = ", ".join(repr(c) for c in choices)
        raise ArgvError(f"argument {_option_strings(version, canon)}: invalid choice: {value!r} (choose from {listed})")
    return value


@dataclass(frozen=True)
class ServerConfig:
    """The settings of one SGLang server the emulator needs, with that release's defaults applied."""

    version: Version
    model_path: str
    served_model_name: str
    tokenizer_path: str
    port: int
    dtype: str
    kv_cache_dtype: str
    page_size: int
    context_length: int | None
    tp_size: int
    dp_size: int
    pp_size: int
    enable_dp_attention: bool
    enable_metrics: bool
    skip_server_warmup: bool
    api_key: str | None
    weight_version: str
    disaggregation_mode: str
    bootstrap_port: int
    transfer_backend: str
    kv_checksum: bool
    speculative_algorithm: str | None
    speculative_draft_model_path: str | None
    speculative_num_steps: int | None
    speculative_eagle_topk: int | None
    speculative_num_draft_tokens: int | None
    speculative_use_rejection_sampling: bool
    enable_multi_layer_eagle: bool
    given: dict[str, Any]
    """Every option given, canonical option -> value (what /server_info reports besides the fields above)."""
    nnodes: int = 1
    """Nodes (pods) this one server spans; defaults 1 and 0 (0.5.2 server_args.py:233-234, 0.5.23
    arg_groups/fields/parallel.py:43-44)."""
    node_rank: int = 0
    dist_init_addr: str | None = None
    """`host:port` of the group's rendezvous (torch.distributed's TCPStore on node rank 0)."""
    attn_dp_size_flag: int = 1
    """0.5.23 `--attn-dp-size` as given (default 1); the resolved DP layout is `dp.layout(cfg)`."""
    load_balance_method: str | None = None
    """`--load-balance-method` as given (None: the release's default, resolved by `dp.layout`)."""
    prefill_round_robin_balance: bool = False
    """0.5.2 decode: the promise that the prefill dispatches by room (asserted on a DP decode)."""
    decode_tp_hint: int | None = None
    """0.5.2 prefill: `--disaggregation-decode-tp`."""
    decode_dp_hint: int | None = None
    """0.5.2 prefill: `--disaggregation-decode-dp`."""


def _pick(parsed: Parsed, *options: str, default: Any = None) -> Any:
    for option in options:
        if option in parsed.values:
            return parsed.values[option]
    return default


def server_config(version: Version, argv: Sequence[str]) -> ServerConfig:
    """Parse `argv` and apply the release's defaults (and the speculative post-processing the server does)."""
    parsed = parse(version, argv)
    model_path = str(parsed.get("--model-path"))
    algorithm = parsed.get("--speculative-algorithm")
    if isinstance(algorithm, str):
        algorithm = algorithm.upper()
        if algorithm == "NEXTN":
            algorithm = "EAGLE"  # 0.5.2 server_args.py:719-721; 0.5.23 speculative/spec_info.py:60-61
    steps = parsed.get("--speculative-num-steps")
    topk = parsed.get("--speculative-eagle-topk")
    draft = parsed.get("--speculative-num-draft-tokens")
    if algorithm in ("EAGLE", "EAGLE3", "STANDALONE"):
        if steps is None and topk is None and draft is None:
            # 0.5.2 server_args.py:754-763 and :2689-2714: auto-chosen from the HF architecture, which the emulator
            # does not read; STANDALONE -> (3, 1, 4), any other architecture's default -> (5, 4, 8).
            steps, topk, draft = (3, 1, 4) if algorithm == "STANDALONE" else (5, 4, 8)
        if topk == 1 and steps is not None and draft != steps + 1:
            draft = steps + 1  # 0.5.2 server_args.py:775-782 (same adjustment in 0.5.23's speculative hook)
    return ServerConfig(
        version=version,
        model_path=model_path,
        # 0.5.2 server_args.py:442-443: served_model_name defaults to model_path (same in 0.5.23).
        served_model_name=str(parsed.get("--served-model-name") or model_path),
        tokenizer_path=str(parsed.get("--tokenizer-path") or model_path),
        port=int(parsed.get("--port", 30000)),
        dtype=str(parsed.get("--dtype", "auto")),
        kv_cache_dtype=str(parsed.get("--kv-cache-dtype", "auto")),
        page_size=int(parsed.get("--page-size") or 1),
        context_length=parsed.get("--context-length"),
        tp_size=int(_pick(parsed, "--tp-size", "--tensor-parallel-size", default=1)),
        dp_size=int(_pick(parsed, "--dp-size", "--data-parallel-size", default=1)),
        pp_size=int(_pick(parsed, "--pp-size", "--pipeline-parallel-size", default=1)),
        enable_dp_attention=bool(parsed.get("--enable-dp-attention", False)),
        enable_metrics=bool(parsed.get("--enable-metrics", False)),
        skip_server_warmup=bool(parsed.get("--skip-server-warmup", False)),
        api_key=parsed.get("--api-key"),
        weight_version=str(parsed.get("--weight-version", "default")),
        disaggregation_mode=str(parsed.get("--disaggregation-mode", "null")),
        # 8998 in both: 0.5.2 server_args.py:379, 0.5.23 arg_groups/fields/disagg.py:81-83.
        bootstrap_port=int(parsed.get("--disaggregation-bootstrap-port", 8998)),
        transfer_backend=str(parsed.get("--disaggregation-transfer-backend", "mooncake")),
        kv_checksum=bool(parsed.get("--disaggregation-enable-kv-checksum", False)),
        speculative_algorithm=algorithm if isinstance(algorithm, str) else None,
        speculative_draft_model_path=parsed.get("--speculative-draft-model-path"),
        speculative_num_steps=steps,
        speculative_eagle_topk=topk,
        speculative_num_draft_tokens=draft,
        speculative_use_rejection_sampling=bool(parsed.get("--speculative-use-rejection-sampling", False)),
        enable_multi_layer_eagle=bool(parsed.get("--enable-multi-layer-eagle", False)),
        given=dict(parsed.values),
        nnodes=int(parsed.get("--nnodes", 1)),
        node_rank=int(parsed.get("--node-rank", 0)),
        dist_init_addr=parsed.get("--dist-init-addr"),
        attn_dp_size_flag=int(parsed.get("--attn-dp-size", 1)),
        load_balance_method=parsed.get("--load-balance-method"),
        prefill_round_robin_balance=bool(parsed.get("--prefill-round-robin-balance", False)),
        decode_tp_hint=parsed.get("--disaggregation-decode-tp"),
        decode_dp_hint=parsed.get("--disaggregation-decode-dp"),
    )


def usage_error(version: Version, message: str) -> int:
    """Print argparse's two error lines to stderr and return its exit status (2)."""
    prog = facts_for(version).prog
    print(f"usage: {prog} [-h] --model-path MODEL_PATH [options] (emulated SGLang {version} parser)", file=sys.stderr)
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 2
