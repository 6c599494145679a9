"""Entry point: `python -m disaggspec` (or `disaggspec-operator`) runs the operator.

Parses flags, loads Kubernetes credentials (in-cluster, or KUBECONFIG), starts the metrics/health server, wires the
reconciler into the kopf handlers and runs kopf. Settings shared by every service come from `DISAGGSPEC_*`
environment variables (see `disaggspec.config`).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

import kopf
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from disaggspec import apply, cert_reload, config, handlers, metrics, webhook_certs
from disaggspec.reconcile import Reconciler


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
    parser.add_argument("--log-level", default=os.environ.get("DISAGGSPEC_LOG_LEVEL", "INFO"))
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if logging.getLogger().level > logging.DEBUG:
        # kopf logs every handler success at INFO: one line per event of every child.
        logging.getLogger("kopf").setLevel(logging.WARNING)
    settings = config.from_env()
    namespaces = tuple(args.namespace) or settings.namespaces
    client = apply.Client(_api_client())
    handlers.RUNTIME.reconciler = Reconciler(client, settings, client.post_event, services=handlers.RUNTIME.services)
    handlers.RUNTIME.namespaces = namespaces
    if args.webhook == "on":
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
        handlers.enable_webhook(
            handlers.WebhookOptions(args.webhook_addr, args.webhook_port, args.webhook_host, cert, key, ca)
        )
    metrics.serve(args.metrics_addr, args.metrics_port)
    kopf.run(standalone=True, clusterwide=not namespaces, namespaces=namespaces)
    return 0


if __name__ == "__main__":
    sys.exit(main())
