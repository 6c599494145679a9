"""The LeaderWorkerSet (LWS) controller of the local control plane: its configuration file, and the objects it needs
in the cluster, rendered from the manifests of the pinned module that `build.build_lws` keeps next to the binary.

The controller runs on the host, outside the cluster, so what an in-cluster install gets from kustomize
(`config/default` of the module: namespace `lws-system`, name prefix `lws-`, a Service in front of the webhook server,
certificates rotated into a Secret) is rewritten here:

- CRDs: every file of `config/crd/bases` (LeaderWorkerSet, and DisaggregatedSet, which the same binary also
  reconciles and watches, so its CRD must exist or the controller cannot start). `config/crd/patches` are left out:
  the conversion webhook patch only matters for a CRD with more than one version, and both serve `v1` only; the
  cert-manager CA injection patch is not used by the module's own kustomization either.
- RBAC: the module's `config/rbac/role.yaml` (ClusterRole `lws-manager-role`) and `role_binding.yaml`, which binds it
  to the service account `lws-system/lws-controller-manager`; the controller's client certificate carries that
  service account's user name (`pki.LWS_CONTROLLER`), so it gets exactly the permissions of an in-cluster install.
- Webhooks: `config/webhook/manifests.yaml` with the JSON patches its `kustomization.yaml` applies (they add the
  `leaderworkerset.sigs.k8s.io/name Exists` objectSelector to the pod webhooks), every `clientConfig.service`
  replaced by `url: https://127.0.0.1:<port><path>` and `caBundle` the local CA, which issued the webhook server's
  certificate (`pki.issue_loopback_serving_cert`). Paths, rules, selectors and failure policies stay the module's.
"""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any

import yaml

from e2e.cluster import build

NAMESPACE = "lws-system"
"""The namespace of the kustomize install; `utils.GetOperatorNamespace` falls back to it outside a pod. It is the
leader-election namespace (election is off here) and the home of the service account the RBAC binds."""
NAME_PREFIX = "lws-"
"""The `namePrefix` of the module's `config/default`: object names match an in-cluster install."""
POD_MUTATING_PATH = "/mutate--v1-pod"
"""The pod mutating webhook, which sets the LWS labels and env (LWS_LEADER_ADDRESS, ...) on the group's pods; the
control plane waits until the webhook server answers on it."""
CERT_DIR = "lws-certs"
"""Subdirectory of the state directory with the webhook server's `tls.crt` and `tls.key` (controller-runtime's
default file names)."""
CONFIG_FILE = "lws-controller.yaml"

Document = dict[str, Any]


def _documents(path: Path) -> list[Document]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def _manifests(kind: str) -> Path:
    return build.LWS.directory / kind


def crd_directory() -> Path:
    """The module's CRDs, as they are (see the module docstring for why no patch applies). kubectl reads them
    directly: each is over a megabyte, which takes pure-Python YAML seconds to parse and dump again."""
    return _manifests("crds")


def rbac_documents() -> list[Document]:
    """The namespace, and the module's ClusterRole and ClusterRoleBinding with the names and namespace kustomize's
    `config/default` gives them."""
    documents: list[Document] = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}]
    rbac = _manifests("rbac")
    for name in ("role.yaml", "role_binding.yaml"):
        for doc in _documents(rbac / name):
            doc = copy.deepcopy(doc)
            doc["metadata"]["name"] = NAME_PREFIX + doc["metadata"]["name"]
            if doc["kind"] == "ClusterRoleBinding":
                doc["roleRef"]["name"] = NAME_PREFIX + doc["roleRef"]["name"]
                for subject in doc["subjects"]:
                    if subject["kind"] == "ServiceAccount":
                        subject["name"] = NAME_PREFIX + subject["name"]
                        subject["namespace"] = NAMESPACE
            documents.append(doc)
    return documents


def _pointer(path: str) -> list[str | int]:
    parts: list[str | int] = []
    for raw in path.lstrip("/").split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        parts.append(int(part) if part.isdigit() else part)
    return parts


def _json_patch(document: Document, operations: list[Document]) -> None:
    """Apply the RFC 6902 `replace` and `add` operations of a kustomize patch file (the only ones the module's
    webhook patches use); anything else is an error, so a version bump that needs more is noticed."""
    for operation in operations:
        *parents, last = _pointer(operation["path"])
        target: Any = document
        for part in parents:
            target = target[part]
        if operation["op"] == "replace":
            target[last] = copy.deepcopy(operation["value"])
        elif operation["op"] == "add" and isinstance(target, list):
            target.insert(len(target) if last == "-" else int(last), copy.deepcopy(operation["value"]))
        elif operation["op"] == "add":
            target[last] = copy.deepcopy(operation["value"])
        else:
            raise ValueError(f"unsupported JSON patch operation {operation['op']!r} in the LWS webhook patches")


def webhook_configurations(port: int, ca_bundle: bytes) -> list[Document]:
    """The module's Mutating/ValidatingWebhookConfiguration, patched as its kustomization does, each webhook pointed
    at `https://127.0.0.1:<port><path>` and trusting `ca_bundle` (PEM)."""
    directory = _manifests("webhook")
    documents = _documents(directory / "manifests.yaml")
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    for patch in kustomization.get("patches", []):
        target = patch["target"]
        operations = yaml.safe_load((directory / patch["path"]).read_text())
        matched = [d for d in documents if (d["kind"], d["metadata"]["name"]) == (target["kind"], target["name"])]
        if len(matched) != 1:
            raise ValueError(f"LWS webhook patch {patch['path']}: no single {target['kind']} {target['name']}")
        _json_patch(matched[0], operations)
    bundle = base64.b64encode(ca_bundle).decode()
    for document in documents:
        document["metadata"]["name"] = NAME_PREFIX + document["metadata"]["name"]
        for webhook in document["webhooks"]:
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": bundle}
    return documents


def configuration(webhook_port: int, health_port: int, cert_dir: Path, qps: int, burst: int) -> Document:
    """The controller's `--config` (kind Configuration, api/config/v1alpha1 of the module): no leader election (one
    replica), the webhook server and the health probes on 127.0.0.1, metrics off ("0": the metrics endpoint would
    need TokenReview/SubjectAccessReview for its auth filter and nothing scrapes it), certificates from the local PKI
    instead of the internal cert rotator (which writes a Secret and patches the webhook configurations' caBundle for
    an in-cluster Service), and a client throttle as loose as the other controllers'."""
    return {
        "apiVersion": "config.lws.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "internalCertManagement": {"enable": False},
        "clientConnection": {"qps": qps, "burst": burst},
    }
