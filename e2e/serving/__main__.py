"""The pod runner of serving mode (`python -m e2e.cluster up --serving`): the kubelet double of the kwok nodes.

  python -m e2e.serving run    [--state-dir D] [--kubeconfig K] [--launcher module:attr] [settings]   # foreground
  python -m e2e.serving start  [same options] [--timeout S]   # detached; returns once it watches pods
  python -m e2e.serving stop   [--state-dir D]                # SIGTERM, SIGKILL after a timeout; no process left
  python -m e2e.serving status [--state-dir D]                # the runner and its processes

The state directory is the cluster's (default: DISAGGSPEC_CLUSTER_DIR or .state/cluster); the runner keeps its
pidfile, process table and logs in its `serving/` subdirectory, and uses its admin kubeconfig unless told otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from e2e.cluster.controlplane import default_state_dir
from e2e.cluster.servingdir import serving_dir, stop_runner
from e2e.serving import log
from e2e.serving.daemon import runner_status, start_runner
from e2e.serving.kubeapi import KubeApi
from e2e.serving.kubelet import Settings
from e2e.serving.modelcache import VOLUMES_ENV
from e2e.serving.plan import DEFAULT_LAUNCHER, load_launcher
from e2e.serving.runner import Runner, RunnerError


def _settings_args(parser: argparse.ArgumentParser) -> None:
    defaults = Settings()
    parser.add_argument("--kubeconfig", type=Path, default=None, help="default: <state-dir>/admin.kubeconfig")
    parser.add_argument("--launcher", default=DEFAULT_LAUNCHER, help=f"module:attr (default {DEFAULT_LAUNCHER})")
    parser.add_argument(
        "--backoff-initial",
        type=float,
        default=defaults.backoff_initial,
        help=f"first crash-loop delay in seconds (default {defaults.backoff_initial:g}; the kubelet's is 10)",
    )
    parser.add_argument(
        "--backoff-max",
        type=float,
        default=defaults.backoff_cap,
        help=f"longest crash-loop delay in seconds (default {defaults.backoff_cap:g}; the kubelet's is 300)",
    )
    parser.add_argument(
        "--shutdown-grace",
        type=float,
        default=defaults.shutdown_grace,
        help=f"grace period of each process when the runner stops (default {defaults.shutdown_grace:g})",
    )


def _settings_argv(args: argparse.Namespace) -> list[str]:
    return [
        f"--backoff-initial={args.backoff_initial}",
        f"--backoff-max={args.backoff_max}",
        f"--shutdown-grace={args.shutdown_grace}",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m e2e.serving", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--state-dir", type=Path, default=None, help="the cluster's state directory")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", parents=[common], help="run the pod runner in the foreground")
    _settings_args(run)
    start = commands.add_parser("start", parents=[common], help="start the pod runner in the background")
    _settings_args(start)
    start.add_argument("--timeout", type=float, default=60.0)
    commands.add_parser("stop", parents=[common], help="stop the pod runner and every process it started")
    commands.add_parser("status", parents=[common], help="show the pod runner and its processes")
    args = parser.parse_args(argv)
    state_dir: Path = (args.state_dir or default_state_dir()).resolve()

    try:
        if args.command == "run":
            return _run(args, state_dir)
        if args.command == "start":
            start_runner(state_dir, args.kubeconfig, args.launcher, _settings_argv(args), timeout=args.timeout)
        elif args.command == "stop":
            stop_runner(state_dir)
        elif args.command == "status":
            for line in runner_status(state_dir):
                print(line)
    except RunnerError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


def _run(args: argparse.Namespace, state_dir: Path) -> int:
    kubeconfig: Path = args.kubeconfig or state_dir / "admin.kubeconfig"
    if not kubeconfig.is_file():
        raise SystemExit(
            f"error: no kubeconfig at {kubeconfig}: is the cluster up (python -m e2e.cluster up --serving)?"
        )
    # Launchers that act for a pod against the API (the router's token request) use the runner's own credentials.
    os.environ["KUBECONFIG"] = str(kubeconfig.resolve())
    # The local directories standing for pod volumes (the model cache's claim) live with the runner's other files.
    os.environ.setdefault(VOLUMES_ENV, str(serving_dir(state_dir) / "volumes"))
    launcher = load_launcher(args.launcher)
    settings = Settings(
        backoff_initial=args.backoff_initial, backoff_cap=args.backoff_max, shutdown_grace=args.shutdown_grace
    )
    log(f"launcher {args.launcher}, state {state_dir}")
    return Runner(KubeApi(kubeconfig), launcher, state_dir, settings).run()


if __name__ == "__main__":
    sys.exit(main())
