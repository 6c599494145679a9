"""Every router command the operator renders parses with the pinned router's own parser, per supported release.

For each example and each supported SGLang release, the rendered router argv (minus its launch prefix) goes through
`parse_router_args` of the pinned package, from its real wheel in the cached router venv: an unknown flag or a bad
value fails argparse there exactly as the router would fail at start-up. The parsed settings are then compared with
what the operator meant (PD mode, service discovery, the selectors with the fingerprint, ports, policy), and the
launch prefix itself must start the package's entry point.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from disaggspec import constants as c
from disaggspec.api import DisaggSpecService
from disaggspec.render import router as router_render
from disaggspec.sglang.args import SERVER_PORT
from disaggspec.sglang.profiles import PROFILES, SGLangVersion
from e2e.serving.launch import router_of
from e2e.serving.routers import ensure_router_venv, router_argv
from e2e.support.workloads import example, load

EXAMPLES = ("llama", "r1-mtp", "eagle-topk", "rdma", "multinode")
PARSER_MODULE = {"sglang-router": "sglang_router.launch_router", "smg": "smg.launch_router"}
FINGERPRINT = "0123456789abcdef"
_PARSE = """
import json, sys
from {module} import parse_router_args
args = parse_router_args(sys.argv[1:])
fields = ("pd_disaggregation", "service_discovery", "service_discovery_namespace", "service_discovery_port",
          "prefill_selector", "decode_selector", "policy", "host", "port", "prometheus_host", "prometheus_port")
print(json.dumps({{name: getattr(args, name) for name in fields}}, default=str))
"""


def _service(fragment: str, version: SGLangVersion) -> DisaggSpecService:
    obj = load(example(fragment))
    obj["metadata"]["namespace"] = "conformance"
    obj["spec"]["sglang"]["version"] = version
    return DisaggSpecService.model_validate(obj)


@pytest.mark.parametrize("version", sorted(PROFILES))
@pytest.mark.parametrize("fragment", EXAMPLES)
def test_rendered_router_command_parses_with_the_pinned_router(fragment: str, version: SGLangVersion) -> None:
    router = PROFILES[version].router
    service = _service(fragment, version)
    command = router_render.command(service, FINGERPRINT)
    assert router_of(command) == router, "the rendered command must start with the pinned router's launch prefix"
    flags = command[len(router.launch) :]
    python = str(ensure_router_venv(router) / "bin" / "python")
    parsed = subprocess.run(
        [python, "-c", _PARSE.format(module=PARSER_MODULE[router.package]), *flags],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert parsed.returncode == 0, f"{router.requirement} refuses the rendered flags:\n{parsed.stderr[-2000:]}"
    got = json.loads(parsed.stdout.strip().splitlines()[-1])
    name = service.metadata.name
    assert got["pd_disaggregation"] is True and got["service_discovery"] is True
    assert got["service_discovery_namespace"] == "conformance"
    assert got["service_discovery_port"] == SERVER_PORT
    pools = (
        (c.ROLE_PREFILL, "prefill_selector", service.spec.prefill),
        (c.ROLE_DECODE, "decode_selector", service.spec.decode),
    )
    for role, key, pool_spec in pools:
        wanted = {c.LABEL_SERVICE: name, c.LABEL_ROLE: role, c.LABEL_FINGERPRINT: FINGERPRINT}
        if pool_spec.nodes_per_instance > 1:
            wanted[c.LWS_LABEL_WORKER_INDEX] = "0"  # a multi-node group's leader: the only pod serving the API
        assert got[key] == wanted
    assert got["policy"] == (service.spec.router.policy or router.default_policy)
    assert got["policy"] in router.discovery_policies
    assert got["port"] == service.spec.router.port
    assert got["prometheus_port"] == router_render.METRICS_PORT


@pytest.mark.parametrize("version", sorted(PROFILES))
def test_launch_prefix_starts_the_router_entry_point(version: SGLangVersion) -> None:
    router = PROFILES[version].router
    ensure_router_venv(router)
    shown = subprocess.run([*router_argv(router), "--help"], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "--service-discovery" in shown.stdout and "--prefill-selector" in shown.stdout


@pytest.mark.parametrize("version", sorted(PROFILES))
def test_installed_router_is_the_pinned_version(version: SGLangVersion) -> None:
    router = PROFILES[version].router
    python = str(ensure_router_venv(router) / "bin" / "python")
    code = f"import importlib.metadata as m; print(m.version({router.package!r}))"
    installed = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert installed.stdout.strip() == router.version
