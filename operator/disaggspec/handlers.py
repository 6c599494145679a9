"""Thin kopf glue: kopf's settings, the start of the `Controller`, and the admission webhook.

No state and no API writes here: the entry point runs kopf with `memo=handlers.memo_for(controller)`, and each handler
delegates to that `runtime.controller.Controller` (which owns the caches, informers, work queue, leader election and
health). kopf watches nothing: the DisaggSpecService watch is the controller's own informer, like the children's, so
it recovers from an outage as promptly as they do and /healthz covers it (kopf's watch sat out a Fibonacci backoff of
its own after an API-server outage, invisible to /healthz), and kopf keeps no progress annotations on the objects. The
validating webhook refuses a spec through the same `rejection.check` as
reconcile (with the update-only rules on updates), then, when the rules pass, refuses one whose children the API
server would refuse (`admission_children`: a dry-run of each child, with the message reconcile would write to
Degraded; fail-safe, it admits when the dry-run cannot answer).
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import kopf

from disaggspec import admission_children, metrics
from disaggspec import constants as c
from disaggspec.rejection import check
from disaggspec.runtime import pod_ports
from disaggspec.runtime.controller import Controller
from disaggspec.runtime.pod_ports import PortAllocator

log = logging.getLogger("disaggspec.handlers")


def memo_for(controller: Controller) -> kopf.Memo:
    """kopf's memo for `kopf.run(memo=...)`: every handler finds the controller in it."""
    return kopf.Memo(controller=controller, ports=PortAllocator.listing(controller.client, controller.namespaces))


def _controller(memo: kopf.Memo) -> Controller:
    controller: Controller | None = memo.get("controller")
    if controller is None:
        raise RuntimeError("kopf runs without the controller: pass memo=handlers.memo_for(controller) to kopf.run")
    return controller


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    settings.posting.reporting_component = c.MANAGED_BY
    # Our own Events say what matters; kopf's per-handler INFO events would be noise.
    settings.posting.level = logging.WARNING
    controller = _controller(memo)
    controller.start()
    if controller.webhook_server is not None:
        # Built, served and registered (with its own timeoutSeconds) by the controller: kopf does not manage it.
        settings.admission.server = controller.webhook_server


CHILD_REFUSED_RULE = "child-refused"
"""The `rule` label of `disaggspec_rule_rejections_total` for a spec refused because a child would be refused."""


def admit(*, body: kopf.Body, memo: kopf.Memo, **kwargs: Any) -> None:
    """Reject a spec the rule table refuses, with every rule's message (the CRD's CEL rules ran already), or one
    whose children the API server would refuse, with the message reconcile would write to Degraded.

    The children's dry-run needs the controller's client; without a controller in `memo` only the rules run."""
    old, operation = kwargs.get("old"), kwargs.get("operation")
    previous = _plain(old) if operation == "UPDATE" and old else None
    obj = _plain(body)
    meta = obj.setdefault("metadata", {})
    if not meta.get("namespace") and kwargs.get("namespace"):
        meta["namespace"] = kwargs["namespace"]  # the request's: children are rendered into it
    try:
        service, rejection = check(obj, previous)
    except Exception:  # a bug in the rule table must not block users (nor be their error message): admit
        log.exception("%s/%s: admitted unvalidated: the rule table raised", meta.get("namespace"), meta.get("name"))
        return
    if rejection:
        metrics.count_rejection(rejection.rules, "admission")
        raise kopf.AdmissionError(rejection.text, code=422)
    controller: Controller | None = memo.get("controller")
    if service is None or controller is None:
        return
    refused = admission_children.refusal_text(controller.client, controller.config, obj, service)
    if refused is not None:
        metrics.count_rejection((CHILD_REFUSED_RULE,), "admission")
        raise kopf.AdmissionError(refused, code=422)


def enable_webhook() -> None:
    """Serve `admit` as the validating webhook (kopf refuses admission handlers without a server, so opt-in).

    failurePolicy is Ignore: when the operator is down, writes still go through the CRD's CEL rules, and reconcile
    refuses (SpecConfigConsistent=False, no child changed) what only the Python rules catch.
    """
    # persistent: a graceful exit leaves the webhook registered (failurePolicy Ignore covers the downtime), so a
    # restart or a failover never opens a window without it.
    kopf.on.validate(
        c.GROUP,
        c.VERSION,
        c.PLURAL,
        id="validate",
        operations=["CREATE", "UPDATE"],
        ignore_failures=True,
        persistent=True,
    )(admit)
    pod_ports.enable_webhook()  # per-pod ports of host-network pool pods that share a node


def _plain(body: Any) -> dict[str, Any]:
    """A kopf Body (a live view) as a plain, detached dict."""
    return copy.deepcopy(dict(body))
