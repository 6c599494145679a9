"""The admission webhook's second check: would the API server accept the children of a spec the rule table passed?

`refusal_text(client, config, obj, service)` renders the incoming object and server-side applies its children with
`dryRun=All` (in parallel, the operator's field manager and force, an owner reference to the incoming object), and
returns the plain `childrefusal.explain` message when any child would be refused (the same text reconcile writes to
Degraded), else None. The object's uid is already set during validating admission of a CREATE (the API server fills
system fields before it calls validating webhooks); a placeholder stands in when it is missing.

A child whose render alone the API server accepts but whose merge with the live object it refuses (another field
manager's edit made the merged form invalid: `childrepair`) does not refuse the spec: reconcile repairs it.

Fail-safe by design: when the dry-run cannot answer (an API server 5xx, a timeout, an RBAC gap, or render itself
raising), it returns None and the spec is admitted. The webhook's failurePolicy is Ignore for the same reason: a
stalled check must never block users, and reconcile dry-runs again before its first write, so a refused child is
still caught with nothing applied. Skipped: a service in a denied namespace (it gets no children), one being deleted,
one without a name yet (generateName: children are named after it).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Final

from disaggspec import apply, childrefusal, render
from disaggspec.api import DisaggSpecService
from disaggspec.config import OperatorConfig

log = logging.getLogger("disaggspec.admission")

PLACEHOLDER_UID: Final = "00000000-0000-0000-0000-000000000000"
"""The owner uid of the dry-run children when the admitted object has none (never stored: dry-run only)."""
TIMEOUT_SECONDS: Final = 3.0
"""How long the dry-runs may take before the spec is admitted unchecked: under the webhook's default 5 s timeout."""


def refusal_text(
    client: apply.Client, config: OperatorConfig, obj: dict[str, Any], service: DisaggSpecService
) -> str | None:
    """Why the API server would refuse a child of `obj` (parsed as `service`), or None (accepted, or unknown)."""
    meta = obj.get("metadata") or {}
    namespace, name = meta.get("namespace"), meta.get("name")
    if not namespace or not name or namespace in config.denied_namespaces or meta.get("deletionTimestamp"):
        return None
    owner = {**obj, "metadata": {**meta, "uid": meta.get("uid") or PLACEHOLDER_UID}}
    started = time.monotonic()
    try:
        desired = render.render(service, config)
        writes, _ = apply.prepare(owner, desired, ())
        refusals = apply.dry_run(client, apply.checkable(writes), timeout=TIMEOUT_SECONDS)
        # A child refused only because of what another field manager changed in the live object (a hand edit of a
        # port) is not the spec's fault: reconcile repairs it (`childrepair`), so it does not refuse the spec.
        by_ref = {apply.ref(manifest): manifest for manifest in writes}
        refusals = [
            refused
            for refused in refusals
            if not apply.render_alone_valid(client, by_ref[f"{refused.kind}/{refused.name}"])
        ]
    except Exception as error:  # fail-safe: admit, and let reconcile find out (it dry-runs again before writing)
        log.warning("%s/%s: admitted without the children's dry-run: %s", namespace, name, error)
        return None
    finally:
        log.debug("%s/%s: children dry-run in %.0f ms", namespace, name, 1000 * (time.monotonic() - started))
    if not refusals:
        return None
    return childrefusal.explain(refusals, desired, obj.get("spec"))
