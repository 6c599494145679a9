"""Entry point: `python -m disaggspec` (or `disaggspec-operator`) runs the operator.

Parses flags, loads Kubernetes credentials (in-cluster, or KUBECONFIG), builds the `runtime.controller.Controller`
and the `reconcile.Reconciler` it runs, starts the metrics/health server and runs kopf with the controller in its
memo (the kopf handlers, `disaggspec.handlers`, delegate to it). Settings shared by every service come from
`DISAGGSPEC_*` environment variables (see `disaggspec.config`).

With `--leader-elect` (the chart's default) several replicas may run: each watches and serves the webhook, only the
holder of the Lease `<namespace>/<id>` reconciles, through a client whose writes are fenced by that Lease. A leader
that cannot renew stops writing at once and campaigns again in the same process (no restart, no CrashLoopBackOff
after repeated API-server outages: see `runtime.leader`); a graceful stop releases the Lease so a standby takes over
at once.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from pathlib import Path

import kopf
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from disaggspec import apply, config, handlers, metrics
from disaggspec.reconcile import Reconciler
from disaggspec.runtime import cert_reload, health, leader, webhook_certs, webhook_config
from disaggspec.runtime.autoscaler import Autoscaler
from disaggspec.runtime.controller import Controller


def _api_client() -> k8s.ApiClient:
    configuration = k8s.Configuration()
    if os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG"):
        k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        k8s_config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    # One connection per thread that may talk to the API server at once; the default (5 per core) made the pool drop
    # connections under load, and every dropped connection costs a new TLS handshake on both sides.
    configuration.connection_pool_maxsize = apply.MAX_CONCURRENT_REQUESTS
    return k8s.ApiClient(configuration)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="disaggspec-operator", description=__doc__)
    parser.add_argument("--namespace", action="append", default=[], help="watch this namespace (repeatable)")
    parser.add_argument("--metrics-addr", default="0.0.0.0", help="address of /metrics and /healthz")
    parser.add_argument("--metrics-port", type=int, default=8080)
    parser.add_argument("--webhook", choices=["on", "off"], default="on", help="serve the validating webhook")
    parser.add_argument("--webhook-addr", default="0.0.0.0")
    parser.add_argument("--webhook-port", type=int, default=9443)
    parser.add_argument(
        "--webhook-host", default=None, help="host name the API server reaches the webhook at (in the certificate)"
    )
    parser.add_argument("--webhook-cert", default=None, help="TLS cert file (default: kopf self-signs one)")
    parser.add_argument("--webhook-key", default=None, help="TLS key file")
    parser.add_argument(
        "--webhook-ca",
        default=None,
        help="CA bundle the API server verifies the webhook with (cert-manager's ca.crt); default: the certificate",
    )
    parser.add_argument(
        "--cert-check-seconds",
        type=float,
        default=60.0,
        help="with --webhook-cert: how often to check the mounted files; a change restarts the operator",
    )
    parser.add_argument(
        "--webhook-timeout-seconds",
        type=_webhook_timeout,
        default=webhook_config.DEFAULT_TIMEOUT_SECONDS,
        help="how long the API server waits for the webhook before ignoring it (1-30)",
    )
    parser.add_argument("--log-level", default=os.environ.get("DISAGGSPEC_LOG_LEVEL", "INFO"))
    parser.add_argument(
        "--leader-elect", action="store_true", help="reconcile only while holding the leader Lease (for replicas > 1)"
    )
    parser.add_argument(
        "--leader-election-namespace",
        default=os.environ.get("POD_NAMESPACE") or "default",
        help="namespace of the leader Lease (default: $POD_NAMESPACE, else default)",
    )
    parser.add_argument("--leader-election-id", default="disaggspec-operator", help="name of the leader Lease")
    parser.add_argument("--lease-duration-seconds", type=_positive, default=15.0)
    parser.add_argument("--renew-deadline-seconds", type=_positive, default=10.0)
    parser.add_argument("--retry-period-seconds", type=_positive, default=2.0)
    parser.add_argument(
        "--health-grace-seconds",
        type=_positive,
        default=health.DEFAULT_GRACE_SECONDS,
        help="how long a component (a watch, the webhook) may fail before /healthz fails",
    )
    args = parser.parse_args(argv)
    if args.leader_elect and not (
        args.retry_period_seconds < args.renew_deadline_seconds < args.lease_duration_seconds
    ):
        parser.error(
            "leader election needs --retry-period-seconds < --renew-deadline-seconds < --lease-duration-seconds"
        )
    return args


def _positive(value: str) -> float:
    number = float(value)
    if not number > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {value!r}")
    return number


def _webhook_timeout(value: str) -> int:
    number = int(value)
    if not 1 <= number <= 30:
        raise argparse.ArgumentTypeError(f"must be within 1-30 seconds, not {value!r}")
    return number


def identity() -> str:
    """This replica's name in the Lease: the pod's name, else host name and process id."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}_{os.getpid()}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    _configure_logging(args.log_level)
    settings = config.from_env()
    namespaces = tuple(args.namespace) or settings.namespaces
    client = apply.Client(_api_client())
    elector = _leader_elector(args, client)
    controller = Controller(
        client,
        settings,
        namespaces=namespaces,
        leader=elector,
        health=health.Health(grace_seconds=args.health_grace_seconds),
    )
    writer = client if elector is None else client.fenced(elector.is_leader)
    _attach_reconciler(controller, client, writer, settings)
    if args.webhook == "on":
        options = webhook_options(args)
        handlers.enable_webhook()
        controller.serve_webhook(options, args.webhook_timeout_seconds)
    metrics.serve(args.metrics_addr, args.metrics_port, controller.health)
    if elector is not None:
        elector.start()
    try:
        kopf.run(
            standalone=True,
            clusterwide=not namespaces,
            namespaces=namespaces,
            memo=handlers.memo_for(controller),
        )
    finally:
        if elector is not None:
            elector.release()
    return 0


def _configure_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if logging.getLogger().level > logging.DEBUG:
        # kopf logs every handler success at INFO: one line per event of every child.
        logging.getLogger("kopf").setLevel(logging.WARNING)


def _leader_elector(args: argparse.Namespace, client: apply.Client) -> leader.LeaderElector | None:
    """The Lease elector of `--leader-elect` (started once everything is wired), else None."""
    if not args.leader_elect:
        metrics.IS_LEADER.set(1)  # the only replica: it always reconciles
        return None
    return leader.LeaderElector(
        client,
        args.leader_election_namespace,
        args.leader_election_id,
        identity(),
        lease_duration=args.lease_duration_seconds,
        renew_deadline=args.renew_deadline_seconds,
        retry_period=args.retry_period_seconds,
    )


def _attach_reconciler(
    controller: Controller, client: apply.Client, writer: apply.Client, settings: config.OperatorConfig
) -> None:
    """Gives `controller` its reconciler and the autoscaler that plans for it; both write through `writer` (fenced
    by the Lease under leader election), Events go through `client`."""
    planner = Autoscaler(
        writer,
        client.post_event,
        lookup=controller.services.get,
        children=controller.children.children,
        requeue=controller.requeue,
    )
    controller.health_monitor.add_window_observer(planner)
    controller.reconciler = Reconciler(
        writer,
        settings,
        client.post_event,
        services=controller.services,
        runtime_health=controller.health_monitor.verdict,
        availability=controller.availability,
        planner=planner.view,
    )


def webhook_options(args: argparse.Namespace) -> webhook_config.WebhookOptions:
    """How to serve the webhook: the mounted certificate (watched: a renewal restarts the operator), else a
    self-signed one for `--webhook-host`, else kopf's own."""
    cert, key, ca = args.webhook_cert, args.webhook_key, args.webhook_ca
    if cert is None and args.webhook_host:
        cert, key = (str(p) for p in webhook_certs.self_signed(args.webhook_host))
    elif cert is not None:
        mounted = [Path(p) for p in (cert, key, ca) if p]
        cert_reload.CertificateWatcher(mounted, interval=args.cert_check_seconds).start()
    if ca is not None and not Path(ca).is_file():
        # Some issuers publish no ca.crt; the served chain then doubles as the bundle (kopf's default).
        logging.getLogger(__name__).warning("--webhook-ca %s does not exist: using the certificate as CA", ca)
        ca = None
    return webhook_config.WebhookOptions(args.webhook_addr, args.webhook_port, args.webhook_host, cert, key, ca)


if __name__ == "__main__":
    sys.exit(main())
