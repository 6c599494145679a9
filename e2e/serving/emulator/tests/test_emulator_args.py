"""The emulator parses SGLang command lines like each release's parser: values, defaults, aliases, and rejections."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from disaggspec.api import parse_service
from disaggspec.sglang.args import server_args
from e2e.serving.emulator import sglang_args
from e2e.serving.emulator.fingerprint import speculative_fingerprint
from e2e.serving.emulator.options import OptionError, parse_options
from e2e.serving.emulator.sglang_args import ArgvError, parse, server_config
from e2e.serving.emulator.tests.harness import REPO
from e2e.serving.emulator.tests.harness import sglang_args as rendered_like
from e2e.serving.emulator.tests.sglang_sources import SGLANG_TESTS, sglang_tree, sglang_venv

VERSIONS = ("0.5.2", "0.5.23")
EXAMPLE = REPO / "examples" / "llama-3.1-8b-eagle3.yaml"


def _rendered(version: str, role: str) -> list[str]:
    obj = copy.deepcopy(yaml.safe_load(EXAMPLE.read_text()))
    obj["metadata"]["namespace"] = "emulator"
    obj["spec"]["sglang"]["version"] = version
    argv = server_args(parse_service(obj), role)  # type: ignore[arg-type]
    assert argv[:3] == ["python3", "-m", "sglang.launch_server"]
    return argv[3:]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_rendered_pool_command_parses_with_its_values(version: str, role: str) -> None:
    cfg = server_config(version, _rendered(version, role))  # type: ignore[arg-type]
    assert cfg.model_path == "meta-llama/Llama-3.1-8B-Instruct"
    assert cfg.served_model_name == cfg.model_path  # defaults to the model path
    assert cfg.disaggregation_mode == role
    assert cfg.port == 30000 and cfg.enable_metrics
    assert cfg.bootstrap_port == 8998
    assert cfg.speculative_algorithm == "EAGLE3"
    assert (cfg.speculative_num_steps, cfg.speculative_eagle_topk, cfg.speculative_num_draft_tokens) == (1, 1, 2)
    assert cfg.tp_size == 1 and cfg.dtype == "float16"


@pytest.mark.parametrize("version", VERSIONS)
def test_defaults(version: str) -> None:
    cfg = server_config(version, ["--model-path", "m"])  # type: ignore[arg-type]
    assert (cfg.port, cfg.bootstrap_port, cfg.disaggregation_mode, cfg.tp_size) == (30000, 8998, "null", 1)
    assert cfg.speculative_algorithm is None and not cfg.enable_metrics


@pytest.mark.parametrize("version", VERSIONS)
def test_aliases_prefixes_and_nextn(version: str) -> None:
    cfg = server_config(
        version,  # type: ignore[arg-type]
        ["--model", "m", "--tp", "4", "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
         "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "9"],
    )  # fmt: skip
    assert cfg.model_path == "m" and cfg.tp_size == 4
    assert cfg.speculative_algorithm == "EAGLE"  # NEXTN is EAGLE
    assert cfg.speculative_num_draft_tokens == 4  # topk 1: steps + 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model-path", "m", "--no-such-flag", "3"], "unrecognized arguments: --no-such-flag 3"),
        (["--model-path", "m", "--enable-metrics", "x"], "unrecognized arguments: x"),
        (["--model-path", "m", "--port", "x"], "argument --port: invalid int value: 'x'"),
        (["--model-path", "m", "--port"], "argument --port: expected one argument"),
        (["--model-path", "m", "--enable-metrics=1"], "argument --enable-metrics: ignored explicit argument '1'"),
        (["--model-path", "m", "--enable-metric"], "ambiguous option: --enable-metric could match"),
        (
            ["--model-path", "m", "--disaggregation-mode", "bad"],
            "argument --disaggregation-mode: invalid choice: 'bad' (choose from 'null', 'prefill', 'decode')",
        ),
        (["--port", "1"], "the following arguments are required: --model-path/--model"),
    ],
)
@pytest.mark.parametrize("version", VERSIONS)
def test_rejections(version: str, argv: list[str], message: str) -> None:
    with pytest.raises(ArgvError) as caught:
        parse(version, argv)  # type: ignore[arg-type]
    assert str(caught.value).startswith(message)


@pytest.mark.parametrize("version", VERSIONS)
def test_multi_node_options(version: str) -> None:
    """What a LeaderWorkerSet pod passes once the kubelet expanded $(LWS_LEADER_ADDRESS) and $(LWS_WORKER_INDEX)."""
    argv = ["--model-path", "m", "--tp", "4", "--nnodes", "2", "--node-rank", "1"]
    cfg = server_config(version, [*argv, "--dist-init-addr", "g-0.g.ns:20000"])  # type: ignore[arg-type]
    assert (cfg.nnodes, cfg.node_rank, cfg.dist_init_addr) == (2, 1, "g-0.g.ns:20000")
    legacy = server_config(version, ["--model-path", "m", "--nccl-init-addr", "h:1"])  # type: ignore[arg-type]
    assert (legacy.nnodes, legacy.node_rank, legacy.dist_init_addr) == (1, 0, "h:1")
    with pytest.raises(ArgvError, match=r"argument --node-rank: invalid int value: '\$\(LWS_WORKER_INDEX\)'"):
        parse(version, ["--model-path", "m", "--node-rank", "$(LWS_WORKER_INDEX)"])  # type: ignore[arg-type]


def test_flags_of_one_release_only() -> None:
    argv = ["--model-path", "m", "--enable-multi-layer-eagle", "--speculative-use-rejection-sampling"]
    with pytest.raises(ArgvError, match="unrecognized arguments: --enable-multi-layer-eagle"):
        parse("0.5.2", argv)
    cfg = server_config("0.5.23", argv)
    assert cfg.enable_multi_layer_eagle and cfg.speculative_use_rejection_sampling
    with pytest.raises(ArgvError, match="unrecognized arguments: --disaggregation-decode-tp 2"):
        parse("0.5.23", ["--model-path", "m", "--disaggregation-decode-tp", "2"])
    parse("0.5.2", ["--model-path", "m", "--disaggregation-decode-tp", "2"])


@pytest.mark.parametrize("version", VERSIONS)
def test_cli_exits_2_with_argparse_message_on_unknown_flag(version: str) -> None:
    argv = [sys.executable, "-m", "e2e.serving.emulator", "--sglang-version", version, "--bind", "127.0.0.1"]
    argv += ["--", *rendered_like("prefill"), "--totally-unknown", "1"]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.returncode == 2, done.stderr
    prog = "launch_server.py" if version == "0.5.2" else "sglang serve"
    assert f"{prog}: error: unrecognized arguments: --totally-unknown 1" in done.stderr


def test_cli_rejects_unknown_emulate_key() -> None:
    argv = [sys.executable, "-m", "e2e.serving.emulator", "--sglang-version", "0.5.2", "--bind", "127.0.0.1"]
    argv += ["--emulate", "tokens-per-secnd=5", "--", "--model-path", "m"]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.returncode == 2 and "unknown key" in done.stderr


def test_emulate_options() -> None:
    options = parse_options(["load-seconds=2.5", "fail=transfer-failure", "accept-length=3", "hidden-dtype=float16"])
    assert options.load_seconds == 2.5 and options.fail == "transfer-failure" and options.accept_length == 3.0
    assert parse_options(["crash-after=4"]).fail == "crash"
    for bad in ("fail=explode", "load-seconds=-1", "nokey", "tokens-per-second=0"):
        with pytest.raises(OptionError):
            parse_options([bad])
    filled = parse_options([]).with_defaults_for(dtype="auto", speculative=True, num_draft_tokens=2)
    assert filled.hidden_dtype == "bfloat16" and filled.accept_length == 2.0


def test_revision_and_load_failure_options() -> None:
    assert parse_options([]).revision is None
    assert parse_options(["revision=0123456789abcdef"]).revision == "0123456789abcdef"
    assert parse_options(["fail=load-failure"]).fail == "load-failure"
    with pytest.raises(OptionError, match="must not be empty"):
        parse_options(["revision="])


def test_fingerprint_follows_patch_0001() -> None:
    options = parse_options(["hidden-size=4096"]).with_defaults_for(
        dtype="float16", speculative=True, num_draft_tokens=2
    )
    cfg = server_config("0.5.23", rendered_like("decode"))
    assert speculative_fingerprint(cfg, options) == {
        "speculative_algorithm": "EAGLE3",
        "draft_hidden_size": 4096,
        "draft_hidden_dtype": "float16",
        "speculative_eagle_topk": 1,
        "enable_multi_layer_eagle": False,
        "speculative_num_steps": None,
        "num_draft_states": 1,
        "speculative_use_rejection_sampling": False,
        "topk_buffer_width": 16,
        "draft_probs_shape": None,
    }
    rejection = server_config("0.5.23", rendered_like("decode", speculative=[
        "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "4", "--speculative-use-rejection-sampling", "--enable-multi-layer-eagle",
    ]))  # fmt: skip
    on = {"SGLANG_DISAGG_TRANSFER_DRAFT_PROBS": "1"}
    assert speculative_fingerprint(rejection, options, on)["draft_probs_shape"] == [3, 128256]  # numSteps states
    assert speculative_fingerprint(rejection, options, {})["draft_probs_shape"] is None  # opt-in
    assert speculative_fingerprint(cfg, options, on)["draft_probs_shape"] is None  # no rejection sampling
    multi = server_config(
        "0.5.23",
        rendered_like(
            "decode",
            speculative=["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3", "--speculative-eagle-topk",
                         "8", "--speculative-num-draft-tokens", "16", "--enable-multi-layer-eagle"],
        ),
    )  # fmt: skip
    fp = speculative_fingerprint(multi, options)
    assert (fp["num_draft_states"], fp["topk_buffer_width"], fp["speculative_num_steps"]) == (24, 24, 3)
    plain = server_config("0.5.23", rendered_like("decode", speculative=()))
    assert speculative_fingerprint(plain, options)["draft_hidden_size"] == 16  # SGLang's padding row


# --- against the real parsers --------------------------------------------------------------------------------------

_PROBE = r"""
import argparse, contextlib, io, json, sys
from sglang.srt.server_args import ServerArgs
cases, bools, typed = json.loads(sys.stdin.read())
parser = argparse.ArgumentParser(prog="P")
ServerArgs.add_cli_args(parser)
actions = {o: a for a in parser._actions for o in a.option_strings}
report = {"bools": {f: actions[f].nargs for f in bools if f in actions},
          "typed": {f: [type(actions[f]).__name__, actions[f].nargs] for f in typed if f in actions}, "cases": []}
for argv in cases:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns = parser.parse_args(argv)
        values = {a.dest: getattr(ns, a.dest) for a in parser._actions if a.dest != "help"}
        report["cases"].append({"ok": True, "values": json.loads(json.dumps(values, default=str))})
    except SystemExit as exc:
        lines = [l for l in err.getvalue().splitlines() if l.startswith("P: error: ")]
        report["cases"].append({"ok": False, "code": exc.code, "error": lines[-1][len("P: error: "):] if lines else ""})
print(json.dumps(report))
"""

CASES: list[list[str]] = [
    ["--model-path", "m", "--tp", "2", "--enable-metrics", "--port", "31000"],
    ["--model", "m", "--disaggregation-mode", "decode", "--disaggregation-bootstrap-port", "9001"],
    ["--model-path", "m", "--no-such-flag", "3"],
    ["--model-path", "m", "--enable-metrics", "x"],
    ["--model-path", "m", "--port", "x"],
    ["--model-path", "m", "--port"],
    ["--model-path", "m", "--enable-metrics=1"],
    ["--model-path", "m", "--enable-metric"],
    ["--model-path", "m", "--disaggregation-mode", "bad"],
    ["--port", "1"],
    ["--model-path", "m", "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "2",
     "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "6", "--speculative-draft-model-path", "d"],
    ["--model-path", "m", "--enable-multi-layer-eagle"],
    ["--model-path", "m", "--cuda-graph-bs", "1", "2", "4", "--page-size", "16"],
    ["--model-path=m", "--served-model-name=s", "--dtype=float16"],
    ["--model-path", "m", "--tp-size", "4", "--nnodes", "2", "--node-rank", "1", "--dist-init-addr",
     "llama-decode-0.llama-decode.ns:20000"],
    ["--model-path", "m", "--nccl-init-addr", "10.0.0.1:20000", "--nnodes", "2", "--node-rank", "0"],
    ["--model-path", "m", "--nnodes", "2", "--node-rank", "$(LWS_WORKER_INDEX)"],
    # DP attention and expert parallelism (dp.py): what the operator renders per release, and the other's spelling.
    ["--model-path", "m", "--tp-size", "8", "--enable-dp-attention", "--dp-size", "8", "--moe-a2a-backend", "deepep",
     "--deepep-mode", "low_latency", "--enable-dp-lm-head", "--ep-size", "8"],
    ["--model-path", "m", "--tp-size", "8", "--attn-dp-size", "8", "--moe-a2a-backend", "deepep"],
    ["--model-path", "m", "--disaggregation-mode", "prefill", "--disaggregation-decode-tp", "16",
     "--disaggregation-decode-dp", "16", "--load-balance-method", "round_robin"],
    ["--model-path", "m", "--disaggregation-mode", "decode", "--dp-size", "4", "--enable-dp-attention",
     "--prefill-round-robin-balance"],
    ["--model-path", "m", "--load-balance-method", "follow_bootstrap_room"],
    ["--model-path", "m", "--load-balance-method", "minimum_tokens"],
]  # fmt: skip
DESTS_COMPARED = {
    "--model-path": "model_path",
    "--served-model-name": "served_model_name",
    "--port": "port",
    "--page-size": "page_size",
    "--dtype": "dtype",
    "--disaggregation-mode": "disaggregation_mode",
    "--disaggregation-bootstrap-port": "disaggregation_bootstrap_port",
    "--speculative-algorithm": "speculative_algorithm",
    "--speculative-num-steps": "speculative_num_steps",
    "--speculative-eagle-topk": "speculative_eagle_topk",
    "--speculative-num-draft-tokens": "speculative_num_draft_tokens",
    "--nnodes": "nnodes",
    "--node-rank": "node_rank",
    "--dist-init-addr": "dist_init_addr",
    "--attn-dp-size": "attn_dp_size",
    "--load-balance-method": "load_balance_method",
    "--disaggregation-decode-tp": "disaggregation_decode_tp",
    "--disaggregation-decode-dp": "disaggregation_decode_dp",
    "--prefill-round-robin-balance": "prefill_round_robin_balance",
    "--enable-dp-attention": "enable_dp_attention",
}


def _probe(version: str) -> dict[str, Any] | str:
    venv, tree = sglang_venv(version), sglang_tree(version)
    if venv is None or tree is None:
        return f"no SGLang {version} test venv or tree (built by images/sglang/tests/run.sh)"
    pythonpath = f"{tree}:{SGLANG_TESTS / 'stubs' / version}"
    payload = json.dumps([CASES, sorted(sglang_args.BOOL_FLAGS), sorted(sglang_args.TYPED)])
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", _PROBE],
        input=payload,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": pythonpath, "PATH": "/usr/bin:/bin"},
        timeout=300,
    )
    if done.returncode != 0:
        return f"probe failed: {done.stderr[-2000:]}"
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.fixture(scope="module")
def real_parsers() -> dict[str, dict[str, Any] | str]:
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(VERSIONS, pool.map(_probe, VERSIONS), strict=True))


@pytest.mark.parametrize("version", VERSIONS)
def test_against_the_real_parser(version: str, real_parsers: dict[str, dict[str, Any] | str]) -> None:
    """Same accept/reject decision and message, and the same values, as `ServerArgs.add_cli_args`'s parser."""
    report = real_parsers[version]
    if isinstance(report, str):
        pytest.skip(report)
    table = sglang_args.flag_table(version)  # type: ignore[arg-type]
    for flag in sglang_args.BOOL_FLAGS & set(table.FLAGS):
        assert report["bools"][flag] == 0, flag  # store_true (0.5.23 deprecates some: DeprecatedStoreTrueAction)
    for flag in set(sglang_args.TYPED) & set(table.FLAGS):
        assert report["typed"][flag] == ["_StoreAction", None], flag
    for argv, real in zip(CASES, report["cases"], strict=True):
        try:
            parsed = parse(version, argv)  # type: ignore[arg-type]
        except ArgvError as exc:
            assert not real["ok"], f"{argv}: emulator rejects ({exc}), SGLang {version} accepts"
            assert real["code"] == 2 and str(exc) == real["error"], argv
            continue
        assert real["ok"], f"{argv}: emulator accepts, SGLang {version} rejects: {real.get('error')}"
        for option, dest in DESTS_COMPARED.items():
            if option in parsed.values:
                assert real["values"][dest] == parsed.values[option], (argv, option)


def test_sglang_sources_are_reachable() -> None:
    """The honesty tests need the trees; say so loudly instead of skipping silently when they are missing."""
    missing = [v for v in VERSIONS if sglang_tree(v) is None]
    if missing:
        pytest.skip(f"SGLang wheel trees unavailable for {missing} (images/sglang/check-patches.sh)")
    assert all(Path(str(sglang_tree(v))).is_dir() for v in VERSIONS)
