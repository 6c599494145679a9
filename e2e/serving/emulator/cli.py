"""`python -m e2e.serving.emulator --sglang-version V --bind IP [--pod-name N] [--emulate key=value ...]
[--drain-timeout S] -- <sglang args>`: run one emulated SGLang server.

`<sglang args>` is the pod's command after `python3 -m sglang.launch_server`, unchanged. It is parsed like release V's
parser does (an unknown option exits 2 with argparse's `unrecognized arguments`); the HTTP server binds `--bind`:
`--port` instead of the rendered `--host` (every pod shares the port numbers on this machine, each on its own
loopback IP), and a prefill's bootstrap server binds `--bind`:`--disaggregation-bootstrap-port`.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import ipaddress
import logging
import sys
from collections.abc import Sequence

from e2e.serving.emulator.facts import VERSIONS
from e2e.serving.emulator.options import KEYS, OptionError, parse_options
from e2e.serving.emulator.server import EmulatorServer
from e2e.serving.emulator.sglang_args import ArgvError, server_config, usage_error


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m e2e.serving.emulator",
        description="Emulate one SGLang server (test double for the local serving simulation).",
        epilog=f"--emulate keys: {', '.join(KEYS)} (see docs/serving-emulator.md)",
    )
    parser.add_argument("--sglang-version", required=True, choices=VERSIONS)
    parser.add_argument("--bind", required=True, help="IP to listen on (the pod's loopback IP)")
    parser.add_argument(
        "--pod-name", default=None, help="name reported in the pairing report (default: emulator-<bind>)"
    )
    parser.add_argument("--emulate", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--drain-timeout", type=float, default=30.0, help="SIGTERM: seconds to let requests finish")
    parser.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    parser.add_argument("--access-log", action="store_true", help="log every HTTP request (logger emulator.access)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--" not in args:
        _parser().print_usage(sys.stderr)
        print("python -m e2e.serving.emulator: error: the SGLang arguments must follow `--`", file=sys.stderr)
        return 2
    split = args.index("--")
    ours = _parser().parse_args(args[:split])
    sglang_args = args[split + 1 :]
    try:
        ipaddress.ip_address(ours.bind)
    except ValueError:
        print(f"python -m e2e.serving.emulator: error: --bind {ours.bind!r} is not an IP address", file=sys.stderr)
        return 2
    try:
        cfg = server_config(ours.sglang_version, sglang_args)
    except ArgvError as exc:
        return usage_error(ours.sglang_version, str(exc))
    try:
        options = parse_options(ours.emulate)
    except OptionError as exc:
        print(f"python -m e2e.serving.emulator: error: {exc}", file=sys.stderr)
        return 2
    if options.bootstrap_port is not None:
        cfg = dataclasses.replace(cfg, bootstrap_port=options.bootstrap_port)
    options = options.with_defaults_for(
        dtype=cfg.dtype,
        speculative=cfg.speculative_algorithm is not None,
        num_draft_tokens=cfg.speculative_num_draft_tokens,
    )
    logging.basicConfig(
        level=getattr(logging, ours.log_level.upper()),
        format="[%(asctime)s] %(name)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    server = EmulatorServer(
        cfg,
        options,
        bind=ours.bind,
        pod_name=ours.pod_name or f"emulator-{ours.bind}",
        drain_timeout=ours.drain_timeout,
        access_log=ours.access_log,
    )
    try:
        return asyncio.run(server.run())
    except OSError as exc:
        logging.getLogger("emulator").error("emulator: cannot listen: %s", exc)
        return 1
