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


def parse(
    tokens: Sequence[str], options: Mapping[str, Option], aliases: Mapping[str, str]
) -> tuple[list[ParsedOption], list[ArgProblem]]:
    """Every option of `tokens` and every problem, in order (see the module docstring for what is a problem)."""
    parsed: list[ParsedOption] = []
    problems: list[ArgProblem] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token == "--":
            problems.append(ArgProblem(i, "'--' ends the options: argparse reads every later element as positional"))
            i += 1
            continue
        if not token.startswith("--"):
            if token == "-":
                problems.append(ArgProblem(i, "a lone '-' is a positional argument, which the server does not take"))
            elif _reads_as_option(token):
                problems.append(
                    ArgProblem(
                        i,
                        f"{token!r} is a single-dash option: SGLang's server options are long (--name), and "
                        "argparse reads -h as 'print the help and exit'",
                    )
                )
            else:
                problems.append(
                    ArgProblem(
                        i,
                        f"{token!r} is a positional argument, which the server does not take: a value belongs "
                        "right after its --option (or write --option=value)",
                    )
                )
            i += 1
            continue
        flag, equals, explicit = token.partition("=")
        canonical = aliases.get(flag, flag)
        option = options.get(canonical)
        i += 1
        if option is None:
            problems.append(
                ArgProblem(i - 1, f"{flag} is not an option of this release (spell it in full; no abbreviation)")
            )
            while i < len(tokens) and not _reads_as_option(tokens[i]):
                i += 1  # its would-be values: one report for the unknown option is enough
            continue
        if equals:
            if option.nargs == 0:
                problems.append(ArgProblem(i - 1, f"{flag} takes no value"))
            elif isinstance(option.nargs, int) and option.nargs > 1:
                problems.append(ArgProblem(i - 1, f"{flag} takes {option.nargs} values: one element each"))
            elif (why := _bad_value(flag, option, explicit)) is not None:
                problems.append(ArgProblem(i - 1, why))
            else:
                parsed.append(ParsedOption(i - 1, flag, canonical, option, ((i - 1, explicit),)))
            continue
        fewest, most = _value_counts(option)
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
            problems.append(ArgProblem(i - 1 - len(values), f"{flag} needs {fewest} value(s){after}"))
            continue
        bad = [ArgProblem(index, why) for index, value in values if (why := _bad_value(flag, option, value))]
        if bad:
            problems += bad
            continue
        parsed.append(ParsedOption(i - 1 - len(values), flag, canonical, option, tuple(values)))
    return parsed, problems
