"""Command line of the local control plane: `python -m e2e.cluster {build,up,down,status,env,kubeconfig}` (`up
--serving` for serving mode, see `python -m e2e.serving`; `up --metrics` adds the metrics pipeline: Prometheus and
prometheus-adapter behind custom.metrics.k8s.io), and for fault injection `python -m e2e.cluster {stop,start,restart}
<component>` (etcd, apiserver, controller-manager, scheduler, kwok, lws-controller, and with the pipeline prometheus,
prometheus-adapter): one process stopped or brought back with its flags, ports and data."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from e2e.cluster import build
from e2e.cluster.controlplane import COMPONENT_ALIASES, COMPONENTS, ClusterError, LocalCluster, NodeShape

COMPONENT_NAMES = sorted(set(COMPONENTS) | set(COMPONENT_ALIASES))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.cluster", description=__doc__)
    parser.add_argument("--dir", type=Path, default=None, help="state directory (default: .state/cluster)")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser(
        "build",
        help="build (or reuse) etcd, kube-*, kubectl, kwok, helm, promtool, lws-controller, prometheus, "
        "prometheus-adapter",
    )
    up = commands.add_parser("up", help="start the control plane and the fake GPU nodes")
    up.add_argument("--nodes", type=int, default=int(os.environ.get("DISAGGSPEC_CLUSTER_NODES", "4")))
    up.add_argument(
        "--h100-nodes",
        type=int,
        default=int(os.environ.get("DISAGGSPEC_CLUSTER_H100_NODES", "0")),
        help="how many of the nodes (the last ones) are tainted H100-80GB nodes, where the multi-node example runs",
    )
    up.add_argument("--port-base", type=int, default=int(os.environ.get("DISAGGSPEC_CLUSTER_PORT_BASE", "16379")))
    up.add_argument(
        "--serving",
        action="store_true",
        help="serving mode: kwok leaves readiness, restarts and deletion of pods to the pod runner "
        "(`python -m e2e.serving start`), which runs one local process per container on the pod's loopback IP",
    )
    up.add_argument(
        "--metrics",
        action="store_true",
        help="also start the metrics pipeline: Prometheus scraping the SGLang servers of the pool pods and "
        "prometheus-adapter serving them as custom.metrics.k8s.io for the HPA controller (docs/local-control-plane.md)",
    )
    commands.add_parser("down", help="stop every process `up` started and remove the state")
    commands.add_parser("status", help="show processes, health and nodes")
    commands.add_parser("env", help="print shell exports: KUBECONFIG and PATH with kubectl and helm")
    commands.add_parser("kubeconfig", help="print the admin kubeconfig path")
    for verb, text in (
        ("stop", "stop one component, keeping its data (fault injection)"),
        ("start", "start one stopped component with its flags, ports and data; wait until it is healthy"),
        ("restart", "stop then start one component; wait until it is healthy"),
    ):
        one = commands.add_parser(verb, help=text)
        one.add_argument("component", choices=COMPONENT_NAMES)
    args = parser.parse_args(argv)
    cluster = LocalCluster(args.dir)
    try:
        if args.command == "build":
            build.ensure_built()
        elif args.command == "up":
            shape = NodeShape(count=args.nodes, second_product_nodes=args.h100_nodes)
            cluster.up(port_base=args.port_base, nodes=shape, serving=args.serving, metrics=args.metrics)
        elif args.command == "down":
            cluster.down()
        elif args.command == "status":
            for line in cluster.status():
                print(line)
            return 0 if cluster.is_up() else 1
        elif args.command == "env":
            state = cluster.require_state()
            bins = [build.KUBERNETES.directory / "bin", build.HELM.directory / "bin"]
            print(f"export KUBECONFIG={state.kubeconfig}")
            print(f"export PATH={':'.join(str(b) for b in bins)}:$PATH")
        elif args.command == "kubeconfig":
            print(cluster.require_state().kubeconfig)
        elif args.command == "stop":
            cluster.stop_component(args.component)
        elif args.command == "start":
            cluster.start_component(args.component)
        elif args.command == "restart":
            cluster.restart_component(args.component)
    except (ClusterError, build.BuildError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
