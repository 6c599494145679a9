"""Repairing a child that another field manager's edit made unappliable; pure: no kopf, no Kubernetes client, no I/O.

**The failure.** Server-side apply merges the operator's manifest into the live object. Lists Kubernetes declares
associative (container ports keyed by `containerPort`+`protocol`, Service ports by `port`+`protocol`, containers,
env, volumes, ...) are merged item by item, by key, and an item another field manager owns is never removed by the
operator's apply. When a person edits the *key* of one of the operator's items (`kubectl edit` of a container port
number, a Service port), the edited item is a new item owned by that person's manager, and the operator's apply adds
its own item back next to it: two ports named `http`, which validation refuses (`Duplicate value: "http"`). The same
happens with a field of a one-of group (a probe's handler replaced by `exec`: the operator's `httpGet` comes back
next to it, "may not specify more than 1 handler type"; a PodDisruptionBudget's `maxUnavailable` replaced by
`minAvailable`: "cannot be both set"). The render alone is valid; only its merge with the foreign field is not.
Before, every pass dry-ran, found the refusal, and applied nothing at all: the whole service froze until a person
reverted the edit.

**Options weighed.**
(a) `force=true`, which the operator already sends, does not help: force takes over *conflicting* fields (the same
    field set to another value by another manager); the foreign item has another key, so it is another field, with
    no conflict to force, and stays.
(b) Applying an empty configuration under the foreign manager's name would make the API server drop its fields, but
    that impersonates a person's (or a tool's) manager in the audit trail and in managedFields: never.
(c) Deleting and recreating the child always works, but it is the most expensive repair: a pool Deployment's
    replacement restarts every GPU server of the pool (minutes to tens of minutes of model loading, requests in
    flight dropped), and a new router Service gets a new ClusterIP that clients may have cached.
(d) **Chosen:** one JSON patch (RFC 6902) per refused child that removes exactly the foreign fields that make the
    merged form invalid and, in the same request, adds back the operator's own values next to them where the live
    object lacks them (a probe whose only handler was the foreign `exec` gets the rendered `httpGet`: the patch must
    be valid by itself). Each removal is guarded by a `test` of the value it removes (a list item found by its key
    is tested whole), so a concurrent change makes the patch fail instead of removing the wrong list item; not by
    the `resourceVersion`, which the workload controllers' status writes move on all the time during a rollout.
    Then the normal server-side apply (force) writes the operator's form. The foreign manager's managedFields entry
    loses exactly the removed fields (its other fields stay its own). The patch is sent as `REPAIR_FIELD_MANAGER`,
    not as the operator's apply manager, so the values it restores never become an Update-owned copy of the
    operator's configuration; the apply then co-owns them. Pods restart only when the pod template changed, which
    the edit had already done. Deleting and recreating (c) is not done at all: what (d) cannot repair is reported as
    before (Degraded=True, ChildRefused), and a person decides.

**What is removed.** `decide` reads the live object's `metadata.managedFields`: every field or list item owned by a
manager other than the operator (entries of a subresource such as `status` or `scale` excluded), under `spec`, that
the operator owns nothing at or below. A node is taken whole only where the manager owns the node itself (a list
item, a leaf, a node marked `.`) and the operator owns nothing in it; otherwise it is descended into, so a list the
manager only added items to, or an operator-owned container someone else once created, is never removed whole.
Of those, the first round (`targeted`) keeps the ones the refusal points at: a `Duplicate value: V` cause at
`list[i].f` selects the foreign items of that list whose `f` is V; any other cause selects foreign fields at, below,
or next to (same parent) its field; a refusal without a field selects every candidate. If the dry-run still refuses,
the second round removes every foreign candidate under `spec` (the child in the operator's form, plus what the API
server defaults). Only a child that exists and whose *render alone* the API server accepts is repaired (`apply`
finds out with a dry-run create, which answers AlreadyExists only after validation and admission passed), so a
foreign field is never removed because the user's own spec is invalid. Foreign additions that conflict with nothing
(an env var, a sidecar, an owner reference) are never touched: a child is only repaired when the API server refuses
it.

The repair's `message` names the child, each removed field, the field manager that set it (and how: Update, Apply)
and what the API server said; the reconciler posts it as a Warning Event `ForeignEditReverted` on the service.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from disaggspec.childrefusal import Refusal
from disaggspec.drift import KEY_DEFAULTS

SCOPE: Final = ("f:spec",)
"""Where foreign fields may be removed: the object's spec (metadata, such as foreign labels, annotations and owner
references, never makes a child's merged form invalid)."""
REPAIR_FIELD_MANAGER: Final = "disaggspec-operator-repair"
"""The field manager of the repair patch. It owns only the operator's values the patch restores next to a removed
field (so the intermediate object is valid); it is not the operator's apply manager, so a later repair treats what
it owns like any other foreign field."""
TARGETED: Final = "targeted"
EVERYTHING: Final = "everything"
ROUNDS: Final = (TARGETED, EVERYTHING)
"""The rounds `apply` tries, in order, each confirmed by a dry-run."""

Path = tuple[str, ...]
"""A managedFields path: `f:<field>`, `k:<key json>` (an associative list item), `v:<value json>` (a set item),
`i:<index>` (an atomic list item)."""

_DUPLICATE: Final = re.compile(r"Duplicate value: (.+)$")
_SEGMENT: Final = re.compile(r"([^.\[]+)((?:\[[^\]]*\])*)")


@dataclass(frozen=True)
class ForeignField:
    """A field (or a whole list item, or a whole subtree) another field manager owns."""

    manager: str
    operation: str
    """How the manager wrote it: Update (kubectl edit, patch, replace) or Apply (server-side apply)."""
    path: Path

    @property
    def field(self) -> str:
        """`spec.template.spec.containers[name=sglang].ports[containerPort=30001,protocol=TCP]`."""
        out = ""
        for step in self.path:
            kind, _, raw = step.partition(":")
            if kind == "f":
                out += f".{raw}" if out else raw
            elif kind == "k":
                key = json.loads(raw)
                out += "[" + ",".join(f"{name}={value}" for name, value in key.items()) + "]"
            else:
                out += f"[{raw}]"
        return out


@dataclass(frozen=True)
class Repair:
    """What to remove from one refused child, and the JSON patch that does it."""

    kind: str
    name: str
    removed: tuple[ForeignField, ...]
    patch: tuple[dict[str, Any], ...]
    """RFC 6902 operations: a `test` of each value to remove, the `add`s of the operator's values, then each
    `remove`, last index first."""
    refusal: str
    """What the API server said about the merged form."""
    round: str

    @property
    def message(self) -> str:
        fields = "; ".join(f"{f.field} (set by field manager {f.manager!r}, {f.operation})" for f in self.removed)
        return (
            f"{self.kind} {self.name}: removed {fields}: the operator's apply merged with it is invalid "
            f"({self.refusal}); the operator's form is applied again"
        )


def _ensure_map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _nodes(fields: Mapping[str, Any], prefix: Path = ()) -> Iterator[Path]:
    """Every node (field, list item) of a `fieldsV1` tree, outermost first; `.` (the node itself) is not a step."""
    for step, sub in fields.items():
        if step == ".":
            continue
        path = (*prefix, step)
        yield path
        yield from _nodes(_ensure_map(sub), path)


def _tree(entry: Mapping[str, Any]) -> Mapping[str, Any]:
    return _ensure_map(entry.get("fieldsV1"))


def _subtree(tree: Mapping[str, Any], path: Path) -> Mapping[str, Any] | None:
    node: Mapping[str, Any] = tree
    for step in path:
        if step not in node:
            return None
        node = _ensure_map(node[step])
    return node


def foreign_candidates(live: Mapping[str, Any], own: str) -> list[ForeignField]:
    """The outermost fields under `spec` that managers other than `own` own and `own` owns nothing at or below."""
    entries = [_ensure_map(e) for e in live.get("metadata", {}).get("managedFields") or []]
    ours: set[Path] = set()
    for entry in entries:
        if entry.get("manager") == own and not entry.get("subresource"):
            ours.update(_nodes(_tree(entry)))
    ours_prefixes = {path[:n] for path in ours for n in range(1, len(path) + 1)}
    found: list[ForeignField] = []
    seen: set[Path] = set()
    for entry in entries:
        if entry.get("manager") == own or entry.get("subresource"):
            continue
        manager, operation = str(entry.get("manager") or "(unnamed)"), str(entry.get("operation") or "")
        scope = _subtree(_tree(entry), SCOPE)
        if scope is None:
            continue

        def walk(node: Mapping[str, Any], prefix: Path) -> Iterator[Path]:
            for step, sub in node.items():
                if step == ".":
                    continue
                path = (*prefix, step)
                inner = _ensure_map(sub)
                # A node the manager owns as a whole (a list item, a leaf, or one marked `.`) with nothing of the
                # operator's at or below is removed whole; a plain parent (`f:ports` holding some items) is not.
                whole = not step.startswith("f:") or not inner or "." in inner
                if whole and path not in ours_prefixes:
                    yield path
                else:
                    yield from walk(inner, path)

        for path in walk(scope, SCOPE):
            if path not in seen:
                seen.add(path)
                found.append(ForeignField(manager, operation, path))
    return found


def _normal(path: Path) -> list[str]:
    """A managedFields path as field names, list steps as `[]`: (f:spec, f:ports, k:{..}) -> [spec, ports, []]."""
    out: list[str] = []
    for step in path:
        kind, _, raw = step.partition(":")
        out.append(raw if kind == "f" else "[]")
    return out


def _cause_steps(field: str) -> list[str]:
    """`spec.template.spec.containers[0].ports[1].name` -> [spec, template, spec, containers, [], ports, [], name]."""
    out: list[str] = []
    for match in _SEGMENT.finditer(field.strip().lstrip(".")):
        out.append(match.group(1))
        out.extend("[]" for _ in re.findall(r"\[[^\]]*\]", match.group(2)))
    return out


def _starts(path: Sequence[str], prefix: Sequence[str]) -> bool:
    return list(path[: len(prefix)]) == list(prefix)


def _value(live: Mapping[str, Any], path: Path) -> Any:
    """The live value at a managedFields path, or None when it cannot be found."""
    node: Any = live
    for step in path:
        kind, _, raw = step.partition(":")
        if kind == "f":
            node = node.get(raw) if isinstance(node, Mapping) else None
        elif kind == "i":
            node = node[int(raw)] if isinstance(node, list) and int(raw) < len(node) else None
        else:
            index = _index(node, kind, raw)
            node = node[index] if index is not None else None
        if node is None:
            return None
    return node


def _matches(item: Any, key: Mapping[str, Any]) -> bool:
    """Whether a list item has `key` (a key field the render leaves to the API server's default counts as set)."""
    return isinstance(item, Mapping) and all(
        item.get(name, KEY_DEFAULTS.get(name)) == value for name, value in key.items()
    )


def _index(items: Any, kind: str, raw: str) -> int | None:
    if not isinstance(items, list):
        return None
    if kind == "i":
        return int(raw) if int(raw) < len(items) else None
    wanted = json.loads(raw)
    for index, item in enumerate(items):
        if (kind == "k" and _matches(item, wanted)) or (kind == "v" and item == wanted):
            return index
    return None


def pointer(live: Mapping[str, Any], path: Path) -> tuple[str, tuple[int, ...]] | None:
    """The JSON pointer of a managedFields path in `live` (list items found by key), and the list indices on the way
    (to order removals); None when the path does not resolve."""
    node: Any = live
    parts: list[str] = []
    indices: list[int] = []
    for step in path:
        kind, _, raw = step.partition(":")
        if kind == "f":
            if not isinstance(node, Mapping) or raw not in node:
                return None
            node = node[raw]
            parts.append(raw.replace("~", "~0").replace("/", "~1"))
        else:
            index = _index(node, kind, raw)
            if index is None:
                return None
            node = node[index]
            parts.append(str(index))
            indices.append(index)
    return "/" + "/".join(parts), tuple(indices)


def _selected_by(candidate: ForeignField, cause_field: str, cause_message: str, live: Mapping[str, Any]) -> bool:
    steps = _cause_steps(cause_field)
    if not steps:
        return True
    mine = _normal(candidate.path)
    duplicate = _DUPLICATE.search(cause_message)
    if duplicate and len(steps) >= 2 and steps[-2] == "[]":
        # `list[i].f: Duplicate value: V`: the foreign items of that list whose `f` is V.
        if mine != steps[:-1]:
            return False
        item = _value(live, candidate.path)
        try:
            value = json.loads(duplicate.group(1))
        except ValueError:
            value = duplicate.group(1).strip('"')
        return isinstance(item, Mapping) and item.get(steps[-1]) == value
    parent = steps[:-1] if len(steps) > 1 else steps
    return _starts(mine, steps) or _starts(steps, mine) or _starts(mine, parent)


def select(candidates: Sequence[ForeignField], refusal: Refusal, live: Mapping[str, Any]) -> list[ForeignField]:
    """The candidates the refusal's causes point at (every candidate for a refusal that names no field)."""
    causes = [cause for cause in refusal.causes if cause.field]
    if not causes:
        return list(candidates)
    return [cand for cand in candidates if any(_selected_by(cand, c.field, c.message, live) for c in causes)]


def _refusal_text(refusal: Refusal) -> str:
    causes = [f"{c.field}: {c.message}" if c.field else c.message for c in refusal.causes if c.message]
    return "; ".join(causes) if causes else refusal.message


def _key_of(item: Any, names: Sequence[str]) -> tuple[Any, ...] | None:
    if not isinstance(item, Mapping):
        return None
    return tuple(item.get(name, KEY_DEFAULTS.get(name)) for name in names)


def _restore(
    desired: Mapping[str, Any], live: Mapping[str, Any], removed: Sequence[ForeignField]
) -> list[dict[str, Any]]:
    """`add` operations that put back, next to each removed field, the operator's values the live object lacks.

    Removing a foreign field alone can leave an invalid object (a probe whose only handler was the foreign `exec`),
    and the patch must be valid by itself; the following apply then owns these values as usual. For a removed list
    item: the desired items of that list (matched by the removed item's key fields) that no remaining live item has;
    for a removed field: the desired fields of its parent object that live lacks. Appends and new fields never shift
    the index of an item a `remove` points at."""
    ops: list[dict[str, Any]] = []
    done: set[str] = set()
    for foreign in removed:
        parent = foreign.path[:-1]
        where = pointer(live, parent)
        want = _value(desired, parent) if parent else desired
        have = _value(live, parent) if parent else live
        if where is None or want is None or have is None:
            continue
        kind, _, raw = foreign.path[-1].partition(":")
        if kind == "k" and isinstance(want, list) and isinstance(have, list):
            names = list(json.loads(raw))
            gone = {_key_of(_value(live, f.path), names) for f in removed if f.path[:-1] == parent}
            kept = {_key_of(item, names) for item in have} - gone
            for item in want:
                key = _key_of(item, names)
                marker = f"{where[0]}/{key}"
                if key is not None and key not in kept and marker not in done:
                    done.add(marker)
                    ops.append({"op": "add", "path": f"{where[0]}/-", "value": item})
        elif kind == "f" and isinstance(want, Mapping) and isinstance(have, Mapping):
            for name, value in want.items():
                target = f"{where[0]}/{name.replace('~', '~0').replace('/', '~1')}"
                if name not in have and target not in done:
                    done.add(target)
                    ops.append({"op": "add", "path": target, "value": value})
    return ops


def decide(
    live: Mapping[str, Any],
    desired: Mapping[str, Any],
    refusal: Refusal,
    own: str,
    round_: str = TARGETED,
) -> Repair | None:
    """The repair of a child the API server refuses (`refusal`) although its render alone is valid: which foreign
    fields of `live` (the child as just read, with managedFields) to remove, what of `desired` (the manifest the
    operator applies) to put back next to them, and the patch; None when there is nothing to remove (the refusal is
    not a foreign manager's doing, or this round found nothing)."""
    candidates = foreign_candidates(live, own)
    chosen = select(candidates, refusal, live) if round_ == TARGETED else candidates
    # Two managers may own nested nodes (one a list item, the other a field in it): remove the outer one only.
    paths = {cand.path for cand in chosen}
    chosen = [cand for cand in chosen if not any(cand.path[:n] in paths for n in range(1, len(cand.path)))]
    located: list[tuple[tuple[int, ...], str, ForeignField]] = []
    for candidate in chosen:
        found = pointer(live, candidate.path)
        if found is not None:
            located.append((found[1], found[0], candidate))
    if not located:
        return None
    # Remove deepest and last items first, so no removal shifts the index of one still to come.
    located.sort(key=lambda entry: (entry[0], entry[1]), reverse=True)
    removed = tuple(candidate for _, _, candidate in sorted(located, key=lambda entry: entry[1]))
    # Each removal is guarded by a `test` of the value it removes (not of the resourceVersion, which the workload
    # controllers' status writes move on all the time): a concurrent change of those fields fails the whole patch.
    patch = [{"op": "test", "path": where, "value": _value(live, cand.path)} for _, where, cand in located]
    patch += _restore(desired, live, removed)
    patch += [{"op": "remove", "path": where} for _, where, _ in located]
    return Repair(refusal.kind, refusal.name, removed, tuple(patch), _refusal_text(refusal), round_)
