"""A child the API server refuses, in words a user understands; pure: no kopf, no Kubernetes client, no I/O.

`apply` turns a refused write (or dry-run) of a child into a `Refusal`: the child's kind and name, the HTTP status, and
the API Status' reason, message and `details.causes`. This module decides which refusals are final (`is_refusal`:
the request itself is refused, so retrying it unchanged cannot help until the spec or the namespace changes) and
writes the one message that status, Events and the admission webhook share (`explain`). Where the child field a cause
points at comes from one DisaggSpecService field (pod labels, env, resources, tolerations, ...), the message names
that field too (`spec_field`), so the user knows what to edit.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from disaggspec import constants as c

# A 500 is normally the server's own trouble, but server-side apply answers 500 for two deterministic failures of the
# request body: a list with duplicate keys (no typed patch can be built) and a value that does not decode into the
# kind's Go type (a quantity like "lots"). Retrying either unchanged fails the same way, so they are refusals.
_DETERMINISTIC_500: Final = ("failed to create typed patch object", "failed to convert new object")
# An RBAC denial is a 403 too, but it says the operator's ServiceAccount lacks a permission (a chart problem), or,
# for a RoleBinding, that the API server does not see its Role yet (the escalation check): both stay plain apply
# failures, retried, rather than refusals of this service's children.
_RBAC_DENIAL: Final = re.compile(
    r'User "[^"]*" cannot \S+ resource|attempting to grant RBAC permissions not currently held'
)
# The API server's prefixes that repeat what the message already says around them.
_PREFIXES: Final = (
    re.compile(r'^[\w.]+ "[^"]*" is (?:invalid|forbidden): '),
    re.compile(r"^failed to create typed patch object \([^)]*\): "),
    re.compile(
        r"^failed to convert new object \([^)]*\) to proper version: unable to convert unstructured object "
        r"to [^:]*: "
    ),
)
NOTHING_APPLIED: Final = "nothing was applied"
ROLLED_BACK: Final = "the children this pass had created were deleted again, so nothing is half-applied"


@dataclass(frozen=True)
class Cause:
    """One `details.causes` entry of a refusal: the child field (may be empty) and what is wrong with it."""

    field: str
    message: str


@dataclass(frozen=True)
class Refusal:
    """The API server's answer to one child it would not accept."""

    kind: str
    name: str
    status: int
    reason: str
    """The Status' machine reason (Invalid, Forbidden, BadRequest, InternalError, ...)."""
    message: str
    causes: tuple[Cause, ...] = ()

    @property
    def child(self) -> str:
        return f"{self.kind} {self.name}"


def is_refusal(status: int, message: str) -> bool:
    """Whether a failed write with this HTTP status and message is a refusal of the request itself (not transient).

    400 and 422 (the object is invalid) and 403 from admission (a ResourceQuota, a ValidatingAdmissionPolicy, a
    webhook, a namespace being terminated) are refusals, as are the two deterministic 500s of server-side apply.
    Everything else (other 5xx, 429, timeouts, 409 conflicts, 404, an RBAC 403) is transient: retried as it was.
    """
    if status in (400, 422):
        return True
    if status == 403:
        return _RBAC_DENIAL.search(message) is None
    if status == 500:
        return any(message.startswith(prefix) for prefix in _DETERMINISTIC_500)
    return False


def _strip(message: str) -> str:
    for prefix in _PREFIXES:
        message = prefix.sub("", message, count=1)
    return message.strip()


_SEGMENT: Final = re.compile(r"([^.\[]+)((?:\[[^\]]*\])*)")


def _parts(path: str) -> list[tuple[str, str | None]]:
    """`spec.template.spec.containers[0].env[1].name` as [(spec, None), ..., (containers, "0"), (env, "1"), ...]."""
    out: list[tuple[str, str | None]] = []
    for match in _SEGMENT.finditer(path.strip().lstrip(".")):
        key, index = match.group(1), match.group(2)
        out.append((key, index[1:-1] if index else None))
    return out


def _env_index(manifest: Mapping[str, Any], container: str | None, index: str | None) -> str | None:
    """The name of the env var a cause points at: by index `[1]`, or by key `[name="FOO"]`."""
    if index is None:
        return None
    keyed = re.fullmatch(r'name="(.*)"', index)
    if keyed:
        return keyed.group(1)
    spec = manifest.get("spec", {})
    # A LeaderWorkerSet's two templates carry the same env (the pool's), so the leader's names the index.
    template = spec.get("template") or spec.get("leaderWorkerTemplate", {}).get("leaderTemplate", {})
    containers = template.get("spec", {}).get("containers", [])
    position = int(container) if container is not None and container.isdigit() else 0
    try:
        env = containers[position].get("env", [])
        return str(env[int(index)]["name"])
    except (ValueError, IndexError, KeyError, TypeError):
        return None


def _container_field(
    parts: list[tuple[str, str | None]],
    container: str | None,
    block: str,
    pool: str | None,
    manifest: Mapping[str, Any],
    spec: Mapping[str, Any],
) -> str | None:
    """The service field behind `containers[container].<parts>` of a workload's pod template."""
    inner, inner_index = parts[0]
    if inner == "resources":
        return f"{block}.resources"
    if pool and inner == "volumeMounts":
        return "spec.model.volume"
    if inner == "image":
        return "spec.sglang.image" if pool else "spec.router.image"
    if pool and inner == "env":
        name = _env_index(manifest, container, inner_index)
        user_env = [str(var.get("name")) for var in spec.get(pool, {}).get("env", []) or []]
        if name is None:
            return f"{block}.env" if inner_index is None else None
        if name in user_env:
            return f"{block}.env[{user_env.index(name)}]"
    return None


def _pod_template_field(
    parts: list[tuple[str, str | None]],
    block: str,
    pool: str | None,
    manifest: Mapping[str, Any],
    spec: Mapping[str, Any],
) -> str | None:
    """The service field behind `spec.template.<parts>` of a workload (a pool's, or the router's)."""
    keys = [key for key, _ in parts]
    if keys[0] in ("labels", "metadata") and pool and "labels" in keys:
        return f"{block}.podLabels"
    if keys[0] in ("annotations", "metadata") and pool and "annotations" in keys:
        return f"{block}.podAnnotations"
    if keys[0] != "spec" or len(keys) < 2:
        return None
    what, index = parts[1]
    if pool and what == "nodeSelector":
        return f"{block}.nodeSelector"
    if pool and what == "tolerations":
        return f"{block}.tolerations" + (f"[{index}]" if index is not None and index.isdigit() else "")
    if pool and what == "affinity":
        return f"{block}.affinity"
    if pool and what == "volumes":
        return "spec.model.volume"
    if what != "containers" or len(keys) < 3:
        return None
    return _container_field(parts[2:], index, block, pool, manifest, spec)


def spec_field(field: str, manifest: Mapping[str, Any], spec: Mapping[str, Any]) -> str | None:
    """The DisaggSpecService field a child field comes from, when that is unambiguous; None otherwise.

    `manifest` is the rendered child the field belongs to and `spec` the service's spec (its JSON, camelCase): an
    env var is found in the pool's `env` by name, so operator-set variables map to nothing.
    """
    role = str(manifest.get("metadata", {}).get("labels", {}).get(c.LABEL_ROLE, ""))
    pool = role if role in c.POOLS else None
    block = f"spec.{role}" if role in c.ROLES else None
    parts = _parts(field)
    keys = [key for key, _ in parts]
    if manifest.get("kind") == "Service" and role == c.ROLE_ROUTER and keys[:2] == ["spec", "type"]:
        return "spec.router.serviceType"
    if manifest.get("kind") == c.LWS_KIND and keys[:2] == ["spec", "leaderWorkerTemplate"]:
        if keys[2:3] == ["size"]:
            return f"{block}.nodesPerInstance" if pool else None
        if keys[2:3] in (["leaderTemplate"], ["workerTemplate"]):
            # Either pod template of a multi-node group comes from the same pool fields as a Deployment's.
            parts = [("spec", None), ("template", None), *parts[3:]]
            keys = [key for key, _ in parts]
    elif manifest.get("kind") != "Deployment" or block is None:
        return None
    if block is None:
        return None
    if keys == ["spec", "replicas"]:
        return f"{block}.replicas"
    if keys[:2] != ["spec", "template"] or len(keys) < 3:
        return None
    return _pod_template_field(parts[2:], block, pool, manifest, spec)


def _cause_text(cause: Cause) -> str:
    return f"{cause.field.lstrip('.')}: {cause.message}" if cause.field else cause.message


def describe(refusal: Refusal, manifest: Mapping[str, Any] | None, spec: Mapping[str, Any] | None) -> str:
    """One refused child in plain words: which child, what the API server says is wrong, and the spec field."""
    causes = [cause for cause in refusal.causes if cause.message]
    if causes and refusal.status in (400, 422):
        texts = []
        for cause in causes:
            text = _cause_text(cause)
            origin = spec_field(cause.field, manifest, spec) if manifest is not None and spec is not None else None
            texts.append(f"{text} (from {origin})" if origin else text)
        what = "; ".join(texts)
    else:
        what = _strip(refusal.message)
        field = re.match(r"^\.?(spec\.[^:\s]+)", what)
        origin = (
            spec_field(field.group(1), manifest, spec)
            if field is not None and manifest is not None and spec is not None
            else None
        )
        if origin:
            what = f"{what} (from {origin})"
    return f"the API server refuses {refusal.child}: {what}"


def explain(
    refusals: Sequence[Refusal],
    manifests: Iterable[Mapping[str, Any]] = (),
    spec: Mapping[str, Any] | None = None,
    outcome: str = NOTHING_APPLIED,
) -> str:
    """Every refusal of one pass as one message (status, Event, admission), ending with what was done about it."""
    by_ref = {(str(m.get("kind")), str(m.get("metadata", {}).get("name"))): m for m in manifests}
    parts = [describe(refusal, by_ref.get((refusal.kind, refusal.name)), spec) for refusal in refusals]
    return "; ".join(parts) + f"; {outcome}"
