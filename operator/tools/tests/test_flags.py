"""The flag-inventory generator's pure part (a fake parser in, module text out) and the committed `_flags_*.py`.

Building the real parser needs SGLang's test venv: `images/sglang/flags.sh check` (`make verify`) does that.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from disaggspec.sglang.options import VALUE_TYPES, Option
from tools import flags as gen
from tools.common import repo_root

LONG_WHEEL = "sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl"


def _fake_parser(*, reverse: bool = False) -> argparse.ArgumentParser:
    adds: list[tuple[tuple[str, ...], dict[str, object]]] = [
        (("--model-path", "--model"), {"type": str}),
        (("--tensor-parallel-size", "--tp-size"), {"type": int, "dest": "tp_size"}),
        (("--enable-thing",), {"action": argparse.BooleanOptionalAction}),
        (("--alpha",), {"action": "store_true"}),
        (("-v", "--verbose"), {"action": "count"}),
        (("-q",), {"action": "store_true"}),
        (("--a-very-long-option-name-that-sglang-could-well-have-one-day",), {"type": int}),
        (("positional",), {"nargs": "?"}),
    ]
    parser = argparse.ArgumentParser()
    for names, kwargs in reversed(adds) if reverse else adds:
        parser.add_argument(*names, **kwargs)  # type: ignore[arg-type]
    return parser


def _load(text: str) -> dict[str, object]:
    namespace: dict[str, object] = {}
    exec(compile(text, "<generated>", "exec"), namespace)
    return namespace


def test_inventory_of_a_fake_parser() -> None:
    inventory = gen.collect_inventory(_fake_parser())
    assert inventory.flags == {
        "--model-path",
        "--model",
        "--tensor-parallel-size",
        "--tp-size",
        "--enable-thing",
        "--no-enable-thing",
        "--alpha",
        "-v",
        "--verbose",
        "-q",
        "--a-very-long-option-name-that-sglang-could-well-have-one-day",
    }
    assert inventory.aliases == {
        "--model": "--model-path",
        "--model-path": "--model-path",
        "--tensor-parallel-size": "--tensor-parallel-size",
        "--tp-size": "--tensor-parallel-size",
        "--enable-thing": "--enable-thing",
        "--no-enable-thing": "--enable-thing",
        "-v": "--verbose",
        "--verbose": "--verbose",
    }
    assert inventory.dests == {
        "--model-path": "model_path",
        "--tensor-parallel-size": "tp_size",
        "--enable-thing": "enable_thing",
        "--alpha": "alpha",
        "--verbose": "verbose",
        "-q": "q",
        "--a-very-long-option-name-that-sglang-could-well-have-one-day": (
            "a_very_long_option_name_that_sglang_could_well_have_one_day"
        ),
    }
    assert list(inventory.aliases) == sorted(inventory.aliases) and list(inventory.dests) == sorted(inventory.dests)


def test_render_is_deterministic_sorted_and_round_trips() -> None:
    text = gen.render(gen.collect_inventory(_fake_parser()), version="0.5.2", wheel="sglang-0.5.2-py3-none-any.whl")
    again = gen.render(
        gen.collect_inventory(_fake_parser(reverse=True)), version="0.5.2", wheel="sglang-0.5.2-py3-none-any.whl"
    )
    assert text == again
    flags_block = text.split("FLAGS: frozenset[str] = frozenset(", 1)[1].split("\n)\n", 1)[0]
    entries = re.findall(r'^        ("[^"]+"),$', flags_block, flags=re.MULTILINE)
    assert entries == sorted(entries) and len(entries) == 11
    module = _load(text)
    inventory = gen.collect_inventory(_fake_parser())
    assert module["FLAGS"] == inventory.flags
    assert module["ALIASES"] == inventory.aliases
    assert module["DESTS"] == inventory.dests
    assert module["OPTIONS"] == inventory.options
    assert "sglang-0.5.2-py3-none-any.whl" in str(module["__doc__"])
    assert "make generate" in str(module["__doc__"])


def test_render_without_aliases() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only")
    module = _load(gen.render(gen.collect_inventory(parser), version="0.5.2", wheel="w.whl"))
    assert module["FLAGS"] == {"--only"} and module["ALIASES"] == {} and module["DESTS"] == {"--only": "only"}


def test_rendered_text_is_ruff_clean() -> None:
    ruff = Path(sys.executable).parent / "ruff"
    if not ruff.exists():
        pytest.skip(f"{ruff} missing")
    text = gen.render(gen.collect_inventory(_fake_parser()), version="0.5.23", wheel=LONG_WHEEL)
    name = str(repo_root() / gen.output_path("0.5.23"))
    for command in (["format", "--check", "--stdin-filename", name, "-"], ["check", "--stdin-filename", name, "-"]):
        got = subprocess.run([str(ruff), *command], input=text, capture_output=True, text=True, cwd=repo_root())
        assert got.returncode == 0, f"ruff {command[0]}:\n{got.stdout}{got.stderr}"


def test_a_resolved_conflict_keeps_the_last_action() -> None:
    parser = argparse.ArgumentParser(conflict_handler="resolve")
    parser.add_argument("--same", dest="first")
    parser.add_argument("--same", dest="second")
    inventory = gen.collect_inventory(parser)
    assert inventory.dests == {"--same": "second"}


def test_canonical_option() -> None:
    assert gen.canonical_option(["-v", "--verbose", "--loud"]) == "--verbose"
    assert gen.canonical_option(["-q"]) == "-q"


def _committed(version: str) -> ModuleType:
    return importlib.import_module(f"disaggspec.sglang.{gen.module_name(version)}")


@pytest.mark.parametrize("version", gen.SUPPORTED_VERSIONS)
def test_committed_module_is_consistent(version: str) -> None:
    module = _committed(version)
    flags: frozenset[str] = module.FLAGS
    aliases: dict[str, str] = module.ALIASES
    dests: dict[str, str] = module.DESTS
    assert flags and "--help" not in flags and "-h" not in flags
    assert set(aliases) <= flags
    assert set(aliases.values()) <= flags
    assert all(aliases[canonical] == canonical for canonical in aliases.values())
    assert set(dests) <= flags
    for flag in flags:
        assert aliases.get(flag, flag) in dests, flag
    # Every flag is one action's canonical option or an alias of one.
    assert flags == set(dests) | set(aliases)
    options: dict[str, Option] = module.OPTIONS
    assert set(options) == set(dests)
    for canonical, option in options.items():
        assert option.dest == dests[canonical]
        assert (option.nargs == 0) == (option.value is None), canonical
        assert option.value is None or option.value in VALUE_TYPES, canonical


def test_options_of_a_fake_parser() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, choices=[1, 2, 4])
    parser.add_argument("--ratio", type=float, nargs="?")
    parser.add_argument("--names", nargs="+", choices=["b", "a"])
    parser.add_argument("--cfg", type=json.loads)
    parser.add_argument("--size", type=lambda v: int(v.rstrip("k")) * 1000)
    parser.add_argument("--on", action=argparse.BooleanOptionalAction)
    parser.add_argument("--pair", nargs=2)
    parser.add_argument("--const", action="store_const", const=3)
    options = gen.collect_inventory(parser).options
    assert options == {
        "--cfg": ("cfg", None, "json", ()),
        "--const": ("const", 0, None, ()),
        "--count": ("count", None, "int", (1, 2, 4)),
        "--names": ("names", "+", "str", ("b", "a")),
        "--on": ("on", 0, None, ()),
        "--pair": ("pair", 2, "str", ()),
        "--ratio": ("ratio", "?", "float", ()),
        "--size": ("size", None, "other", ()),
    }
    module = _load(gen.render(gen.collect_inventory(parser), version="0.5.2", wheel="w.whl"))
    assert module["OPTIONS"] == options


def test_committed_options_match_known_parser_facts() -> None:
    # Facts read from the wheels' parsers: --tp-size takes one int; --enable-metrics none; --cuda-graph-bs a list.
    new, old = _committed("0.5.23"), _committed("0.5.2")
    assert new.OPTIONS["--tp-size"] == Option("tp_size", None, "int")
    assert old.OPTIONS["--tensor-parallel-size"] == Option("tensor_parallel_size", None, "int")
    assert new.OPTIONS["--enable-metrics"] == Option("enable_metrics", 0, None)
    assert old.OPTIONS["--cuda-graph-bs"] == Option("cuda_graph_bs", "+", "int")
    assert new.OPTIONS["--preferred-sampling-params"].value == "json"
    assert "fp8" in new.OPTIONS["--quantization"].choices


@pytest.mark.parametrize("version", gen.SUPPORTED_VERSIONS)
def test_committed_module_is_exactly_what_render_writes(version: str) -> None:
    """Re-rendering the committed tables gives the committed text: no hand edit, and the docstring names the wheel."""
    module = _committed(version)
    path = repo_root() / gen.output_path(version)
    text = path.read_text()
    wheel = re.search(r"pinned wheel (sglang-\S+\.whl)", text)
    assert wheel, "the docstring names the wheel it was generated from"
    assert wheel[1].startswith(f"sglang-{version}-")
    inventory = gen.Inventory(flags=module.FLAGS, aliases=module.ALIASES, dests=module.DESTS, options=module.OPTIONS)
    assert gen.render(inventory, version=version, wheel=wheel[1]) == text
