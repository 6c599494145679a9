"""What the generated flag tables (`_flags_<version>.py`) record about each option of a release's server parser:
the `Option` row (its argparse dest, how many values it takes, their type and choices), and the one question
every reader asks of it: does this token convert to a value the real parser would accept. Pure facts and argparse's
own conversions; nothing here imports SGLang.
"""

from __future__ import annotations

import json
from typing import Final, Literal, NamedTuple

ValueType = Literal["int", "float", "str", "json", "other"]
"""The converter argparse applies to each value: `int`, `float`, `str` (also no `type=`), `json` (`json.loads`), or
`other` (a release-specific function such as `human_readable_int`, whose accepted values are not re-implemented)."""
Nargs = int | Literal["?", "+", "*"] | None
"""argparse's `nargs` as the action has it: 0 takes no value (store_true/false, store_const, BooleanOptionalAction),
None exactly one, `?` zero or one, `+` one or more, `*` zero or more, a positive int exactly that many."""

VALUE_TYPES: Final[tuple[ValueType, ...]] = ("int", "float", "str", "json", "other")


class Option(NamedTuple):
    """One action of a release's server-args parser, keyed in `OPTIONS` by its canonical option string."""

    dest: str
    nargs: Nargs
    value: ValueType | None
    """None exactly when the option takes no value (nargs 0)."""
    choices: tuple[str | int | float, ...] = ()
    """The allowed values after conversion, when the action restricts them (empty: any)."""


def converts(option: Option, token: str) -> bool:
    """Whether argparse would accept `token` as one value of `option`: its converter succeeds (for `other`, assumed)
    and the converted value is one of its choices, if any."""
    value: object
    try:
        if option.value == "int":
            value = int(token)
        elif option.value == "float":
            value = float(token)
        elif option.value == "json":
            value = json.loads(token)
        else:
            value = token
    except ValueError:  # json.JSONDecodeError is a ValueError
        return False
    if option.choices and option.value != "other":
        return value in option.choices
    return True
