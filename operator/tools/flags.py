"""The flag-inventory generator: writes `disaggspec/sglang/_flags_<version>.py` from the pinned wheel's real parser.

It runs inside the per-version SGLang test venv (`images/sglang/tests/lib.sh`'s `ensure_venv`), with the unpacked
pristine wheel (and, for 0.5.2, `images/sglang/tests/stubs/<version>/`) on PYTHONPATH ahead of the repository's
`operator/` directory; `images/sglang/flags.sh [generate|check] [version|all]` (what `make generate` and
`make verify` run) sets that up. It builds the parser exactly as the server does (`argparse.ArgumentParser()`, then
`ServerArgs.add_cli_args(parser)` from `sglang.srt.server_args`) and records, for every action that has option
strings except the help action:

- `FLAGS`: every option string (`--tp-size`, `--tensor-parallel-size`, `--no-foo` of a `BooleanOptionalAction`, and
  single-dash ones, if any);
- `ALIASES`: for an action with several option strings, each of them (the canonical one included) -> the action's
  canonical option, its first long (`--`) option string, which is the one SGLang names it by;
- `DESTS`: each action's canonical option -> the `dest` argparse stores its value under;
- `OPTIONS`: each action's canonical option -> an `Option` (`disaggspec.sglang.options`): its dest, its `nargs` (0
  for actions that take no value: store_true/false, store_const, BooleanOptionalAction), the type of its values
  (`int`, `float`, `str`, `json` for `json.loads`, else `other`) and its choices, when set (in the parser's order).

`--check` writes nothing and exits 1 with a diff when the committed module differs. The output is deterministic
(sorted, one entry a line, already in `ruff format` style). SGLang is imported only inside `sglang_parser` and
`wheel_filename`, through importlib, so this module imports (and type-checks) without it.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, NamedTuple

from tools.common import repo_root, write_or_check

SUPPORTED_VERSIONS: Final = ("0.5.2", "0.5.23")
PARSER_MODULE: Final = "sglang.srt.server_args"
PARSER_SOURCE: Final = "sglang/srt/server_args.py"
LINE_LENGTH: Final = 120
"""pyproject's `[tool.ruff] line-length`: a longer dict entry is split so the module passes `ruff check` as written."""


class ActionFacts(NamedTuple):
    """One action's row of `OPTIONS`; the same fields, in the same order, as `disaggspec.sglang.options.Option`
    (repeated here so the generator imports nothing of the operator inside SGLang's venv)."""

    dest: str
    nargs: int | str | None
    value: str | None
    choices: tuple[str | int | float, ...] = ()


@dataclass(frozen=True)
class Inventory:
    """What one parser registers: see the module docstring for the four tables."""

    flags: frozenset[str]
    aliases: dict[str, str]
    dests: dict[str, str]
    options: Mapping[str, ActionFacts] = field(default_factory=dict)


_VALUE_TYPES: Final[dict[object, str]] = {int: "int", float: "float", str: "str", None: "str", json.loads: "json"}
"""argparse converters -> the value type recorded; any other callable is `other`."""


def action_facts(action: argparse.Action) -> ActionFacts:
    """The OPTIONS row of one action: argparse's nargs (0 when it takes no value), value type and choices."""
    nargs = action.nargs
    if nargs == 0:
        return ActionFacts(action.dest, 0, None)
    if nargs is not None and not isinstance(nargs, int) and nargs not in ("?", "+", "*"):
        raise ValueError(f"{action.option_strings}: nargs {nargs!r} is not modelled")
    value = _VALUE_TYPES.get(action.type, "other")
    choices: tuple[str | int | float, ...] = ()
    if action.choices is not None:
        # A set has no order of its own: sort it so the output stays deterministic.
        items = list(action.choices) if isinstance(action.choices, list | tuple | range) else sorted(action.choices)
        if not all(isinstance(c, str | int | float) and not isinstance(c, bool) for c in items):
            raise ValueError(f"{action.option_strings}: choices {items!r} are not str, int or float")
        choices = tuple(items)
    return ActionFacts(action.dest, nargs, value, choices)


def canonical_option(option_strings: Sequence[str]) -> str:
    """An action's canonical option: its first long option string, else (a single-dash-only action) its first."""
    return next((o for o in option_strings if o.startswith("--")), option_strings[0])


def collect_inventory(parser: argparse.ArgumentParser) -> Inventory:
    """The inventory of `parser`'s optional actions, excluding the help action (`-h`/`--help`) and positionals."""
    flags: set[str] = set()
    aliases: dict[str, str] = {}
    dests: dict[str, str] = {}
    options: dict[str, ActionFacts] = {}
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or not action.option_strings:
            continue
        canonical = canonical_option(action.option_strings)
        if canonical in dests:
            raise ValueError(f"{canonical} names two actions")
        flags.update(action.option_strings)
        dests[canonical] = action.dest
        options[canonical] = action_facts(action)
        if len(action.option_strings) > 1:
            aliases.update((option, canonical) for option in action.option_strings)
    return Inventory(
        flags=frozenset(flags),
        aliases=dict(sorted(aliases.items())),
        dests=dict(sorted(dests.items())),
        options=dict(sorted(options.items())),
    )


def module_name(version: str) -> str:
    """`0.5.23` -> `_flags_0_5_23`."""
    return "_flags_" + version.replace(".", "_")


def output_path(version: str) -> Path:
    """The generated module's path, relative to the repository root."""
    return Path("operator/disaggspec/sglang") / f"{module_name(version)}.py"


def _str(value: str) -> str:
    # json.dumps quotes with double quotes, as ruff format does; every option string and dest is ASCII.
    return json.dumps(value)


def _set_lines(values: Iterable[str]) -> list[str]:
    return [f"        {_str(v)}," for v in sorted(values)]


def _dict_lines(name: str, table: dict[str, str]) -> list[str]:
    if not table:
        return [f"{name}: dict[str, str] = {{}}"]
    body: list[str] = []
    for key, value in sorted(table.items()):
        line = f"    {_str(key)}: {_str(value)},"
        if len(line) > LINE_LENGTH:  # split the way `ruff format` leaves a parenthesized value
            body += [f"    {_str(key)}: (", f"        {_str(value)}", "    ),"]
        else:
            body.append(line)
    return [f"{name}: dict[str, str] = {{", *body, "}"]


def _literal(value: str | int | float | None) -> str:
    return _str(value) if isinstance(value, str) else repr(value)


def _option_lines(facts: ActionFacts) -> list[str]:
    """The arguments of one `Option(...)`, each a line at 8 spaces (the exploded form); choices as a tuple."""
    args = [_str(facts.dest), _literal(facts.nargs), _literal(facts.value)]
    lines = [f"        {arg}," for arg in args]
    if facts.choices:
        items = [_literal(c) for c in facts.choices]
        one_line = "        (" + ", ".join(items) + ("," if len(items) == 1 else "") + "),"
        if len(one_line) <= LINE_LENGTH:
            lines.append(one_line)
        else:
            lines += ["        (", *(f"            {item}," for item in items), "        ),"]
    return lines


def _options_lines(options: Mapping[str, ActionFacts]) -> list[str]:
    if not options:
        return ["OPTIONS: dict[str, Option] = {}"]
    body: list[str] = []
    for key, facts in sorted(options.items()):
        args = _option_lines(facts)
        line = f"    {_str(key)}: Option(" + " ".join(a.strip() for a in args)[:-1] + "),"
        if len(line) <= LINE_LENGTH and not any(a.endswith("(") for a in args):
            body.append(line)
        else:  # the form `ruff format` keeps: one argument a line, with a trailing comma
            body += [f"    {_str(key)}: Option(", *args, "    ),"]
    return ["OPTIONS: dict[str, Option] = {", *body, "}"]


def render(inventory: Inventory, *, version: str, wheel: str) -> str:
    """The generated module's exact text."""
    multi = len(set(inventory.aliases.values()))
    doc = [
        f'"""Every option string the `sglang=={version}` server-args parser registers (generated; facts, not code).',
        "",
        f"Generated by `make generate` (`images/sglang/flags.sh generate {version}`, which runs `tools/flags.py`)",
        f"from the pinned wheel {wheel}.",
        f"Source: the `argparse` parser that `ServerArgs.add_cli_args` builds in `{PARSER_SOURCE}`, minus",
        "its help action (`-h`, `--help`). Do not edit: `make verify` fails when this file differs from that parser.",
        "",
        f"- `FLAGS`: every option string ({len(inventory.flags)} flags).",
        f"- `ALIASES`: each option string of an action that has several ({multi} actions) -> the action's canonical",
        "  option, its first long option string (so a canonical option maps to itself).",
        f"- `DESTS`: each action's canonical option ({len(inventory.dests)} actions) -> the argparse dest it stores",
        "  into; a flag's dest is `DESTS[ALIASES.get(flag, flag)]`.",
        "- `OPTIONS`: each action's canonical option -> `Option(dest, nargs, value type, choices)`",
        "  (`disaggspec.sglang.options`); nargs 0 takes no value.",
        '"""',
    ]
    lines = [
        *doc,
        "",
        "from disaggspec.sglang.options import Option",
        "",
        "FLAGS: frozenset[str] = frozenset(",
        "    {",
        *_set_lines(inventory.flags),
        "    }",
        ")",
        "",
        *_dict_lines("ALIASES", inventory.aliases),
        "",
        *_dict_lines("DESTS", inventory.dests),
        "",
        *_options_lines(inventory.options),
    ]
    return "\n".join(lines) + "\n"


def sglang_parser() -> argparse.ArgumentParser:
    """The server's parser, built by the SGLang on sys.path (the pristine wheel's tree)."""
    server_args = importlib.import_module(PARSER_MODULE)
    parser = argparse.ArgumentParser()
    server_args.ServerArgs.add_cli_args(parser)
    return parser


def wheel_filename(version: str) -> str:
    """The wheel's file name, from the dist-info next to the imported `sglang` package, which must be that version
    and the very tree the package was imported from (not an `sglang` installed in the venv)."""
    sglang = importlib.import_module("sglang")
    dist = importlib.metadata.distribution("sglang")
    if dist.version != version:
        raise SystemExit(f"flags: the sglang on sys.path is {dist.version}, not {version}")
    expected = Path(str(dist.locate_file("sglang/__init__.py"))).resolve()
    if sglang.__file__ is None or Path(sglang.__file__).resolve() != expected:
        raise SystemExit(f"flags: sglang was imported from {sglang.__file__}, not from its dist-info's tree {expected}")
    tags = [
        line.split(":", 1)[1].strip() for line in (dist.read_text("WHEEL") or "").splitlines() if line[:4] == "Tag:"
    ]
    if not tags:
        raise SystemExit("flags: the sglang dist-info has no WHEEL tags")
    parts = [t.split("-") for t in tags]
    compressed = "-".join(".".join(dict.fromkeys(p[i] for p in parts)) for i in range(3))
    return f"sglang-{dist.version}-{compressed}.whl"


def main(argv: Sequence[str] | None = None) -> int:
    """Write (or with --check, compare) one version's flag module; returns the process exit code."""
    parser = argparse.ArgumentParser(prog="python -m tools.flags", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", required=True, choices=SUPPORTED_VERSIONS, help="the sglang on sys.path")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 with a diff if the file is stale")
    parser.add_argument("--root", type=Path, default=None, help="repository root (default: this checkout)")
    args = parser.parse_args(argv)
    wheel = wheel_filename(args.version)
    text = render(collect_inventory(sglang_parser()), version=args.version, wheel=wheel)
    root = args.root or repo_root()
    stale = write_or_check(root, {output_path(args.version): text}, check=args.check)
    if stale:
        sys.stderr.write(
            f"{output_path(args.version)} differs from sglang {args.version}'s parser: run `make generate`\n"
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
