"""CEL building blocks: literals, per-release conditions, and a pool's effective speculative value, built from the
same `SpeculativeField` descriptions `disaggspec.api.effective` merges with in Python.

Every expression sits on the DisaggSpecServiceSpec node unless its rule says otherwise, so `self` is the spec.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from disaggspec.api.effective import PoolName, SpeculativeField
from disaggspec.constants import POOLS
from disaggspec.sglang.profiles import PROFILES, SGLangProfile


def quote(value: str) -> str:
    """A CEL string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def string_list(values: Iterable[str]) -> str:
    """A CEL list of string literals, sorted."""
    return "[" + ", ".join(quote(v) for v in sorted(values)) + "]"


def both(template: Callable[[PoolName], str]) -> str:
    """CEL that holds when `template(pool)` holds for prefill and for decode."""
    return " && ".join(f"({template(p)})" for p in POOLS)


def by_version(holds: Callable[[SGLangProfile], str]) -> str:
    """CEL that is true when `holds(profile)` is true for the profile of spec.sglang.version."""
    parts = [f"(self.sglang.version == {quote(v)} && ({holds(p)}))" for v, p in sorted(PROFILES.items())]
    return "(" + " || ".join(parts) + ")"


def versions_where(flag: Callable[[SGLangProfile], bool]) -> str:
    """A CEL list of the releases whose profile has `flag`."""
    return string_list(v for v, p in PROFILES.items() if flag(p))


def effective(p: PoolName, field: SpeculativeField[Any], unset: str | None = None, *, root: str = "self") -> str:
    """CEL for a pool's effective `field`: the pool's override if set, else the shared value. A field the shared
    block may leave unset needs `unset`, the CEL it stands for when neither block sets it. `root` is `oldSelf` in a
    transition rule."""
    mine = f"{root}.{p}.speculative"
    shared = f"{root}.speculative.{field.wire}"
    if field.always_set != (unset is None):
        raise ValueError(f"{field.wire}: give `unset` exactly when spec.speculative may leave the field unset")
    fallback = shared if unset is None else f"(has({shared}) ? {shared} : {unset})"
    return f"(has({mine}) && has({mine}.{field.wire}) ? {mine}.{field.wire} : {fallback})"


def is_set(p: PoolName, field: SpeculativeField[Any]) -> str:
    """CEL: the pool's effective `field` has a value (an optional field set by the pool or the shared block)."""
    if field.always_set:
        raise ValueError(f"{field.wire} always has a value")
    return (
        f"((has(self.{p}.speculative) && has(self.{p}.speculative.{field.wire})) || has(self.speculative.{field.wire}))"
    )


def effective_part(p: PoolName, field: SpeculativeField[Any], part: str) -> str:
    """CEL for `<part>` of a pool's effective object-valued `field` ('' when unset): the pool's object replaces the
    shared one as a whole, so a part the pool leaves out is not taken from the shared object."""
    mine = f"self.{p}.speculative.{field.wire}"
    shared = f"self.speculative.{field.wire}"
    return (
        f"(has(self.{p}.speculative) && has({mine}) ? (has({mine}.{part}) ? {mine}.{part} : '') : "
        f"(has({shared}) && has({shared}.{part}) ? {shared}.{part} : ''))"
    )


def spec_ref(path: str) -> str:
    """CEL on the spec node for a field path under `spec.`."""
    if not path.startswith("spec."):
        raise ValueError(f"{path} is not under spec")
    return "self." + path.removeprefix("spec.")


def spec_field(path: str) -> str:
    """The fieldPath, relative to the spec node, of a field path under `spec.`."""
    return spec_ref(path).removeprefix("self")
