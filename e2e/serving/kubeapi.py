"""The few Kubernetes API calls the pod runner makes, as plain JSON over HTTPS (urllib3, thread-safe, keep-alive).

Credentials come from a kubeconfig's current context: the CA (`certificate-authority` or `-data`), a client
certificate and key (file or `-data`) and/or a bearer `token`, which covers the local control plane's admin
kubeconfig and a service-account kubeconfig. Every call has a timeout; a non-2xx answer raises `ApiError` with the
status code. Watches are streamed line by line (`watch`); the caller re-lists on errors and on 410 Gone.
"""

from __future__ import annotations

import base64
import json
import ssl
import tempfile
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import urllib3
import yaml

STRATEGIC_MERGE = "application/strategic-merge-patch+json"
MERGE_PATCH = "application/merge-patch+json"


class ApiError(Exception):
    """The API server answered with an error status (or could not be reached: status 0)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


def _named(entries: list[dict[str, Any]], name: str, what: str) -> dict[str, Any]:
    for entry in entries or []:
        if entry.get("name") == name:
            found: dict[str, Any] = entry.get(what) or {}
            return found
    raise ValueError(f"kubeconfig: no {what} named {name!r}")


def _ssl_context(cluster: dict[str, Any], user: dict[str, Any], base: Path) -> ssl.SSLContext:
    def path_of(key: str) -> Path:
        path = Path(str(cluster.get(key) or user.get(key)))
        return path if path.is_absolute() else base / path

    context = ssl.create_default_context()
    if cluster.get("insecure-skip-tls-verify"):
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif cluster.get("certificate-authority-data"):
        context.load_verify_locations(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
    elif cluster.get("certificate-authority"):
        context.load_verify_locations(cafile=str(path_of("certificate-authority")))
    if user.get("client-certificate-data") and user.get("client-key-data"):
        # ssl loads a certificate chain from files only: a private temporary directory, gone once loaded.
        with tempfile.TemporaryDirectory() as scratch:
            cert, key = Path(scratch) / "client.crt", Path(scratch) / "client.key"
            cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
            key.write_bytes(base64.b64decode(user["client-key-data"]))
            context.load_cert_chain(str(cert), str(key))
    elif user.get("client-certificate") and user.get("client-key"):
        context.load_cert_chain(str(path_of("client-certificate")), str(path_of("client-key")))
    return context


class KubeApi:
    """A Kubernetes API client bound to one kubeconfig."""

    def __init__(self, kubeconfig: Path, timeout: float = 10.0) -> None:
        config = yaml.safe_load(kubeconfig.read_text())
        context = _named(config.get("contexts") or [], config.get("current-context", ""), "context")
        cluster = _named(config.get("clusters") or [], context.get("cluster", ""), "cluster")
        user = _named(config.get("users") or [], context.get("user", ""), "user")
        self.server = str(cluster["server"]).rstrip("/")
        self.timeout = timeout
        self._headers = {"Accept": "application/json", "User-Agent": "disaggspec-pod-runner"}
        token = user.get("token") or (Path(user["tokenFile"]).read_text().strip() if user.get("tokenFile") else "")
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._pool = urllib3.PoolManager(
            num_pools=4, maxsize=16, ssl_context=_ssl_context(cluster, user, kubeconfig.parent), retries=False
        )

    def _url(self, path: str, query: dict[str, Any] | None) -> str:
        url = self.server + path
        if query:
            url += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
        return url

    def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = None,
    ) -> Any:
        """One call; the decoded JSON answer."""
        headers = dict(self._headers)
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body).encode()
        try:
            response = self._pool.request(
                method,
                self._url(path, query),
                body=data,
                headers=headers,
                timeout=urllib3.Timeout(total=timeout or self.timeout),
            )
        except urllib3.exceptions.HTTPError as error:
            raise ApiError(0, f"{method} {path}: {error}") from error
        if response.status >= 300:
            raise ApiError(response.status, f"{method} {path}: {response.data.decode(errors='replace')[:500]}")
        return json.loads(response.data) if response.data else None

    def watch(self, path: str, query: dict[str, Any], read_timeout: float) -> Iterator[dict[str, Any]]:
        """The events of a watch (`?watch=1` is added), until the server ends it; a read stalled for longer than
        `read_timeout` raises `ApiError`."""
        url = self._url(path, {**query, "watch": "1"})
        try:
            response = self._pool.request(
                "GET",
                url,
                headers=self._headers,
                preload_content=False,
                timeout=urllib3.Timeout(connect=self.timeout, read=read_timeout),
            )
        except urllib3.exceptions.HTTPError as error:
            raise ApiError(0, f"watch {path}: {error}") from error
        try:
            if response.status >= 300:
                raise ApiError(response.status, f"watch {path}: {response.read().decode(errors='replace')[:500]}")
            for line in response:
                if line.strip():
                    yield json.loads(line)
        except (urllib3.exceptions.HTTPError, json.JSONDecodeError) as error:
            raise ApiError(0, f"watch {path}: {error}") from error
        finally:
            response.release_conn()

    # ---- the calls the runner makes ----------------------------------------------------------------------------

    def list_pods(self) -> tuple[list[dict[str, Any]], str]:
        """Every pod in every namespace (paged) and the list's resourceVersion."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            page = self.request("GET", "/api/v1/pods", query={"limit": 500, "continue": token})
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items, str(page["metadata"]["resourceVersion"])

    def get(self, path: str) -> dict[str, Any] | None:
        """The object at `path`, or None when it does not exist."""
        try:
            found: dict[str, Any] = self.request("GET", path)
        except ApiError as error:
            if error.status == 404:
                return None
            raise
        return found

    def source_data(self, kind: str, namespace: str, name: str) -> dict[str, str] | None:
        """The data of a ConfigMap, or of a Secret (decoded), for environment variables; None when it is missing."""
        plural = {"ConfigMap": "configmaps", "Secret": "secrets"}[kind]
        found = self.get(f"/api/v1/namespaces/{namespace}/{plural}/{name}")
        if found is None:
            return None
        data = found.get("data") or {}
        if kind == "Secret":
            return {k: base64.b64decode(v).decode(errors="replace") for k, v in data.items()}
        return {k: str(v) for k, v in data.items()}

    def patch_pod_status(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self.request(
            "PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}/status", body=patch, content_type=STRATEGIC_MERGE
        )
        return result

    def delete_pod_now(self, namespace: str, name: str, uid: str) -> bool:
        """Delete the pod with grace period 0 if it still has `uid` (what a kubelet does once its containers are gone);
        False when it is already gone or is another pod by now."""
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
        try:
            self.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", body=options)
        except ApiError as error:
            if error.status in (404, 409):
                return False
            raise
        return True
