"""A container's environment and command line as the kubelet resolves them before it starts the container; pure.

`resolve_container(pod, container, lookup)` returns the copy of the container a launcher receives (`plan.py`): `env`
as plain `{name, value}` entries (`envFrom` folded in, `valueFrom` resolved, `$(VAR)` expanded) and `command`/`args`
expanded with it. ConfigMaps and Secrets come through `lookup`, so this module never talks to the API itself.

Kubelet rules followed: `envFrom` sources first (each key, with the source's prefix; keys that are not valid variable
names are skipped), then `env` in order, later entries overriding earlier ones; a literal `value` has `$(VAR)`
expanded against the variables defined before it (`$$` is a literal `$`, an unknown `$(VAR)` stays as written); a
missing ConfigMap, Secret or key fails the container (`EnvError`, the kubelet's CreateContainerConfigError) unless the
reference is `optional`. Not done: the Service link variables (`<SVC>_SERVICE_HOST`, ...), and `resourceFieldRef`
(dropped with a note).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

SourceLookup = Callable[[str, str, str], dict[str, str] | None]
"""`lookup(kind, namespace, name)`: the data of ConfigMap or Secret `name` (kind "ConfigMap" or "Secret"; Secret
values already base64-decoded), or None when it does not exist."""

_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_SUBSCRIPT = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


class EnvError(ValueError):
    """A required ConfigMap, Secret, key or field is missing: the container cannot start yet."""


@dataclass
class ResolvedContainer:
    """The container a launcher receives, and the notes (skipped entries) worth a log line."""

    container: dict[str, Any]
    env: dict[str, str]
    notes: list[str] = field(default_factory=list)


def expand(text: str, env: dict[str, str]) -> str:
    """The kubelet's `$(VAR)` expansion: `$(NAME)` becomes NAME's value when NAME is defined and stays as written
    otherwise, `$$` is a literal `$`, any other `$` is kept."""
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "$" or i + 1 >= len(text):
            out.append(char)
            i += 1
            continue
        following = text[i + 1]
        if following == "$":
            out.append("$")
            i += 2
        elif following == "(":
            close = text.find(")", i + 2)
            if close < 0:
                out.append("$(")
                i += 2
                continue
            name = text[i + 2 : close]
            out.append(env.get(name, f"$({name})"))
            i = close + 1
        else:
            out.append("$")
            i += 1
    return "".join(out)


def _format_map(values: dict[str, str]) -> str:
    return "\n".join(f'{key}="{values[key]}"' for key in sorted(values))


def field_value(pod: dict[str, Any], path: str) -> str:
    """The value of a downward-API `fieldRef.fieldPath` for `pod`."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    subscript = _SUBSCRIPT.match(path)
    if subscript:
        return str((metadata.get(subscript.group(1)) or {}).get(subscript.group(2), ""))
    simple: dict[str, Callable[[], str]] = {
        "metadata.name": lambda: str(metadata.get("name", "")),
        "metadata.namespace": lambda: str(metadata.get("namespace", "")),
        "metadata.uid": lambda: str(metadata.get("uid", "")),
        "metadata.labels": lambda: _format_map(metadata.get("labels") or {}),
        "metadata.annotations": lambda: _format_map(metadata.get("annotations") or {}),
        "spec.nodeName": lambda: str(spec.get("nodeName", "")),
        "spec.serviceAccountName": lambda: str(spec.get("serviceAccountName", "")),
        "status.hostIP": lambda: str(status.get("hostIP", "")),
        "status.hostIPs": lambda: ",".join(str(ip.get("ip", "")) for ip in status.get("hostIPs") or []),
        "status.podIP": lambda: str(status.get("podIP", "")),
        "status.podIPs": lambda: ",".join(str(ip.get("ip", "")) for ip in status.get("podIPs") or []),
    }
    if path not in simple:
        raise EnvError(f"unsupported fieldRef.fieldPath {path!r}")
    return simple[path]()


def _source(lookup: SourceLookup, kind: str, namespace: str, name: str, optional: bool) -> dict[str, str] | None:
    data = lookup(kind, namespace, name)
    if data is None and not optional:
        raise EnvError(f'{kind.lower()} "{name}" not found')
    return data


def resolve_env(
    pod: dict[str, Any], container: dict[str, Any], lookup: SourceLookup
) -> tuple[dict[str, str], list[str]]:
    """The container's environment (insertion order = kubelet order) and notes on the entries that were skipped."""
    namespace = str((pod.get("metadata") or {}).get("namespace", "default"))
    env: dict[str, str] = {}
    notes: list[str] = []
    for source in container.get("envFrom") or []:
        prefix = str(source.get("prefix", ""))
        for kind, key in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
            ref = source.get(key)
            if ref is None:
                continue
            data = _source(lookup, kind, namespace, str(ref.get("name", "")), bool(ref.get("optional", False)))
            for name in sorted(data or {}):
                full = prefix + name
                if _ENV_NAME.match(full):
                    env[full] = str((data or {})[name])
                else:
                    notes.append(f"envFrom {kind.lower()} {ref.get('name')}: key {full!r} is not a valid name, skipped")
    for item in container.get("env") or []:
        name = str(item["name"])
        source = item.get("valueFrom")
        if source is None:
            env[name] = expand(str(item.get("value", "")), env)
            continue
        if "fieldRef" in source:
            env[name] = field_value(pod, str(source["fieldRef"].get("fieldPath", "")))
        elif "configMapKeyRef" in source or "secretKeyRef" in source:
            kind, ref = (
                ("ConfigMap", source["configMapKeyRef"])
                if "configMapKeyRef" in source
                else ("Secret", source["secretKeyRef"])
            )
            optional = bool(ref.get("optional", False))
            data = _source(lookup, kind, namespace, str(ref.get("name", "")), optional)
            key = str(ref.get("key", ""))
            if data is not None and key in data:
                env[name] = str(data[key])
            elif not optional:
                raise EnvError(f"couldn't find key {key} in {kind} {namespace}/{ref.get('name')}")
        elif "resourceFieldRef" in source:
            notes.append(f"env {name}: resourceFieldRef is not resolved by the pod runner, left unset")
        else:
            notes.append(f"env {name}: unsupported valueFrom {sorted(source)}, left unset")
    return env, notes


def resolve_container(pod: dict[str, Any], container: dict[str, Any], lookup: SourceLookup) -> ResolvedContainer:
    """A deep copy of `container` with `env` resolved (plain name/value entries, no `envFrom`) and `command`/`args`
    expanded, as a launcher receives it. Raises `EnvError` when a required reference is missing."""
    env, notes = resolve_env(pod, container, lookup)
    resolved = copy.deepcopy(container)
    resolved.pop("envFrom", None)
    resolved["env"] = [{"name": name, "value": value} for name, value in env.items()]
    for key in ("command", "args"):
        if key in resolved and resolved[key] is not None:
            resolved[key] = [expand(str(part), env) for part in resolved[key]]
    return ResolvedContainer(resolved, env, notes)
