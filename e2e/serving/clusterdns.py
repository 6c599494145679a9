"""The serving simulation's stand-in for cluster DNS, for pod hostname records (`<hostname>.<subdomain>.<namespace>`).

Pods here share this machine's network and there is no cluster DNS, so a process that reaches a peer pod by name (an
SGLang worker node joining its leader at `--dist-init-addr $(LWS_LEADER_ADDRESS):P`, where the LeaderWorkerSet
webhook sets `LWS_LEADER_ADDRESS=<lws>-<group>.<subdomain>.<namespace>`) asks this module, which reads the API server
and applies the rule by which Kubernetes publishes a pod's hostname record:

- the pod has `spec.hostname` = `<hostname>` and `spec.subdomain` = `<subdomain>` (StatefulSet pods, LWS's included,
  get their own name and the set's service name), and a headless Service (`clusterIP: None`) named `<subdomain>` in
  the pod's namespace selects it (the EndpointSlice controller gives an endpoint its hostname only then);
- the pod has an IP and is not Succeeded or Failed; it is Ready and not terminating, unless the Service has
  `publishNotReadyAddresses` (LWS's headless Service has it, so a leader that is not Ready yet still resolves).

Names are taken as a pod's resolver takes them: `h.s.ns`, `h.s.ns.svc` and `h.s.ns.svc.cluster.local`, and `h.s`
in the asking pod's own namespace (its search path starts with `<namespace>.svc.cluster.local`). Anything else (a
Service's own name, another zone) is not a pod hostname record: `parse_pod_name` returns None and the caller falls
back to the host's resolver. Not done: a Service's own records, SRV records, manual EndpointSlices (a Service
without a selector), other cluster domains than `cluster.local`. EndpointSlices are not read because they refuse the
pods' loopback IPs here (see servicetraffic.py); the rule above is applied to the pods directly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from e2e.serving.servicetraffic import ServiceApi, label_selector, pod_ready

CLUSTER_DOMAIN: Final = ("cluster", "local")


@dataclass(frozen=True)
class PodName:
    hostname: str
    subdomain: str
    namespace: str

    def __str__(self) -> str:
        return f"{self.hostname}.{self.subdomain}.{self.namespace}.svc.{'.'.join(CLUSTER_DOMAIN)}"


def parse_pod_name(name: str, namespace: str) -> PodName | None:
    """The pod hostname record `name` asks for, from a pod in `namespace`; None when it is not one."""
    labels = name.strip().rstrip(".").lower().split(".")
    if len(labels) in (4, 6) and labels[3] == "svc" and tuple(labels[4:]) in ((), CLUSTER_DOMAIN):
        labels = labels[:3]
    elif len(labels) == 2:
        labels = [*labels, namespace]
    if len(labels) != 3 or not all(labels):
        return None
    return PodName(*labels)


def _matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def record_addresses(service: Mapping[str, Any] | None, pods: Sequence[Mapping[str, Any]], name: PodName) -> list[str]:
    """The addresses cluster DNS would answer for `name`, given the Service named like its subdomain (None when
    there is none) and the pods of its namespace; [] for NXDOMAIN."""
    if service is None:
        return []
    spec = service.get("spec") or {}
    selector: dict[str, str] = spec.get("selector") or {}
    if spec.get("clusterIP") != "None" or not selector:
        return []
    publish = bool(spec.get("publishNotReadyAddresses"))
    found: list[tuple[str, str]] = []
    for pod in pods:
        meta, pod_spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        if meta.get("namespace", name.namespace) != name.namespace:
            continue
        if pod_spec.get("hostname") != name.hostname or pod_spec.get("subdomain") != name.subdomain:
            continue
        if not _matches(selector, meta.get("labels") or {}):
            continue
        ip = str(status.get("podIP") or "")
        if not ip or status.get("phase") in ("Succeeded", "Failed"):
            continue
        if not publish and not pod_ready(pod):  # pod_ready: Ready and not terminating
            continue
        found.append((str(meta.get("name", "")), ip))
    return [ip for _, ip in sorted(found)]


def lookup(api: ServiceApi, name: PodName) -> list[str]:
    """`record_addresses` for `name`, reading the Service and the pods it selects from the API server (may raise
    `e2e.serving.kubeapi.ApiError`)."""
    service = api.get(f"/api/v1/namespaces/{name.namespace}/services/{name.subdomain}")
    selector = ((service or {}).get("spec") or {}).get("selector") or {}
    if not selector:
        return []
    answer = api.request(
        "GET", f"/api/v1/namespaces/{name.namespace}/pods", query={"labelSelector": label_selector(selector)}
    )
    return record_addresses(service, (answer or {}).get("items") or [], name)
