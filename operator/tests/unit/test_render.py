"""Render unit tests: SGLang args, RDMA wiring, labels and the fingerprint's sensitivity."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from disaggspec import constants as c
from disaggspec.api import parse_service
from disaggspec.config import OperatorConfig
from disaggspec.ib_device_map import IMAGE_PATH
from disaggspec.render import Revision, fingerprint, names, render
from disaggspec.render.rdma import server_command
from disaggspec.sglang.args import server_args
from tests.unit.deployments import deployment

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def _example(stem: str) -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load((EXAMPLES / f"{stem}.yaml").read_text())
    obj["metadata"]["namespace"] = "ns"
    return obj


def _by(manifests: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(m for m in manifests if m["kind"] == kind and m["metadata"]["name"] == name)


def _flag(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_both_pools_get_mode_and_the_same_bootstrap_port_backend_and_speculative_flags() -> None:
    service = parse_service(_example("llama-3.1-8b-eagle3"))
    prefill, decode = server_args(service, "prefill"), server_args(service, "decode")
    assert _flag(prefill, "--disaggregation-mode") == "prefill"
    assert _flag(decode, "--disaggregation-mode") == "decode"
    for flag in (
        "--disaggregation-bootstrap-port",
        "--disaggregation-transfer-backend",
        "--speculative-algorithm",
        "--speculative-draft-model-path",
        "--speculative-num-steps",
        "--speculative-eagle-topk",
        "--speculative-num-draft-tokens",
        "--model-path",
    ):
        assert _flag(prefill, flag) == _flag(decode, flag), flag
    assert _flag(prefill, "--speculative-algorithm") == "EAGLE3"
    assert _flag(prefill, "--speculative-num-draft-tokens") == "2"
    assert "--enable-metrics" in prefill


def test_extra_args_come_last() -> None:
    obj = _example("llama-3.1-8b-eagle3")
    obj["spec"]["decode"]["extraArgs"] = ["--mem-fraction-static", "0.7"]
    argv = server_args(parse_service(obj), "decode")
    assert argv[-2:] == ["--mem-fraction-static", "0.7"]


def _static_rdma() -> dict[str, Any]:
    """The rdma example with a static per-GPU NIC map, on whole 4-GPU nodes (where a static map is allowed)."""
    obj = _example("rdma-multus")
    block = obj["spec"]["transfer"]["rdma"]
    block.pop("ibDevices", None)
    block["ibDevicesPerGpu"] = {"0": "mlx5_0", "1": "mlx5_0", "2": "mlx5_1", "3": "mlx5_1"}
    for role in ("prefill", "decode"):
        obj["spec"][role]["gpusPerNode"] = 4
    return obj


def test_rdma_per_gpu_map_env_annotation_resources_and_capability() -> None:
    manifests = render(parse_service(_static_rdma()), OperatorConfig())
    name = _static_rdma()["metadata"]["name"]
    pod = deployment(manifests, name, "decode")["spec"]["template"]
    container = pod["spec"]["containers"][0]
    mapping = json.loads(_flag(container["command"], "--disaggregation-ib-device"))
    assert mapping == {"0": "mlx5_0", "1": "mlx5_0", "2": "mlx5_1", "3": "mlx5_1"}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["NCCL_IB_HCA"] == "=mlx5_0,mlx5_1"
    assert container["securityContext"] == {
        "privileged": False,
        "allowPrivilegeEscalation": False,
        "capabilities": {"add": ["IPC_LOCK"]},
    }
    assert container["resources"]["limits"]["rdma/hca_shared_devices_a"] == 1
    assert container["resources"]["requests"]["rdma/hca_shared_devices_a"] == 1
    assert pod["metadata"]["annotations"][c.ANNOTATION_MULTUS_NETWORKS] == "rdma/ib-net"
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]


def _decode_container(obj: dict[str, Any]) -> dict[str, Any]:
    manifests = render(parse_service(obj), OperatorConfig())
    decode = deployment(manifests, obj["metadata"]["name"], "decode")
    container: dict[str, Any] = decode["spec"]["template"]["spec"]["containers"][0]
    return container


def _auto_rdma(backend: str, **rdma: Any) -> dict[str, Any]:
    """The rdma example (no static map: the default mapping is then Auto) with `backend` and the `rdma` fields."""
    obj = _example("rdma-multus")
    obj["spec"]["transfer"]["backend"] = backend
    block = obj["spec"]["transfer"]["rdma"]
    block.pop("ibDevices", None)
    block.update(rdma)
    return obj


def test_auto_mapping_wraps_the_server_command() -> None:
    container = _decode_container(_auto_rdma("mooncake", ibDevices=["mlx5_0", "mlx5_1"]))
    command = container["command"]
    assert command[: command.index("--") + 1] == [
        "python3",
        IMAGE_PATH,
        "--form",
        "map",
        "--backend",
        "mooncake",
        "--allow",
        "mlx5_0",
        "--allow",
        "mlx5_1",
        "--",
    ]
    # The wrapper adds the device flag and NCCL_IB_HCA at start; the rendered server command has neither.
    assert server_command(command)[:3] == ["python3", "-m", "sglang.launch_server"]
    assert "--disaggregation-ib-device" not in command
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert "NCCL_IB_HCA" not in env
    assert env["MC_GID_INDEX"] == "3"
    assert "UCX_IB_GID_INDEX" not in env


def test_auto_mapping_on_0_5_2_asks_for_the_list_form() -> None:
    obj = _auto_rdma("nixl")
    obj["spec"]["sglang"]["version"] = "0.5.2"
    command = _decode_container(obj)["command"]
    assert command[2:6] == ["--form", "list", "--backend", "nixl"]


def test_nixl_gets_the_ucx_gid_index() -> None:
    env = {e["name"]: e.get("value") for e in _decode_container(_auto_rdma("nixl"))["env"]}
    assert env["UCX_IB_GID_INDEX"] == env["NCCL_IB_GID_INDEX"] == env["MC_GID_INDEX"] == "3"


def test_static_map_with_nixl_leaves_ucx_net_devices_unset() -> None:
    # 0.5.23's nixl applies the per-GPU map only when UCX_NET_DEVICES is empty.
    obj = _static_rdma()
    obj["spec"]["transfer"]["backend"] = "nixl"
    container = _decode_container(obj)
    assert container["command"][:3] == ["python3", "-m", "sglang.launch_server"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert "UCX_NET_DEVICES" not in env
    assert env["NCCL_IB_HCA"] == "=mlx5_0,mlx5_1"


def _nccl_selects(value: str, devices: list[str]) -> list[str]:
    """The devices an NCCL_IB_HCA value selects, as NCCL documents it: comma-separated tokens, `name:port` for a
    port, a leading `^` excludes, then a leading `=` matches whole names instead of prefixes."""
    exclude = value.startswith("^")
    value = value.removeprefix("^")
    exact = value.startswith("=")
    tokens = [token.split(":")[0] for token in value.removeprefix("=").split(",")]
    hit = [d for d in devices if any(d == t if exact else d.startswith(t) for t in tokens)]
    return [d for d in devices if d not in hit] if exclude else hit


def test_static_nccl_ib_hca_selects_exactly_the_listed_devices() -> None:
    # mlx5_1 as a bare NCCL token is a prefix: it would also select mlx5_10..mlx5_19 (NCCL docs, NCCL_IB_HCA).
    node = [f"mlx5_{i}" for i in range(12)]
    obj = _auto_rdma("nixl", ibDeviceMapping="Static", ibDevices=["mlx5_1", "mlx5_2"])
    env = {e["name"]: e.get("value") for e in _decode_container(obj)["env"]}
    assert env["NCCL_IB_HCA"] == "=mlx5_1,mlx5_2"
    assert _nccl_selects(env["NCCL_IB_HCA"], node) == ["mlx5_1", "mlx5_2"]
    assert _nccl_selects("mlx5_1,mlx5_2", node) == ["mlx5_1", "mlx5_2", "mlx5_10", "mlx5_11"]  # the old form
    # UCX names a device with its port and matches the whole entry.
    assert env["UCX_NET_DEVICES"] == "mlx5_1:1,mlx5_2:1"


def test_a_device_given_with_its_port_keeps_it() -> None:
    obj = _auto_rdma("nixl", ibDeviceMapping="Static", ibDevices=["mlx5_0:2"])
    env = {e["name"]: e.get("value") for e in _decode_container(obj)["env"]}
    assert env["NCCL_IB_HCA"] == "=mlx5_0:2"
    assert env["UCX_NET_DEVICES"] == "mlx5_0:2"


def test_static_list_is_rendered_as_given() -> None:
    container = _decode_container(_auto_rdma("nixl", ibDeviceMapping="Static", ibDevices=["mlx5_0", "mlx5_1"]))
    assert _flag(container["command"], "--disaggregation-ib-device") == "mlx5_0,mlx5_1"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["UCX_NET_DEVICES"] == "mlx5_0:1,mlx5_1:1"


def test_no_rdma_means_no_capability_and_no_rdma_env() -> None:
    manifests = render(parse_service(_example("llama-3.1-8b-eagle3")), OperatorConfig())
    container = deployment(manifests, "llama-eagle3", "prefill")["spec"]["template"]["spec"]["containers"][0]
    assert "capabilities" not in container["securityContext"]
    assert not any(e["name"].startswith(("NCCL_", "UCX_", "MC_")) for e in container.get("env", []))


def test_prefill_pods_carry_the_bootstrap_annotation_and_port_decode_pods_do_not() -> None:
    manifests = render(parse_service(_example("llama-3.1-8b-eagle3")), OperatorConfig())
    prefill = deployment(manifests, "llama-eagle3", "prefill")["spec"]["template"]
    decode = deployment(manifests, "llama-eagle3", "decode")["spec"]["template"]
    assert prefill["metadata"]["annotations"][c.ANNOTATION_BOOTSTRAP_PORT] == "8998"
    assert any(p["name"] == "bootstrap" for p in prefill["spec"]["containers"][0]["ports"])
    assert c.ANNOTATION_BOOTSTRAP_PORT not in decode["metadata"].get("annotations", {})
    assert not any(p["name"] == "bootstrap" for p in decode["spec"]["containers"][0]["ports"])


def test_labels_and_router_selectors_include_the_fingerprint() -> None:
    service = parse_service(_example("llama-3.1-8b-eagle3"))
    manifests = render(service, OperatorConfig())
    fp = fingerprint(service)
    for manifest in manifests:
        labels = manifest["metadata"]["labels"]
        assert labels[c.LABEL_MANAGED_BY] == c.MANAGED_BY
        assert labels[c.LABEL_SERVICE] == "llama-eagle3"
        assert labels[c.LABEL_INSTANCE] == "llama-eagle3"
    for role in (c.ROLE_PREFILL, c.ROLE_DECODE, c.ROLE_ROUTER):
        # Each revision's Deployments are its own: named and selecting by the fingerprint, carrying their spec.
        rendered = deployment(manifests, "llama-eagle3", role)
        assert (
            rendered["metadata"]["name"] == names.deployment_name(service, role, fp) == f"llama-eagle3-{role}-{fp[:8]}"
        )
        assert rendered["metadata"]["labels"][c.LABEL_FINGERPRINT] == fp
        assert rendered["spec"]["selector"]["matchLabels"] == {
            c.LABEL_SERVICE: "llama-eagle3",
            c.LABEL_ROLE: role,
            c.LABEL_FINGERPRINT: fp,
        }
        template_labels = rendered["spec"]["template"]["metadata"]["labels"]
        assert rendered["spec"]["selector"]["matchLabels"].items() <= template_labels.items()
        stored = json.loads(rendered["metadata"]["annotations"][names.REVISION_SPEC_ANNOTATION])
        assert parse_service({**_example("llama-3.1-8b-eagle3"), "spec": stored}).spec == service.spec
    router = deployment(manifests, "llama-eagle3", "router")["spec"]["template"]["spec"]
    command = router["containers"][0]["command"]
    assert f"{c.LABEL_FINGERPRINT}={fp}" in command
    assert _flag(command, "--service-discovery-namespace") == "ns"
    assert router["serviceAccountName"] == "llama-eagle3-router"
    role = _by(manifests, "Role", "llama-eagle3-router")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]


ROLES = (c.ROLE_PREFILL, c.ROLE_DECODE, c.ROLE_ROUTER)


def test_each_revision_renders_its_own_deployments_and_the_shared_children_once() -> None:
    service = parse_service(_example("llama-3.1-8b-eagle3"))
    older_obj = _example("llama-3.1-8b-eagle3")
    older_obj["spec"]["model"]["revision"] = "v1"
    older = parse_service(older_obj)
    fp, old_fp = fingerprint(service), fingerprint(older)
    assert fp != old_fp
    revisions = [
        Revision(fp, service, {c.ROLE_PREFILL: 1, c.ROLE_DECODE: 1, c.ROLE_ROUTER: 1}),
        Revision(old_fp, older, {c.ROLE_PREFILL: 2, c.ROLE_DECODE: 0, c.ROLE_ROUTER: 1}),
        Revision("f" * 16, None, {c.ROLE_PREFILL: 3}),  # an unreadable revision: kept as it is live, not rendered
    ]
    manifests = render(service, OperatorConfig(), revisions)
    single = render(service, OperatorConfig())
    # The Services, budgets and RBAC are shared by the revisions: the same as for one revision, once each.
    assert [m for m in manifests if m["kind"] != "Deployment"] == [m for m in single if m["kind"] != "Deployment"]
    replicas = {m["metadata"]["name"]: m["spec"]["replicas"] for m in manifests if m["kind"] == "Deployment"}
    assert replicas == {
        names.deployment_name(service, c.ROLE_PREFILL, fp): 1,
        names.deployment_name(service, c.ROLE_DECODE, fp): 1,
        names.deployment_name(service, c.ROLE_ROUTER, fp): 1,
        names.deployment_name(older, c.ROLE_PREFILL, old_fp): 2,
        names.deployment_name(older, c.ROLE_DECODE, old_fp): 0,
        names.deployment_name(older, c.ROLE_ROUTER, old_fp): 1,
    }
    by_name = {m["metadata"]["name"]: m for m in manifests if m["kind"] == "Deployment"}
    # The current revision renders as it does alone; the older one runs its own spec and pairs only its own pods.
    for role in ROLES:
        assert by_name[names.deployment_name(service, role, fp)] == deployment(single, "llama-eagle3", role)
    old_prefill = by_name[names.deployment_name(older, c.ROLE_PREFILL, old_fp)]["spec"]["template"]["spec"]
    assert _flag(old_prefill["containers"][0]["command"], "--revision") == "v1"
    old_router = by_name[names.deployment_name(older, c.ROLE_ROUTER, old_fp)]["spec"]["template"]["spec"]
    assert f"{c.LABEL_FINGERPRINT}={old_fp}" in old_router["containers"][0]["command"]
    assert f"{c.LABEL_FINGERPRINT}={fp}" not in old_router["containers"][0]["command"]


MUST_MATCH_EDITS = [
    ("spec.speculative.numDraftTokens", lambda s: s["speculative"].update(numDraftTokens=3, numSteps=2)),
    ("spec.speculative.draftModel.path", lambda s: s["speculative"]["draftModel"].update(path="other/draft")),
    ("spec.engine.pageSize", lambda s: s.setdefault("engine", {}).update(pageSize=16)),
    ("spec.transfer.bootstrapPort", lambda s: s.setdefault("transfer", {}).update(bootstrapPort=9100)),
    ("spec.model.path", lambda s: s["model"].update(path="meta-llama/Llama-3.1-70B-Instruct")),
    ("spec.speculative.transferDraftProbs", lambda s: s["speculative"].update(transferDraftProbs=True)),
]
OTHER_EDITS = [
    ("spec.decode.replicas", lambda s: s["decode"].update(replicas=4)),
    ("spec.router.policy", lambda s: s.setdefault("router", {}).update(policy="random")),
    ("spec.prefill.extraArgs", lambda s: s["prefill"].update(extraArgs=["--mem-fraction-static", "0.8"])),
    ("spec.decode.env", lambda s: s["decode"].update(env=[{"name": "X", "value": "1"}])),
]


@pytest.mark.parametrize(("field", "edit"), MUST_MATCH_EDITS, ids=[f for f, _ in MUST_MATCH_EDITS])
def test_fingerprint_changes_with_a_must_match_field(field: str, edit: Any) -> None:
    base = _example("llama-3.1-8b-eagle3")
    changed = copy.deepcopy(base)
    edit(changed["spec"])
    assert fingerprint(parse_service(base)) != fingerprint(parse_service(changed))


@pytest.mark.parametrize(("field", "edit"), OTHER_EDITS, ids=[f for f, _ in OTHER_EDITS])
def test_fingerprint_ignores_fields_that_need_not_match(field: str, edit: Any) -> None:
    base = _example("llama-3.1-8b-eagle3")
    changed = copy.deepcopy(base)
    edit(changed["spec"])
    assert fingerprint(parse_service(base)) == fingerprint(parse_service(changed))


def test_typed_tolerations_affinity_and_env_sources_render_as_given() -> None:
    # Typing these blocks must not change what reaches the pod: only the fields the user gave, camelCase, no nulls.
    tolerations = [
        {"operator": "Exists"},
        {"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
    ]
    affinity = {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname"}}
            ]
        }
    }
    env = [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    obj = _example("rdma-multus")
    obj["spec"]["decode"].update(tolerations=tolerations, affinity=affinity, env=env)
    manifests = render(parse_service(obj), OperatorConfig())
    pod = deployment(manifests, obj["metadata"]["name"], "decode")["spec"]["template"]["spec"]
    assert pod["tolerations"] == tolerations
    assert pod["affinity"] == affinity
    assert env[0] in pod["containers"][0]["env"]


def test_non_canonical_gpu_keys_do_not_crash_rendering() -> None:
    # Validation refuses such keys; rendering stays total anyway (int('gpu1') raised), so no caller that renders
    # before or without validating can crash on one.
    obj = _static_rdma()
    obj["spec"]["transfer"]["rdma"]["ibDevicesPerGpu"].update({"gpu1": "mlx5_9", "10": "mlx5_2"})
    manifests = render(parse_service(obj), OperatorConfig())
    container = deployment(manifests, obj["metadata"]["name"], "prefill")["spec"]["template"]["spec"]
    mapping = json.loads(_flag(container["containers"][0]["command"], "--disaggregation-ib-device"))
    assert list(mapping) == ["0", "1", "2", "3", "10", "gpu1"]


def test_transfer_draft_probs_sets_the_patch_env_on_both_pools_only_when_on() -> None:
    """Patch 0003 reads SGLANG_DISAGG_TRANSFER_DRAFT_PROBS on each side; both must agree (it changes the aux layout),
    and when off nothing is rendered, so existing services keep their pods."""
    base = _example("llama-3.1-8b-eagle3")
    on = copy.deepcopy(base)
    on["spec"]["sglang"]["version"] = "0.5.23"
    on["spec"]["speculative"].update(rejectionSampling=True, transferDraftProbs=True)

    def env_of(obj: dict[str, Any], role: str) -> dict[str, Any]:
        manifests = render(parse_service(obj), OperatorConfig())
        container = deployment(manifests, obj["metadata"]["name"], role)["spec"]["template"]["spec"]["containers"][0]
        return {e["name"]: e.get("value") for e in container.get("env", [])}

    for role in ("prefill", "decode"):
        assert env_of(on, role)["SGLANG_DISAGG_TRANSFER_DRAFT_PROBS"] == "1"
        assert "SGLANG_DISAGG_TRANSFER_DRAFT_PROBS" not in env_of(base, role)
