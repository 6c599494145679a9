"""Requests through a Kubernetes Service the way kube-proxy would send them, for the serving simulation.

Services have no endpoints here (EndpointSlices refuse the pods' loopback IPs), so the client plays kube-proxy: at most
every `REFRESH_SECONDS` a `ServiceTarget` reads the Service, lists the pods its selector matches in its namespace,
keeps those that are Ready and not terminating, and sends each request to the next of them in turn, on the Service
port's targetPort (a named targetPort is resolved from each pod's container ports, as the EndpointSlice controller
does; a pod without that port is no endpoint). Only 127.0.0.0/8 addresses are ever endpoints. Terminating pods are
left out even when nothing else is ready (kube-proxy would then fall back to them): a test of a rollout must see such
a gap as failed requests, not have it papered over.
"""

from __future__ import annotations

import ipaddress
import itertools
from collections.abc import Mapping, Sequence
from typing import Any, Final, Protocol

from e2e.serving.kubeapi import ApiError
from e2e.serving.traffic import Endpoint

REFRESH_SECONDS: Final = 0.2
_LOOPBACK: Final = ipaddress.ip_network("127.0.0.0/8")


class ServiceApi(Protocol):
    """The two calls a `ServiceTarget` makes (`e2e.serving.kubeapi.KubeApi` has them)."""

    def get(self, path: str) -> dict[str, Any] | None: ...

    def request(self, method: str, path: str, *, query: dict[str, Any] | None = None) -> Any: ...


def pod_ready(pod: Mapping[str, Any]) -> bool:
    """Whether a pod serves: its Ready condition is True and it is not being deleted."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def label_selector(selector: Mapping[str, str]) -> str:
    """A Service's `spec.selector` as a list query's labelSelector (`k=v,k2=v2`)."""
    return ",".join(f"{key}={value}" for key, value in sorted(selector.items()))


def service_port(service: Mapping[str, Any], port: int | str | None = None) -> dict[str, Any]:
    """The Service port named or numbered `port`, or its first when None; LookupError when there is none."""
    ports: list[dict[str, Any]] = (service.get("spec") or {}).get("ports") or []
    for entry in ports:
        if port is None or port in (entry.get("name"), entry.get("port")):
            return entry
    name = (service.get("metadata") or {}).get("name")
    raise LookupError(f"service {name} has no port {port!r} (ports: {[p.get('name') or p.get('port') for p in ports]})")


def target_port(entry: Mapping[str, Any], pod: Mapping[str, Any]) -> int | None:
    """The pod's port for a Service port: a numeric targetPort as is (default: the Service port), a named one looked
    up among the pod's container ports; None when the pod has no port of that name."""
    target = entry.get("targetPort", entry.get("port"))
    if isinstance(target, int):
        return target
    for container in (pod.get("spec") or {}).get("containers") or []:
        for item in container.get("ports") or []:
            if item.get("name") == target and item.get("protocol", "TCP") == entry.get("protocol", "TCP"):
                return int(item["containerPort"])
    return None


def _loopback(ip: str) -> bool:
    try:
        return ipaddress.ip_address(ip) in _LOOPBACK
    except ValueError:
        return False


def ready_endpoints(
    service: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], port: int | str | None = None
) -> list[Endpoint]:
    """The endpoints kube-proxy would use for `service` among `pods` (already those its selector matched): Ready,
    not terminating, with a loopback pod IP and the target port; in pod-name order, each named after its pod."""
    entry = service_port(service, port)
    found: list[Endpoint] = []
    for pod in sorted(pods, key=lambda p: str((p.get("metadata") or {}).get("name"))):
        ip = str((pod.get("status") or {}).get("podIP") or "")
        number = target_port(entry, pod)
        if pod_ready(pod) and _loopback(ip) and number is not None:
            found.append(Endpoint(url=f"http://{ip}:{number}", name=str(pod["metadata"]["name"])))
    return found


class ServiceTarget:
    """A `traffic.Target`: round-robin over the ready endpoints of Service `namespace/name`, re-read from the API
    server every `refresh_interval` seconds while a load runs. A failed read keeps the previous view (counted in
    `errors`); a Service that is gone or selects nothing has no endpoints."""

    def __init__(
        self,
        api: ServiceApi,
        namespace: str,
        name: str,
        port: int | str | None = None,
        refresh_interval: float = REFRESH_SECONDS,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.port = port
        self.refresh_interval: float | None = refresh_interval
        self.errors = 0
        self.last_error = ""
        self._endpoints: list[Endpoint] = []
        self._turn = itertools.count()

    @property
    def endpoints(self) -> list[Endpoint]:
        """The endpoints of the last refresh."""
        return list(self._endpoints)

    def refresh(self) -> None:
        """Read the Service and its pods again (blocking)."""
        try:
            service = self.api.get(f"/api/v1/namespaces/{self.namespace}/services/{self.name}")
            selector = ((service or {}).get("spec") or {}).get("selector") or {}
            if service is None or not selector:
                self._endpoints = []
                return
            pods = self.api.request(
                "GET", f"/api/v1/namespaces/{self.namespace}/pods", query={"labelSelector": label_selector(selector)}
            )
            # One assignment: `pick` (on another thread) sees the old list or the new one, never a mix.
            self._endpoints = ready_endpoints(service, (pods or {}).get("items") or [], self.port)
        except (ApiError, LookupError, OSError, ValueError) as error:
            self.errors += 1
            self.last_error = str(error)

    def pick(self) -> Endpoint | None:
        """The next endpoint in turn, or None when none is ready."""
        endpoints = self._endpoints
        if not endpoints:
            return None
        return endpoints[next(self._turn) % len(endpoints)]

    def __str__(self) -> str:
        failing = f" (last API error: {self.last_error})" if self.errors else ""
        return f"service {self.namespace}/{self.name}{failing}"
