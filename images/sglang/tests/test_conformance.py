"""Conformance: every SGLang command line the operator renders parses with the real server-args parser of the
release under test, with no unknown flag, and the parsed values equal the spec.

A multi-node pool (nodesPerInstance > 1) is a LeaderWorkerSet: its leader's and each worker's command are parsed after
the substitution the kubelet makes from the environment the LeaderWorkerSet pod webhook injects ($(LWS_WORKER_INDEX),
$(LWS_LEADER_ADDRESS)), and the parsed node count, rank and rendezvous address are checked against the spec.

The operator's render package imports neither kopf nor kubernetes (an import-linter contract says so), so it runs
in this venv with the repository's `operator/` directory on `sys.path`. Every example is rendered for the release it
names, and for the other supported release too when the spec is valid there.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import sglang_version

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "operator"))

from disaggspec import constants as c  # noqa: E402
from disaggspec.api import effective_speculative, parse_service  # noqa: E402
from disaggspec.config import OperatorConfig  # noqa: E402
from disaggspec.ib_device_map import IMAGE_PATH  # noqa: E402
from disaggspec.render import render  # noqa: E402
from disaggspec.render.rdma import server_command  # noqa: E402
from disaggspec.sglang.args import DIST_INIT_PORT  # noqa: E402
from disaggspec.validation import validate  # noqa: E402

VERSION = sglang_version()
LAUNCH = ["python3", "-m", "sglang.launch_server"]
GOLDEN = REPO / "operator" / "tests" / "golden"
EXAMPLES = sorted((REPO / "examples").glob("*.yaml")) + sorted(GOLDEN.glob("*/input.yaml"))


def _parser() -> argparse.ArgumentParser:
    from sglang.srt.server_args import ServerArgs

    # exit_on_error=False turns an unknown flag into an exception instead of SystemExit.
    parser = argparse.ArgumentParser(exit_on_error=False, allow_abbrev=False)
    ServerArgs.add_cli_args(parser)
    return parser


PARSER = _parser()
DESTS = {option: action.dest for action in PARSER._actions for option in action.option_strings}


def _services() -> list[tuple[str, Any]]:
    """(case id, parsed service) for every example renderable on the release under test."""
    cases = []
    for path in EXAMPLES:
        obj = yaml.safe_load(path.read_text())
        obj["metadata"]["namespace"] = "conformance"
        obj = copy.deepcopy(obj)
        obj["spec"]["sglang"]["version"] = VERSION
        service = parse_service(obj)
        if validate(service):
            continue  # the spec uses a feature this release lacks; the rule table rejects it, nothing to render
        cases.append((f"{path.parent.name if path.name == 'input.yaml' else path.stem}", service))
    return cases


CASES = _services()


def _value(parsed: argparse.Namespace, flag: str) -> Any:
    return getattr(parsed, DESTS[flag])


def _pod_commands(manifests: list[dict[str, Any]], role: str) -> list[tuple[int, list[str], str | None]]:
    """(node rank, command as the kubelet runs it, leader host) of every pod of one server of `role`: the one pod of a
    Deployment (rank 0, no leader host), or the leader and each worker of a LeaderWorkerSet group, with the `$(VAR)`
    references the kubelet expands from the LeaderWorkerSet's injected environment substituted."""
    workload = next(
        m
        for m in manifests
        if m["kind"] in ("Deployment", c.LWS_KIND) and m["metadata"]["labels"]["disaggspec.io/role"] == role
    )
    if workload["kind"] == "Deployment":
        return [(0, workload["spec"]["template"]["spec"]["containers"][0]["command"], None)]
    name, namespace = workload["metadata"]["name"], workload["metadata"]["namespace"]
    # pkg/utils/pod/pod_utils.go of LeaderWorkerSet v0.9.0: <lws>-<group>.<subdomain (the lws)>.<namespace>, group 0.
    leader_host = f"{name}-0.{name}.{namespace}"
    group = workload["spec"]["leaderWorkerTemplate"]
    pods = [(0, group["leaderTemplate"])] + [(rank, group["workerTemplate"]) for rank in range(1, group["size"])]
    env = {c.LWS_ENV_LEADER_ADDRESS: leader_host}
    out = []
    for rank, template in pods:
        values = {**env, c.LWS_ENV_WORKER_INDEX: str(rank)}
        command = template["spec"]["containers"][0]["command"]
        expanded = [_expand(arg, values) for arg in command]
        out.append((rank, expanded, leader_host))
    return out


def _expand(arg: str, values: dict[str, str]) -> str:
    for name, value in values.items():
        arg = arg.replace(f"$({name})", value)
    assert "$(" not in arg, f"unexpanded reference in {arg!r}"
    return arg


@pytest.mark.parametrize("role", ["prefill", "decode"])
@pytest.mark.parametrize(("case", "service"), CASES, ids=[c for c, _ in CASES])
def test_rendered_command_parses_and_matches_the_spec(case: str, service: Any, role: str) -> None:
    manifests = render(service, OperatorConfig())
    spec = service.spec
    pool = spec.prefill if role == "prefill" else spec.decode
    pods = _pod_commands(manifests, role)
    assert len(pods) == pool.nodes_per_instance
    for rank, command, leader_host in pods:
        _check_command(service, role, command)
        parsed, _ = PARSER.parse_known_args(server_command(command)[3:])
        assert _value(parsed, "--nnodes") == pool.nodes_per_instance
        assert _value(parsed, "--node-rank") == rank
        if leader_host is None:
            assert _value(parsed, "--dist-init-addr") is None
        else:
            assert _value(parsed, "--dist-init-addr") == f"{leader_host}:{DIST_INIT_PORT}"
            # What both releases assert at start (tp_size divisible by nnodes), with every pod's GPUs used.
            assert pool.tensor_parallel_size == pool.nodes_per_instance * pool.gpus_per_node


def _check_command(service: Any, role: str, command: list[str]) -> None:
    argv = server_command(command)
    assert argv[:3] == LAUNCH
    wrapped = command != argv  # ibDeviceMapping Auto: the start-time NIC mapper execs the server command
    if wrapped:
        # What the mapper appends for a 2-GPU container, in the form the operator told it this release reads.
        form = command[command.index("--form") + 1]
        argv = [*argv, "--disaggregation-ib-device", '{"0":"mlx5_0","1":"mlx5_1"}' if form == "map" else "mlx5_0"]
    parsed, unknown = PARSER.parse_known_args(argv[3:])
    assert unknown == [], f"flags sglang {VERSION} does not know: {unknown}"
    assert not wrapped or command[:2] == ["python3", IMAGE_PATH]

    spec = service.spec
    pool = spec.prefill if role == "prefill" else spec.decode
    eff = effective_speculative(spec, role)
    assert _value(parsed, "--model-path") == spec.model.path
    assert _value(parsed, "--tp-size") == pool.tensor_parallel_size
    assert _value(parsed, "--disaggregation-mode") == role
    assert _value(parsed, "--disaggregation-bootstrap-port") == spec.transfer.bootstrap_port
    assert _value(parsed, "--disaggregation-transfer-backend") == spec.transfer.backend
    assert _value(parsed, "--page-size") == spec.engine.page_size
    assert _value(parsed, "--kv-cache-dtype") == spec.engine.kv_cache_dtype
    assert _value(parsed, "--speculative-algorithm") == eff.algorithm
    assert _value(parsed, "--speculative-num-steps") == eff.num_steps
    assert _value(parsed, "--speculative-eagle-topk") == eff.eagle_topk
    assert _value(parsed, "--speculative-num-draft-tokens") == eff.num_draft_tokens
    assert _value(parsed, "--speculative-draft-model-path") == (eff.draft_model.path if eff.draft_model else None)
    assert _value(parsed, "--enable-metrics") is True
    if spec.transfer.rdma is not None and (spec.transfer.rdma.ib_devices or spec.transfer.rdma.ib_devices_per_gpu):
        assert _value(parsed, "--disaggregation-ib-device")
    if "--enable-multi-layer-eagle" in DESTS:
        assert _value(parsed, "--enable-multi-layer-eagle") == eff.multi_layer


def test_multi_node_cases_are_covered() -> None:
    ids = {c for c, _ in CASES}
    assert {"deepseek-r1-tp16-multinode", "mixed-multinode-prefill"} <= ids


def test_every_example_renders_on_at_least_its_own_release() -> None:
    own = [p for p in EXAMPLES if yaml.safe_load(p.read_text())["spec"]["sglang"]["version"] == VERSION]
    ids = {c for c, _ in CASES}
    for path in own:
        assert (path.parent.name if path.name == "input.yaml" else path.stem) in ids
