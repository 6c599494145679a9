"""Kubernetes Events about pods, as the kubelet records them (core/v1 Events, source `pod-runner` on the pod's node).

Repeats are aggregated like client-go's recorder does: the same reason for the same container of the same pod
updates one Event (count + 1, lastTimestamp, message) instead of creating another. Sending never blocks the caller
and a failed send is logged, not raised.
"""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

from e2e.serving import log
from e2e.serving.kubeapi import MERGE_PATCH, ApiError, KubeApi
from e2e.serving.podstatus import now_rfc3339

SOURCE = "pod-runner"
NORMAL = "Normal"
WARNING = "Warning"


def event_object(pod: dict[str, Any], container: str | None, kind: str, reason: str, message: str) -> dict[str, Any]:
    """A new core/v1 Event about `pod` (and one of its containers, when named)."""
    metadata = pod["metadata"]
    now = now_rfc3339()
    involved = {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": metadata["namespace"],
        "name": metadata["name"],
        "uid": metadata["uid"],
        "resourceVersion": metadata.get("resourceVersion", ""),
    }
    if container:
        involved["fieldPath"] = f"spec.containers{{{container}}}"
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{metadata['name']}.{secrets.token_hex(8)}", "namespace": metadata["namespace"]},
        "involvedObject": involved,
        "reason": reason,
        "message": message,
        "type": kind,
        "source": {"component": SOURCE, "host": (pod.get("spec") or {}).get("nodeName", "")},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


class EventRecorder:
    def __init__(self, api: KubeApi) -> None:
        self._api = api
        self._sent: dict[tuple[str, str, str], tuple[str, int]] = {}
        self._logged: set[tuple[str, str, str]] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()

    def emit(self, pod: dict[str, Any], container: str | None, kind: str, reason: str, message: str) -> None:
        """Record an Event in the background (and log it the first time)."""
        key = (pod["metadata"]["uid"], container or "", reason)
        if key not in self._logged:
            self._logged.add(key)
            log(f"event {kind} {reason} {pod['metadata']['namespace']}/{pod['metadata']['name']}: {message}")
        task = asyncio.get_running_loop().create_task(self._send(pod, container, kind, reason, message))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, pod: dict[str, Any], container: str | None, kind: str, reason: str, message: str) -> None:
        key = (pod["metadata"]["uid"], container or "", reason)
        namespace = pod["metadata"]["namespace"]
        async with self._lock:  # one at a time: a repeat must see the name of the Event the first one created
            try:
                previous = self._sent.get(key)
                if previous is not None:
                    name, count = previous
                    patch = {"count": count + 1, "lastTimestamp": now_rfc3339(), "message": message}
                    path = f"/api/v1/namespaces/{namespace}/events/{name}"
                    try:
                        await asyncio.to_thread(self._api.request, "PATCH", path, body=patch, content_type=MERGE_PATCH)
                        self._sent[key] = (name, count + 1)
                        return
                    except ApiError as error:
                        if error.status != 404:
                            raise
                event = event_object(pod, container, kind, reason, message)
                await asyncio.to_thread(self._api.request, "POST", f"/api/v1/namespaces/{namespace}/events", body=event)
                self._sent[key] = (event["metadata"]["name"], 1)
            except ApiError as error:
                if error.status != 0:  # an unreachable API server is reported by the watch and the status patches
                    log(f"could not record event {reason} for {namespace}/{pod['metadata']['name']}: {error}")

    def forget(self, uid: str) -> None:
        """Drop the aggregation state of a pod that is gone."""
        for key in [key for key in self._sent if key[0] == uid]:
            del self._sent[key]
        self._logged = {key for key in self._logged if key[0] != uid}

    async def drain(self, timeout: float) -> None:
        """Wait (at most `timeout` seconds) for the Events still being sent."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout)
