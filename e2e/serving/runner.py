"""The pod runner's main loop: watch every pod, hand those on kwok nodes to a `PodWorker` (`kubelet.py`), stop
everything on SIGTERM/SIGINT.

The watch runs in a thread: LIST all pods (paged), then WATCH from the list's resourceVersion with bookmarks,
resuming from the last resourceVersion when the server ends a watch; on 410 Gone, an ERROR event or any failure it
lists again (after a short back-off), and the list is reconciled against the workers (a pod missing from it has
vanished). Events reach the asyncio loop through a queue and are handled in order.

A pod is the runner's when its node carries the annotation `kwok.x-k8s.io/node=fake`. It gets a worker once it is
Running with a loopback pod IP (and no deletionTimestamp), or as soon as it is being deleted (whatever its phase:
only the runner finalises deletions in serving mode).

Host-network pods: kwok gives such a pod its node's InternalIP (its `PodIPsWith` returns the node's host IPs for
`hostNetwork`), and every kwok node reports the one `--node-ip` (127.0.0.1) unless its status names another. The
runner, as a kubelet reports its node's addresses, gives each kwok node that runs a host-network pod its own
loopback address, `node_ip` (127.N.255.k in the cluster's pod network 127.N.0.0/16: k from the `gpu-node-<i>` name,
far above the addresses kwok hands out from the bottom of the range), and sets that address as the pod's IP before
the pod gets a worker. So the host-network pods of one node share one IP, and two of them binding one port fail as
they would on a real node.

One runner per state directory (an exclusive lock on `serving/runner.lock`). On start it stops whatever an earlier
runner left in `serving/processes.json`; once the first list is handled it writes `serving/runner.pid`, which tells
`start` it is up. On SIGTERM or SIGINT no container starts or restarts any more, every container gets SIGTERM (a
pod in its preStop pause or its drain included: the pause ends, the drain is cut to the shutdown grace period), then
SIGKILL after the shutdown grace period; their pods are marked not ready (best effort; a pod being deleted is left
for the next runner to finalise), anything the process table still lists is stopped and waited for, and the runner
exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import ipaddress
import json
import os
import re
import signal
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TextIO

from e2e.cluster.controlplane import KWOK_NODE_ANNOTATION, State
from e2e.cluster.proctable import ProcessTable, reap_stale, start_ticks
from e2e.cluster.servingdir import PIDFILE, TABLE, serving_dir
from e2e.serving import log
from e2e.serving.events import EventRecorder
from e2e.serving.kubeapi import ApiError, KubeApi
from e2e.serving.kubelet import PodWorker, Runtime, Settings
from e2e.serving.plan import Launcher

LOCKFILE = "runner.lock"
WATCH_SECONDS = 240
"""Server-side length of one watch; the read timeout allows for bookmarks, which come about once a minute."""
NODE_RECHECK = 10.0
"""How long a node found not to be a kwok node (or not found) is believed."""


_NODE_INDEX = re.compile(r"-(\d+)$")
HOST_SUBNET_OFFSET = 255 * 256
"""Node addresses start at 127.N.255.1 of the pod network 127.N.0.0/16."""


def node_ip(node: str, pod_cidr: str) -> str:
    """The loopback address of kwok node `node` in the cluster's pod network: 127.N.255.(i + 1) for a node named
    `...-<i>` (i < 254), else a stable address from a hash of the name."""
    network = ipaddress.ip_network(pod_cidr)
    found = _NODE_INDEX.search(node)
    index = int(found.group(1)) if found and int(found.group(1)) < 254 else zlib.crc32(node.encode()) % 254
    return str(network[HOST_SUBNET_OFFSET + index + 1])


class RunnerError(RuntimeError):
    """The runner cannot start; the message says why."""


class PodWatcher(threading.Thread):
    """LIST + WATCH of every pod, fed into the loop's queue as ("SYNC", [pods]) and (event type, pod) items."""

    def __init__(self, api: KubeApi, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[tuple[str, Any]]) -> None:
        super().__init__(name="pod-watch", daemon=True)
        self._api, self._loop, self._queue = api, loop, queue
        self.stopping = threading.Event()

    def _put(self, item: tuple[str, Any]) -> None:
        self._loop.call_soon_threadsafe(self._queue.put_nowait, item)

    def run(self) -> None:
        failures = 0
        while not self.stopping.is_set():
            try:
                pods, version = self._api.list_pods()
                self._put(("SYNC", pods))
                failures = 0
                while not self.stopping.is_set():
                    version = self._watch(version)
            except _Relist as why:
                log(f"watch: {why}; listing again")
            except Exception as error:
                if self._loop.is_closed():  # the runner is exiting
                    return
                failures += 1
                log(f"watch failed ({error!r}); listing again")
                self.stopping.wait(min(0.5 * 2**failures, 5.0))

    def _watch(self, version: str) -> str:
        query = {"resourceVersion": version, "allowWatchBookmarks": "true", "timeoutSeconds": WATCH_SECONDS}
        for event in self._api.watch("/api/v1/pods", query, read_timeout=WATCH_SECONDS + 30):
            kind, obj = event.get("type"), event.get("object") or {}
            if kind == "ERROR":
                raise _Relist(f"watch error {obj.get('code')}: {obj.get('message')}")
            version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
            if kind in ("ADDED", "MODIFIED", "DELETED"):
                self._put((str(kind), obj))
            if self.stopping.is_set():
                break
        return version


class _Relist(Exception):
    pass


class Runner:
    def __init__(self, api: KubeApi, launcher: Launcher, state_dir: Path, settings: Settings) -> None:
        self.api = api
        self.directory = serving_dir(state_dir)
        self.table = ProcessTable(self.directory / TABLE)
        self.runtime = Runtime(api, launcher, EventRecorder(api), self.table, self.directory / "logs", settings)
        self.settings = settings
        self.workers: dict[str, PodWorker] = {}
        self._nodes: dict[str, tuple[bool, float]] = {}
        state = State.load(state_dir)
        self.pod_cidr = state.pod_cidr if state is not None else ""
        """The cluster's pod network (host-network pods get their node's address in it); empty: unknown."""
        self._addressed: set[str] = set()
        """kwok nodes whose status already names their own address."""
        self._finalised: set[str] = set()
        self._said: set[str] = set()
        self._lock: TextIO | None = None

    # ---- one runner per state directory ------------------------------------------------------------------------

    def _acquire(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        lock = (self.directory / LOCKFILE).open("a")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise RunnerError(f"another pod runner already runs for {self.directory.parent}") from None
        self._lock = lock

    def _write_pidfile(self) -> None:
        data = {"pid": os.getpid(), "start_ticks": start_ticks(os.getpid())}
        tmp = self.directory / (PIDFILE + ".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.directory / PIDFILE)

    def _release(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.directory / PIDFILE).unlink()
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    # ---- main loop ---------------------------------------------------------------------------------------------

    def run(self) -> int:
        self._acquire()
        try:
            stale = reap_stale(self.table, grace=2.0, say=log)
            if stale:
                log(f"stopped {len(stale)} process(es) an earlier runner left behind")
            asyncio.run(self._main())
        finally:
            self._release()
        return 0

    async def _main(self) -> None:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(max_workers=16, thread_name_prefix="api"))
        stop = asyncio.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        watcher = PodWatcher(self.api, loop, queue)
        watcher.start()
        stopped = asyncio.ensure_future(stop.wait())
        synced = False
        log(f"watching pods on {self.api.server}; processes in {self.table.path}")
        try:
            while not stop.is_set():
                item = asyncio.ensure_future(queue.get())
                await asyncio.wait({item, stopped}, return_when=asyncio.FIRST_COMPLETED)
                if not item.done():
                    item.cancel()
                    break
                kind, payload = item.result()
                try:
                    await self._dispatch(kind, payload)
                except Exception as error:  # one odd object must not stop the runner
                    log(f"could not handle a {kind} event: {error!r}")
                if kind == "SYNC" and not synced:
                    synced = True
                    self._write_pidfile()
                    log(f"ready (pid {os.getpid()})")
        finally:
            watcher.stopping.set()
            await self._shutdown()

    async def _shutdown(self) -> None:
        # First of all: nothing starts or restarts from here on, so what is stopped below stays stopped.
        self.runtime.stopping = True
        workers = list(self.workers.values())
        log(f"shutting down: stopping the processes of {len(workers)} pod(s)")
        for worker in workers:
            worker.shutdown(self.settings.shutdown_grace)  # also cuts short a preStop pause or a drain
        if workers:
            await asyncio.wait(
                [asyncio.ensure_future(w.wait()) for w in workers], timeout=self.settings.shutdown_grace + 10
            )
        # Whatever is still recorded (a worker that did not finish in time) is stopped here, by pid and start time,
        # and waited for; the table keeps only what could not be stopped.
        leftover = await asyncio.to_thread(reap_stale, self.table, 1.0, log)
        if leftover:
            log(f"stopped {len(leftover)} process(es) that outlived their worker")
        await self.runtime.events.drain(timeout=2.0)
        log("stopped")

    # ---- dispatch ----------------------------------------------------------------------------------------------

    async def _dispatch(self, kind: str, payload: Any) -> None:
        if kind == "SYNC":
            pods: list[dict[str, Any]] = payload
            present = {str(p["metadata"]["uid"]) for p in pods}
            for uid in [uid for uid in self.workers if uid not in present]:
                self.workers[uid].vanish(None)
            self._finalised &= present
            for pod in pods:
                await self._pod(pod)
        elif kind == "DELETED":
            uid = str(payload["metadata"]["uid"])
            self._finalised.discard(uid)
            worker = self.workers.get(uid)
            if worker is not None:
                worker.vanish(payload)
        else:
            await self._pod(payload)

    async def _pod(self, pod: dict[str, Any]) -> None:
        metadata, status = pod["metadata"], pod.get("status") or {}
        uid = str(metadata["uid"])
        worker = self.workers.get(uid)
        if worker is not None:
            worker.update(pod)
            return
        if uid in self._finalised or not await self._on_kwok_node(pod):
            return
        if metadata.get("deletionTimestamp"):
            self._add_worker(pod)
            return
        pod_ip = str(status.get("podIP") or "")
        if status.get("phase") != "Running" or not pod_ip:
            return
        if not ipaddress.ip_address(pod_ip).is_loopback:
            self._once(uid, f"{metadata['namespace']}/{metadata['name']}: pod IP {pod_ip} is not on loopback: ignored")
            return
        if (pod.get("spec") or {}).get("hostNetwork") and self.pod_cidr:
            wanted = node_ip(str(pod["spec"]["nodeName"]), self.pod_cidr)
            if pod_ip != wanted:
                await self._host_address(pod, wanted)
                return  # the worker starts on the pod's next event, which carries the address
        self._add_worker(pod)

    async def _host_address(self, pod: dict[str, Any], address: str) -> None:
        """Report the node's own address (once per node) and make it the host-network pod's IP (three tries: the
        pod gets no other event that would retry it)."""
        node = str(pod["spec"]["nodeName"])
        ips = [{"ip": address}]
        for attempt in range(3):
            if attempt:
                await asyncio.sleep(0.5)
            if await self._host_address_once(pod, node, address, ips):
                return

    async def _host_address_once(self, pod: dict[str, Any], node: str, address: str, ips: list[dict[str, str]]) -> bool:
        metadata = pod["metadata"]
        try:
            if node not in self._addressed:
                addresses = [{"type": "InternalIP", "address": address}, {"type": "Hostname", "address": node}]
                await asyncio.to_thread(
                    self.api.request,
                    "PATCH",
                    f"/api/v1/nodes/{node}/status",
                    body={"status": {"addresses": addresses}},
                    content_type="application/merge-patch+json",
                )
                self._addressed.add(node)
                log(f"node {node}: address {address}")
            # A merge patch replaces the IP lists (a strategic merge would add to them, which validation refuses).
            patch = {"status": {"podIP": address, "podIPs": ips, "hostIP": address, "hostIPs": ips}}
            await asyncio.to_thread(
                self.api.request,
                "PATCH",
                f"/api/v1/namespaces/{metadata['namespace']}/pods/{metadata['name']}/status",
                body=patch,
                content_type="application/merge-patch+json",
            )
        except ApiError as error:
            log(f"{metadata['namespace']}/{metadata['name']}: cannot set the host-network address {address}: {error}")
            return False
        return True

    def _add_worker(self, pod: dict[str, Any]) -> None:
        worker = PodWorker(self.runtime, pod)
        self.workers[worker.uid] = worker
        worker.update(pod)  # a pod already being deleted starts out ending
        worker.start()
        asyncio.get_running_loop().create_task(self._forget_when_done(worker))

    async def _forget_when_done(self, worker: PodWorker) -> None:
        await worker.wait()
        if self.workers.get(worker.uid) is worker:
            del self.workers[worker.uid]
        if worker.end == "delete":
            self._finalised.add(worker.uid)

    async def _on_kwok_node(self, pod: dict[str, Any]) -> bool:
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        if not node:
            return False
        known = self._nodes.get(node)
        if known is not None and (known[0] or time.monotonic() - known[1] < NODE_RECHECK):
            return known[0]
        try:
            found = await asyncio.to_thread(self.api.get, f"/api/v1/nodes/{node}")
        except ApiError as error:
            log(f"cannot read node {node}: {error}")
            return False
        annotations = ((found or {}).get("metadata") or {}).get("annotations") or {}
        ours = annotations.get(KWOK_NODE_ANNOTATION) == "fake"
        self._nodes[node] = (ours, time.monotonic())
        return ours

    def _once(self, key: str, message: str) -> None:
        if key not in self._said:
            self._said.add(key)
            log(message)
