"""The string syntaxes the content rules check, each one regular expression read the same way by Python's `re` and
by CEL's RE2 (`matches`): only classes, groups, alternation and bounded repeats both engines share, every character
class spelled out (no `\\w` or `\\s`, which the two engines define differently), anchored with `^...$` and matched
with `re.fullmatch` in Python. Also where a value is a Kubernetes quantity, and what it is worth.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Final

_LABEL: Final = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN: Final = rf"{_LABEL}(\.{_LABEL})*"
_NAME_PART: Final = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_PRINTABLE: Final = r"[^/\x00-\x20\x7f]"
"""A path character: not '/', whitespace or a control character."""

DNS_SUBDOMAIN: Final = rf"^{_SUBDOMAIN}$"
"""An object name (Secret, ConfigMap, PersistentVolumeClaim): lowercase DNS labels joined by dots."""
QUALIFIED_NAME: Final = rf"^({_SUBDOMAIN}/)?{_NAME_PART}$"
"""A label or annotation key: an optional DNS subdomain prefix and '/', then a name of at most 63 characters."""
LABEL_VALUE: Final = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"
"""A label value: empty, or at most 63 characters of alphanumerics, '-', '_', '.', alphanumeric at both ends."""

_HOST_PART: Final = r"[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?"
_PATH_PART: Final = r"[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*"
IMAGE_REFERENCE: Final = (
    rf"^({_HOST_PART}(\.{_HOST_PART})*(:[0-9]+)?/)?{_PATH_PART}(/{_PATH_PART})*"
    r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?$"
)
"""An image reference: optional registry host[:port]/, lowercase path components, optional :tag, optional digest."""

_REPO_PART: Final = r"[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?"
HF_REPO_ID: Final = rf"^{_REPO_PART}(/{_REPO_PART})?$"
"""A Hugging Face repo id ([owner/]name); the Hub also forbids '--' and '..' in it (checked beside the pattern)."""
ABSOLUTE_PATH: Final = rf"^(/{_PRINTABLE}+)+/?$"
"""An absolute path of printable segments (a trailing '/' allowed)."""
NORMAL_PATH: Final = rf"^(/{_PRINTABLE}+)+$"
"""An absolute path of printable segments without a trailing '/'."""
DOT_SEGMENT: Final = r"(^|/)\.\.?(/|$)"
"""Found (not full-matched) in a path with a '.' or '..' segment."""
REVISION: Final = r"^[A-Za-z0-9_][A-Za-z0-9_./-]*$"
"""A git branch, tag or commit as the Hub takes it (also refs/pr/<n>); '..' and '//' are checked beside it."""
SERVED_NAME: Final = r"^[^-\x00-\x20\x7f][^\x00-\x20\x7f]*$"
"""A name passed as a flag value: printable, no whitespace, not starting with '-' (argparse would read a flag)."""

NATIVE_RESOURCE: Final = r"^(cpu|memory|ephemeral-storage|hugepages-[0-9]+(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?)$"
"""The container resources Kubernetes defines itself; every other key must be an extended resource."""
EXTENDED_RESOURCE: Final = rf"^{_SUBDOMAIN}/{_NAME_PART}$"
"""A domain-prefixed extended resource name."""
RESERVED_RESOURCE: Final = r"^(([^/]*\.)?kubernetes\.io/|requests\.)"
"""Found (not full-matched) in a key Kubernetes keeps for itself: its own domain, and quota's `requests.` form."""
GPU_INDEX: Final = r"^(0|[1-9][0-9]*)$"
"""A GPU index as SGLang's JSON map and int() agree on: decimal, no sign, no leading zero, ASCII digits only."""


def full(pattern: str, value: str) -> bool:
    """Whether `value` matches the anchored `pattern` as CEL's `value.matches(pattern)` would."""
    return re.fullmatch(pattern, value) is not None


def found(pattern: str, value: str) -> bool:
    """Whether `pattern` occurs in `value` (CEL's `matches` is a search)."""
    return re.search(pattern, value) is not None


_QUANTITY: Final = re.compile(
    r"(?P<sign>[+-]?)(?P<number>[0-9]+(\.[0-9]*)?|\.[0-9]+)"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?"
)
_SUFFIX: Final[dict[str, Fraction]] = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    **{s: Fraction(2 ** (10 * (i + 1))) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
}


def quantity(value: int | str) -> Fraction | None:
    """The exact value of a Kubernetes quantity (`1`, `500m`, `1.5Gi`, `1e3`), or None when `value` is not one (what
    CEL's `isQuantity` and `quantity(...)` decide on the API server)."""
    text = str(value)
    match = _QUANTITY.fullmatch(text)
    if match is None:
        return None
    suffix = match["suffix"] or ""
    scale = Fraction(10) ** int(suffix[1:]) if suffix[:1] in ("e", "E") else _SUFFIX[suffix]
    number = Fraction(match["number"]) * scale
    return -number if match["sign"] == "-" else number


def quantity_cel(expr: str) -> str:
    """CEL: the quantity of `expr` (an int-or-string value)."""
    return f"quantity(string({expr}))"


def is_quantity_cel(expr: str) -> str:
    """CEL: `expr` (an int-or-string value) is a quantity."""
    return f"isQuantity(string({expr}))"
