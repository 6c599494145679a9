"""Reads an extraArgs list the way the release's argparse parser would, from its generated `OPTIONS` table: every
element is `--option`, `--option=value`, or a value the option before it takes (as many as its nargs allows). What
argparse would refuse, or read differently from what the user meant, is reported per element instead: single-dash
tokens (`-h` prints the help and exits 0; a lone `-` is a positional), bare words (the server takes no positional
argument), options not spelled exactly (argparse accepts unique abbreviations, 0.5.2 server_args.py:2563 and 0.5.23
server_args.py:679 leave allow_abbrev on), a value of the wrong type or outside the choices (which also catches a
second option smuggled after a space inside one element), a value that starts with `-` (argparse reads it as the
next option and the one before it loses its value), and `--` (every later element becomes positional). Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from disaggspec.sglang.options import Option, converts

NEGATIVE_NUMBER: Final = re.compile(r"^-\d+$|^-\d*\.\d+$")
"""argparse's `_negative_number_matcher`: such a token is a value, not an option, in a parser (SGLang's) that has no
option looking like a negative number."""


@dataclass(frozen=True)
class ParsedOption:
    """One option found in the list: where, as written, its canonical spelling and table row, and its values."""

    index: int
    flag: str
    canonical: str
    option: Option
    values: tuple[tuple[int, str], ...]
    """(element index, value) of each value it took; a `--flag=value` value has the option's own index."""


@dataclass(frozen=True)
class ArgProblem:
    """An element argparse would refuse or misread, and what is wrong with it."""

    index: int
    problem: str


def _reads_as_option(token: str) -> bool:
    return token.startswith("-") and NEGATIVE_NUMBER.match(token) is None


def _value_counts(option: Option) -> tuple[int, int | None]:
    """(fewest, most) values the option takes when written without `=`; most None for no limit."""
    nargs = option.nargs
    if nargs is None:
        return 1, 1
    if nargs == "?":
        return 0, 1
    if nargs == "+":
        return 1, None
    if nargs == "*":
        return 0, None
    assert isinstance(nargs, int)
    return nargs, nargs


def _bad_value(flag: str, option: Option, value: str) -> str | None:
    """Why argparse would refuse `value` for `option`, or None."""
    if converts(option, value):
        return None
    if option.choices:
        return f"{value!r} is not one of the choices of {flag}: " + ", ".join(str(c) for c in option.choices)
    return f"{value!r} is not a valid {option.value} value of {flag}"


def _not_a_long_option(index: int, token: str) -> ArgProblem:
    """The problem with an element that is not a `--option` where an option was expected."""
    if token == "--":
        return ArgProblem(index, "'--' ends the options: argparse reads every later element as positional")
    if token == "-":
        return ArgProblem(index, "a lone '-' is a positional argument, which the server does not take")
    if _reads_as_option(token):
        return ArgProblem(
            index,
            f"{token!r} is a single-dash option: SGLang's server options are long (--name), and "
            "argparse reads -h as 'print the help and exit'",
        )
    return ArgProblem(
        index,
        f"{token!r} is a positional argument, which the server does not take: a value belongs "
        "right after its --option (or write --option=value)",
    )


def _with_inline_value(
    index: int, flag: str, canonical: str, option: Option, value: str
) -> ParsedOption | list[ArgProblem]:
    """A `--flag=value` element: the option with its one value, or why argparse would refuse it."""
    why: str | None
    if option.nargs == 0:
        why = f"{flag} takes no value"
    elif isinstance(option.nargs, int) and option.nargs > 1:
        why = f"{flag} takes {option.nargs} values: one element each"
    else:
        why = _bad_value(flag, option, value)
    if why is not None:
        return [ArgProblem(index, why)]
    return ParsedOption(index, flag, canonical, option, ((index, value),))


def _with_following_values(
    tokens: Sequence[str], index: int, flag: str, canonical: str, option: Option
) -> tuple[int, ParsedOption | list[ArgProblem]]:
    """A `--flag` element and the values it takes from the elements after it (as many as its nargs allows, up to
    the next element that reads as an option); the index after them, and the option or its problems."""
    fewest, most = _value_counts(option)
    i = index + 1
    values: list[tuple[int, str]] = []
    while (most is None or len(values) < most) and i < len(tokens) and not _reads_as_option(tokens[i]):
        values.append((i, tokens[i]))
        i += 1
    if len(values) < fewest:
        after = (
            f": the next element {tokens[i]!r} starts with '-', so argparse reads it as an option"
            if (i < len(tokens))
            else ""
        )
        return i, [ArgProblem(index, f"{flag} needs {fewest} value(s){after}")]
    bad = [ArgProblem(at, why) for at, value in values if (why := _bad_value(flag, option, value))]
    return i, bad or ParsedOption(index, flag, canonical, option, tuple(values))


def _read_option(
    tokens: Sequence[str], index: int, options: Mapping[str, Option], aliases: Mapping[str, str]
) -> tuple[int, ParsedOption | list[ArgProblem]]:
    """The `--option` element at `index` with its values; the index of the next element to read, and the option or
    its problems."""
    flag, equals, explicit = tokens[index].partition("=")
    canonical = aliases.get(flag, flag)
    option = options.get(canonical)
    if option is None:
        i = index + 1
        while i < len(tokens) and not _reads_as_option(tokens[i]):
            i += 1  # its would-be values: one report for the unknown option is enough
        return i, [ArgProblem(index, f"{flag} is not an option of this release (spell it in full; no abbreviation)")]
    if equals:
        return index + 1, _with_inline_value(index, flag, canonical, option, explicit)
    return _with_following_values(tokens, index, flag, canonical, option)


def parse(
    tokens: Sequence[str], options: Mapping[str, Option], aliases: Mapping[str, str]
) -> tuple[list[ParsedOption], list[ArgProblem]]:
    """Every option of `tokens` and every problem, in order (see the module docstring for what is a problem)."""
    parsed: list[ParsedOption] = []
    problems: list[ArgProblem] = []
    i = 0
    while i < len(tokens):
        found: ParsedOption | list[ArgProblem]
        if tokens[i].startswith("--") and tokens[i] != "--":
            i, found = _read_option(tokens, i, options, aliases)
        else:
            found = [_not_a_long_option(i, tokens[i])]
            i += 1
        if isinstance(found, ParsedOption):
            parsed.append(found)
        else:
            problems += found
    return parsed, problems
