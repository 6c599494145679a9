"""`python -m e2e.serving.emulator --sglang-version V --bind IP [--pod-name N] [--namespace NS] [--kubeconfig K]
[--emulate key=value ...] [--drain-timeout S] -- <sglang args>`: run one emulated SGLang server.

`<sglang args>` is the pod's command after `python3 -m sglang.launch_server`, unchanged. It is parsed like release V's
parser does (an unknown option exits 2 with argparse's `unrecognized arguments`); the HTTP server binds `--bind`:
`--port` instead of the rendered `--host` (every pod shares the port numbers on this machine, each on its own
loopback IP), and a prefill's bootstrap server binds `--bind`:`--disaggregation-bootstrap-port`. A multi-node
server's node rank 0 listens for its group on `--bind`:<port of --dist-init-addr>; the other nodes resolve the
address's host at each attempt, a pod hostname record through the cluster-DNS stand-in (`e2e.serving.clusterdns`,
reading the API server with `--kubeconfig`, the pod's namespace `--namespace` completing short names).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import ipaddress
import logging
import sys
from collections.abc import Sequence

from e2e.serving.emulator import dp
from e2e.serving.emulator.facts import VERSIONS
from e2e.serving.emulator.group import Resolver, parse_dist_init_addr
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
    parser.add_argument(
        "--namespace", default=None, help="the pod's namespace: completes a short pod DNS name (default: default)"
    )
    parser.add_argument(
        "--kubeconfig", default=None, help="API access of the cluster-DNS stand-in (a multi-node worker's leader)"
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
    problem = _multi_node_problem(cfg.nnodes, cfg.tp_size * cfg.pp_size, cfg.dist_init_addr) or dp.startup_error(cfg)
    if problem is not None:
        logging.getLogger("emulator").error("%s", problem)
        return 1
    server = EmulatorServer(
        cfg,
        options,
        bind=ours.bind,
        pod_name=ours.pod_name or f"emulator-{ours.bind}",
        drain_timeout=ours.drain_timeout,
        access_log=ours.access_log,
        resolver=Resolver(ours.bind, ours.namespace, ours.kubeconfig),
    )
    try:
        return asyncio.run(server.run())
    except OSError as exc:
        logging.getLogger("emulator").error("emulator: cannot listen: %s", exc)
        return 1


def _multi_node_problem(nnodes: int, tp_times_pp: int, dist_init_addr: str | None) -> str | None:
    """Why a multi-node server cannot start, as SGLang fails (an uncaught exception: exit status 1), or None."""
    if nnodes > 1 and tp_times_pp % nnodes != 0:
        # 0.5.2 server_args.py:2251-2253; 0.5.23 arg_groups/validation_hook.py:179-181.
        return "AssertionError: tp_size must be divisible by number of nodes"
    if nnodes > 1 and dist_init_addr is not None:
        try:
            parse_dist_init_addr(dist_init_addr)
        except ValueError as error:
            return f"ValueError: {error}"
    return None
