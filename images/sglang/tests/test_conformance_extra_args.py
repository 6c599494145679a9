"""Conformance of issue 15 A against the real server-args parser of the release under test: the typed must-match
fields and `spec.engine.extraArgs` render into a command the parser accepts with the values of the spec, and every
extraArgs list the operator's reader (`disaggspec.sglang.argv`) accepts, the real parser accepts too, with the same
dests set (abbreviations off, as the rules demand exact spellings).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from conftest import sglang_version

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "operator"))

from disaggspec.api import parse_service  # noqa: E402
from disaggspec.sglang.args import server_args  # noqa: E402
from disaggspec.sglang.argv import parse  # noqa: E402
from disaggspec.sglang.profiles import profile_for  # noqa: E402
from disaggspec.validation import validate  # noqa: E402

VERSION = sglang_version()
PROFILE = profile_for(VERSION)  # type: ignore[arg-type]
MODEL = ["--model-path", "m"]
"""The one option the parser requires."""


def _parser() -> argparse.ArgumentParser:
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(exit_on_error=False, allow_abbrev=False)
    ServerArgs.add_cli_args(parser)
    return parser


def _service(engine: dict[str, object], decode_extra: list[str]) -> object:
    return parse_service(
        {
            "metadata": {"name": "conformance", "namespace": "conformance"},
            "spec": {
                "sglang": {"image": "example.invalid/sglang:test", "version": VERSION},
                "model": {"path": "meta-llama/Llama-3.1-8B-Instruct"},
                "speculative": {
                    "algorithm": "EAGLE3",
                    "draftModel": {"path": "jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B"},
                    "tokenMap": "thunlp/LLaMA3-Instruct-8B-FR-Spec/freq_32768.pt",
                },
                "engine": engine,
                "prefill": {},
                "decode": {"extraArgs": decode_extra},
            },
        }
    )


def test_typed_must_match_fields_and_engine_extra_args_parse_as_the_spec_says() -> None:
    service = _service(
        {
            "contextLength": 8192,
            "quantization": "fp8",
            "tokenizerPath": "meta-llama/Llama-3.1-8B-Instruct",
            "chatTemplate": "llama-3",
            "extraArgs": ["--load-format", "dummy", "--tokenizer-mode", "slow", "--chunked-prefill-size", "-1"],
        },
        ["--chunked-prefill-size", "4096", "--mem-fraction-static=0.8"],
    )
    assert validate(service) == []  # type: ignore[arg-type]
    parser = _parser()
    for role in ("prefill", "decode"):
        argv = server_args(service, role)  # type: ignore[arg-type]
        parsed, unknown = parser.parse_known_args(argv[3:])
        assert unknown == []
        assert parsed.context_length == 8192 and parsed.quantization == "fp8"
        assert parsed.tokenizer_path == "meta-llama/Llama-3.1-8B-Instruct" and parsed.chat_template == "llama-3"
        assert parsed.speculative_token_map == "thunlp/LLaMA3-Instruct-8B-FR-Spec/freq_32768.pt"
        assert parsed.load_format == "dummy" and parsed.tokenizer_mode == "slow"
        # The pool's own list comes last, so its per-pool-safe value wins on decode.
        assert parsed.chunked_prefill_size == (4096 if role == "decode" else -1)


ACCEPTED = [
    ["--chunked-prefill-size", "-1", "--mem-fraction-static", "0.8"],
    ["--max-running-requests=64", "--schedule-policy", "random"],
    ["--log-level", "debug", "--enable-mixed-chunk"],
    ["--json-model-override-args", '{"rope_theta": 500000}', "--tokenizer-mode", "slow"],
    ["--ep-size", "2", "--nccl-port", "9000"],
    ["--dist-init-addr", "10.0.0.1:5000"],
]


@pytest.mark.parametrize("tokens", ACCEPTED, ids=lambda t: " ".join(t)[:40])
def test_what_the_reader_accepts_the_real_parser_accepts(tokens: list[str]) -> None:
    parsed, problems = parse(tokens, PROFILE.options, PROFILE.aliases)
    assert problems == []
    namespace, unknown = _parser().parse_known_args([*MODEL, *tokens])
    assert unknown == []
    defaults = _parser().parse_args(MODEL)
    for found in parsed:
        assert getattr(namespace, found.option.dest) != getattr(defaults, found.option.dest), found.flag


REFUSED = [
    ["--chunked-prefill-size=4096 --tp-size=2"],
    ["--tokenizer-mode", "fastest"],
    ["--max-running-requests", "8", "9"],
    ["--enable-mixed-chunk=1"],
    ["--chunked-prefill-size"],
    ["--mem-fraction-static", "lots"],
]


@pytest.mark.parametrize("tokens", REFUSED, ids=lambda t: " ".join(t)[:40])
def test_what_the_reader_refuses_the_real_parser_refuses(tokens: list[str]) -> None:
    assert parse(tokens, PROFILE.options, PROFILE.aliases)[1]
    try:
        _, unknown = _parser().parse_known_args([*MODEL, *tokens])
    except (argparse.ArgumentError, SystemExit):
        return
    assert unknown, f"the real parser accepted {tokens}"
