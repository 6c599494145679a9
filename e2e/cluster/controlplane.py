"""Starts and stops the local control plane: etcd, kube-apiserver, controller-manager, scheduler, kwok GPU nodes and
the LeaderWorkerSet controller (its CRDs, RBAC and webhooks rendered by `lws.py`), and on request (`metrics=True`)
the metrics pipeline: Prometheus and prometheus-adapter behind the custom metrics API (`metrics.py`).

Everything lives in one state directory: PKI, kubeconfigs, etcd data, one log per process, and a `cluster.json`
that records the ports and the PIDs. `up` starts the components in dependency order, waits for each
to be healthy, and on any failure stops what it started and removes the state, so nothing is left half-running.
`down` stops exactly the processes recorded in the state (it checks each PID's command line before signalling it, so
a recycled PID is never killed) and is idempotent; in serving mode it first stops the pod runner and every process
the runner started (`servingdir.py`). For fault injection, `stop_component`, `start_component` and
`restart_component` act on one process: it comes back with the same flags, ports and data directory (etcd keeps its
data, so every object survives), and a start returns once it is healthy. All listeners bind to 127.0.0.1. The
process supervision (ports, PID ownership, liveness, stopping) lives in `processes.py`.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from e2e.cluster import build, lws, metrics, pki
from e2e.cluster.processes import LOOPBACK, alive, is_ours, log, port_free, stop_pid, tail
from e2e.cluster.servingdir import SERVING_DIR, stop_runner

CLIENT_QPS = 5000
CLIENT_BURST = 10000
SERVICE_CIDR = "10.96.0.0/16"
LEGACY_POD_CIDR = "10.244.0.0/16"
"""The pod network of a cluster in default mode (nothing binds its pod IPs, and the EndpointSlice controller accepts
them), and of every state file written before `pod_cidr` existed."""
STATE_FILE = "cluster.json"
# Fake-node marker: kwok manages exactly the nodes that carry this annotation.
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
RDMA_RESOURCE = "rdma/hca_shared_devices_a"
GPU_RESOURCE = "nvidia.com/gpu"
ZONES = ("zone-a", "zone-b")
# Order matters: kwok applies the first stage whose selector matches. Paths under kwok's module `stage/` directory,
# except those under `stages/` here (ours).
KWOK_NODE_STAGES = ("node/fast/node-initialize.yaml", "node/heartbeat/node-heartbeat.yaml")
KWOK_STAGE_FILES = (
    *KWOK_NODE_STAGES,
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
)
"""Default mode: kwok marks pods Running and Ready at once and deletes terminating pods itself."""
OWN_STAGES = Path(__file__).resolve().parent / "stages"
SERVING_POD_STAGE = "pod-running-unready.yaml"
SERVING_STAGE_FILES = (*KWOK_NODE_STAGES, SERVING_POD_STAGE)
"""Serving mode: kwok binds pods (Running, an IP) but leaves readiness, restarts, completion and deletion to the pod
runner (`python -m e2e.serving`), the kubelet double that runs one local process per container: a Job's pod (the
model cache's fill) completes when its process exits, not by kwok's pod-complete stage."""


METRICS_COMPONENTS = ("prometheus", "prometheus-adapter")
"""The processes of the metrics pipeline, started only by `up(metrics=True)`."""
METRICS_BUILDS = (build.PROMETHEUS, build.PROMETHEUS_ADAPTER)
"""Their cached builds, which a cluster without the pipeline does not need."""
COMPONENTS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "lws-controller",
    *METRICS_COMPONENTS,
)
"""Every process of the local control plane, in start order (the keys of `State.pids`)."""
COMPONENT_ALIASES = {
    "apiserver": "kube-apiserver",
    "controller-manager": "kube-controller-manager",
    "scheduler": "kube-scheduler",
    "lws": "lws-controller",
    "adapter": "prometheus-adapter",
}
HPA_SYNC_PERIOD = "5s"
"""kube-controller-manager's `--horizontal-pod-autoscaler-sync-period` (default 15 s): an HPA acts within seconds of a
metric's change, which a test can wait for. Downscale stabilization keeps its default (5 minutes): an HPA that must
scale down sooner says so in its own `behavior.scaleDown.stabilizationWindowSeconds`."""


class ClusterError(RuntimeError):
    """The cluster cannot be started or used; the message says why and what to do."""


def pod_cidr_for(port_base: int) -> str:
    """The pod network of the cluster on `port_base`: a /16 of loopback, `127.N.0.0/16` with N in 2..254.

    Linux routes all of 127.0.0.0/8 to `lo`, so a process can bind a kwok-allocated pod IP with no setup, and traffic
    to it never leaves the host. N follows the port base in steps of 10 (the spacing of the test clusters' bases), so
    clusters that can run side by side (the default 16379, the session clusters from 17379, the private ones from
    17879, the fixed test bases 18379 and 18479) get different networks; N never is 0 or 1 (no overlap with
    127.0.0.1 or systemd-resolved's 127.0.0.53) nor 255 (the 127/8 broadcast address)."""
    return f"127.{2 + (port_base // 10) % 253}.0.0/16"


def kwok_stage_documents(serving: bool) -> list[str]:
    """The kwok Stage documents of a cluster, in kwok's order of precedence."""
    kwok_stages = build.KWOK.directory / "stage"
    files = SERVING_STAGE_FILES if serving else KWOK_STAGE_FILES
    return [(OWN_STAGES / name if name == SERVING_POD_STAGE else kwok_stages / name).read_text() for name in files]


def default_state_dir() -> Path:
    configured = os.environ.get("DISAGGSPEC_CLUSTER_DIR")
    if configured:
        return Path(configured)
    return Path(__file__).resolve().parents[2] / ".state" / "cluster"


@dataclass
class Ports:
    """Loopback ports of every listener; a base offset lets two clusters coexist."""

    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int
    kwok: int
    lws_webhook: int
    """The LeaderWorkerSet controller's webhook server (TLS, called by the API server)."""
    lws_health: int
    """Its health probes (`/healthz`, `/readyz`); its metrics endpoint is off."""
    prometheus: int
    """Prometheus's HTTP API and `/-/ready` (metrics pipeline only)."""
    prometheus_adapter: int
    """prometheus-adapter's TLS API server (metrics pipeline only), behind the custom metrics APIService."""

    @classmethod
    def from_base(cls, base: int) -> Ports:
        return cls(*range(base, base + 10))

    def of_components(self, metrics: bool) -> dict[str, int]:
        """The ports a cluster binds: the metrics pipeline's only when it runs."""
        ports = asdict(self)
        if not metrics:
            ports.pop("prometheus")
            ports.pop("prometheus_adapter")
        return ports


@dataclass
class NodeShape:
    """The capacity and labels of every fake GPU node."""

    count: int = 4
    gpus: int = 8
    rdma_devices: int = 8
    cpu: str = "96"
    memory: str = "1Ti"
    gpu_product: str = "NVIDIA-H200"
    """The `nvidia.com/gpu.product` label of the nodes (H200: the DeepSeek example needs 141 GB GPUs)."""
    second_product_nodes: int = 0
    """How many of the `count` nodes (the last ones) carry `second_product` instead."""
    second_product: str = "NVIDIA-H100-80GB-HBM3"
    """(H100 80 GB: the multi-node DeepSeek example spans two such nodes per server.) These nodes are also tainted
    `nvidia.com/gpu=present:NoSchedule`, as GPU node pools often are, so only pods that tolerate it (the multi-node
    example) land there and take them whole, whatever else the tests run at the same time."""

    def product(self, index: int) -> str:
        """The GPU product label of node `index`."""
        return self.second_product if index >= self.count - self.second_product_nodes else self.gpu_product


@dataclass
class State:
    """What `up` recorded: enough for `down`, `status` and `env` to work from another process."""

    directory: Path
    ports: Ports
    nodes: NodeShape = field(default_factory=NodeShape)
    pids: dict[str, int] = field(default_factory=dict)
    pod_cidr: str = ""
    """kwok's pod network (`--cidr`); empty means the one `pod_cidr_for` derives from the port base."""
    serving: bool = False
    """Serving mode: kwok leaves readiness, restarts and deletion of pods to the pod runner (`SERVING_STAGE_FILES`)."""
    metrics: bool = False
    """The metrics pipeline runs: Prometheus and prometheus-adapter, registered as the custom metrics API."""

    def __post_init__(self) -> None:
        if not self.pod_cidr:
            self.pod_cidr = pod_cidr_for(self.ports.etcd_client)

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "admin.kubeconfig"

    @property
    def server(self) -> str:
        return f"https://{LOOPBACK}:{self.ports.apiserver}"

    def save(self) -> None:
        data = {
            "ports": asdict(self.ports),
            "nodes": asdict(self.nodes),
            "pids": self.pids,
            "pod_cidr": self.pod_cidr,
            "serving": self.serving,
            "metrics": self.metrics,
        }
        tmp = self.directory / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
        os.replace(tmp, self.directory / STATE_FILE)

    @classmethod
    def load(cls, directory: Path) -> State | None:
        path = directory / STATE_FILE
        if not path.is_file():
            return None
        data = json.loads(path.read_text())
        # A state written before the LWS controller (or the metrics pipeline) existed lacks its ports: the ones its base
        # would give.
        ports = {**asdict(Ports.from_base(data["ports"]["etcd_client"])), **data["ports"]}
        return cls(
            directory,
            Ports(**ports),
            NodeShape(**data["nodes"]),
            dict(data["pids"]),
            # A state written before these fields existed: its kwok runs on the old network, without serving mode.
            pod_cidr=data.get("pod_cidr") or LEGACY_POD_CIDR,
            serving=bool(data.get("serving", False)),
            metrics=bool(data.get("metrics", False)),
        )


def _write_kubeconfig(path: Path, server: str, ca: Path, cert: Path, key: Path, user: str) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "disaggspec-local", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {"client-certificate": str(cert), "client-key": str(key)}}],
        "contexts": [{"name": "disaggspec-local", "context": {"cluster": "disaggspec-local", "user": user}}],
        "current-context": "disaggspec-local",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)


def _controller_flags(kubeconfig: Path, port: int, cert_dir: Path) -> list[str]:
    """The flags kube-controller-manager and kube-scheduler share: their identity, a loopback health port of their
    own, no leader election, and no client-side throttling."""
    return [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--bind-address={LOOPBACK}",
        f"--secure-port={port}",
        f"--cert-dir={cert_dir}",
        "--leader-elect=false",
        # kwok nodes make the control plane, not kubelets, the limit: the default client-side throttle (20 QPS per
        # controller) would turn 1,500 fake pods into minutes of waiting in the controller-manager itself. kwokctl
        # lifts it the same way; the API server keeps its own flow control. (Deprecated for the scheduler, still
        # honoured.)
        f"--kube-api-qps={CLIENT_QPS}",
        f"--kube-api-burst={CLIENT_BURST}",
        "--profiling=false",
        "--v=1",
    ]


def _poll(
    state: State,
    name: str,
    proc: subprocess.Popen[bytes],
    request: urllib.request.Request,
    context: ssl.SSLContext | None,
    timeout: float,
    failure: str,
) -> None:
    """Send `request` until it answers 200; fail fast (with the log tail) when component `name`'s process dies."""
    log_path = state.directory / "logs" / f"{name}.log"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ClusterError(f"{name} exited with code {proc.returncode} during start:\n{tail(log_path)}")
        try:
            with urllib.request.urlopen(request, context=context, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError, ssl.SSLError):
            pass
        time.sleep(0.2)
    raise ClusterError(f"{name} {failure} at {request.full_url} after {timeout:.0f}s:\n{tail(log_path)}")


class LocalCluster:
    """The local control plane rooted at one state directory."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = (directory or default_state_dir()).resolve()
        # The processes this object started (so a start can fail fast when one exits); `down` works from the PIDs.
        self._procs: dict[str, subprocess.Popen[bytes]] = {}

    # ---- queries -----------------------------------------------------------------------------------------------

    def state(self) -> State | None:
        return State.load(self.directory)

    def running(self) -> dict[str, bool]:
        state = self.state()
        if state is None:
            return {}
        return {name: alive(pid) and is_ours(pid, self.directory) for name, pid in state.pids.items()}

    def is_up(self) -> bool:
        running = self.running()
        return bool(running) and all(running.values()) and self._readyz(self.require_state())

    def require_state(self) -> State:
        state = self.state()
        if state is None:
            raise ClusterError(f"no cluster state in {self.directory}: run `make cluster-up` first")
        return state

    def _ssl_context(self, state: State) -> ssl.SSLContext:
        keys = pki.Pki(state.directory / "pki")
        context = ssl.create_default_context(cafile=str(keys.ca_cert))
        context.load_cert_chain(str(keys.client_cert(pki.ADMIN)), str(keys.client_key(pki.ADMIN)))
        return context

    def _readyz(self, state: State) -> bool:
        try:
            with urllib.request.urlopen(
                f"{state.server}/readyz", context=self._ssl_context(state), timeout=2
            ) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError, ssl.SSLError):
            return False

    @staticmethod
    def _kubectl_argv(state: State) -> list[str]:
        return [str(build.KUBERNETES.path("kubectl")), "--kubeconfig", str(state.kubeconfig)]

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        state = self.require_state()
        command = [*self._kubectl_argv(state), *args]
        result = subprocess.run(command, input=input, capture_output=True, text=True, timeout=120)
        if check and result.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")
        return result

    # ---- lifecycle ---------------------------------------------------------------------------------------------

    def up(
        self,
        port_base: int = 16379,
        nodes: NodeShape | None = None,
        timeout: float = 90.0,
        serving: bool = False,
        metrics: bool = False,
    ) -> State:
        """Start every component, or report that this state directory already runs a healthy cluster.

        `serving=True` starts kwok with the serving stages: pods become Running with a loopback IP but not Ready, and
        terminating pods stay until the pod runner (`python -m e2e.serving start`) finalises them. `metrics=True` also
        starts the metrics pipeline (`metrics.py`): Prometheus scraping the pool pods' SGLang servers and
        prometheus-adapter serving them as `custom.metrics.k8s.io`, for the HPA controller."""
        existing = self.state()
        if existing is not None:
            running = self.running()
            if running and all(running.values()) and self._readyz(existing):
                if existing.serving != serving:
                    want, have = ("serving", "default") if serving else ("default", "serving")
                    raise ClusterError(
                        f"the cluster in {self.directory} runs in {have} mode, not {want} mode; "
                        "run `make cluster-down` first to change it"
                    )
                if existing.metrics != metrics:
                    have = "with" if existing.metrics else "without"
                    raise ClusterError(
                        f"the cluster in {self.directory} runs {have} the metrics pipeline; "
                        "run `make cluster-down` first to change it"
                    )
                log(f"already up: {existing.server}")
                return existing
            dead = sorted(name for name, is_running in running.items() if not is_running)
            raise ClusterError(
                f"stale state directory {self.directory} from an earlier run "
                f"(not running: {', '.join(dead) or 'all'}); run `make cluster-down` to clear it, then retry"
            )
        if self.directory.exists() and any(self.directory.iterdir()):
            raise ClusterError(
                f"state directory {self.directory} is not empty but holds no cluster; "
                "run `make cluster-down` to clear it (or set DISAGGSPEC_CLUSTER_DIR)"
            )
        ports = Ports.from_base(port_base)
        busy = [f"{name}={port}" for name, port in ports.of_components(metrics).items() if not port_free(port)]
        if busy:
            raise ClusterError(
                f"ports already in use on {LOOPBACK}: {', '.join(busy)}; stop what holds them or pick another "
                "base with DISAGGSPEC_CLUSTER_PORT_BASE"
            )
        # The metrics pipeline's binaries are built with the rest (`build.ALL`, so `make cluster-build` warms them),
        # but a cluster without it does not need them.
        build.ensure_built(build.ALL if metrics else tuple(c for c in build.ALL if c not in METRICS_BUILDS))
        self.directory.mkdir(parents=True, exist_ok=True)
        # Loopback pod IPs only where processes bind them: the EndpointSlice controller refuses loopback endpoints and
        # retries every Service that has pods, load a default-mode cluster has no reason to carry.
        pod_cidr = pod_cidr_for(port_base) if serving else LEGACY_POD_CIDR
        state = State(self.directory, ports, nodes or NodeShape(), pod_cidr=pod_cidr, serving=serving, metrics=metrics)
        state.save()
        started = time.monotonic()
        try:
            self._start_all(state, timeout)
        except BaseException:
            log("start failed: stopping everything that was started")
            self.down(quiet=True)
            raise
        mode = ", serving mode (start the pod runner: python -m e2e.serving start)" if serving else ""
        if metrics:
            mode += f", metrics pipeline (Prometheus http://{LOOPBACK}:{ports.prometheus}, custom.metrics.k8s.io)"
        log(
            f"up in {time.monotonic() - started:.1f}s: {state.server}, {state.nodes.count} kwok GPU nodes Ready, "
            f"pod IPs in {state.pod_cidr}{mode}"
        )
        return state

    def _spawn(self, state: State, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        logfile = (state.directory / "logs" / f"{name}.log").open("ab")
        # A new session: `down` can signal it alone, and Ctrl-C in the caller's terminal does not reach it.
        proc = subprocess.Popen(argv, stdout=logfile, stderr=subprocess.STDOUT, start_new_session=True)
        logfile.close()
        state.pids[name] = proc.pid
        state.save()
        return proc

    def _wait(self, state: State, name: str, proc: subprocess.Popen[bytes], probe: str, timeout: float) -> None:
        """Wait until `probe` answers, failing fast (with the log tail) when the process dies."""
        context = self._ssl_context(state) if probe.startswith("https://") else None
        if context is not None and "127.0.0.1:" in probe and not probe.startswith(state.server):
            # controller-manager and scheduler serve a self-signed cert of their own.
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        _poll(state, name, proc, urllib.request.Request(probe), context, timeout, "not healthy")

    def _start_all(self, state: State, timeout: float) -> None:
        d = state.directory
        (d / "logs").mkdir(exist_ok=True)
        keys = pki.generate(d / "pki")
        _write_kubeconfig(
            state.kubeconfig,
            state.server,
            keys.ca_cert,
            keys.client_cert(pki.ADMIN),
            keys.client_key(pki.ADMIN),
            "admin",
        )
        for client in (pki.CONTROLLER_MANAGER, pki.SCHEDULER, pki.KWOK, pki.LWS_CONTROLLER, pki.PROMETHEUS_ADAPTER):
            path = d / f"{client.filename}.kubeconfig"
            _write_kubeconfig(
                path, state.server, keys.ca_cert, keys.client_cert(client), keys.client_key(client), client.user
            )
        (d / "kwok-stages.yaml").write_text("\n---\n".join(kwok_stage_documents(state.serving)))
        cert_dir = d / lws.CERT_DIR
        pki.issue_loopback_serving_cert(keys, "lws-webhook", cert_dir / "tls.crt", cert_dir / "tls.key")
        config = lws.configuration(state.ports.lws_webhook, state.ports.lws_health, cert_dir, CLIENT_QPS, CLIENT_BURST)
        (d / lws.CONFIG_FILE).write_text(yaml.safe_dump(config, sort_keys=False))
        if state.metrics:
            self._write_metrics_files(state, keys)

        self._start_component(state, "etcd", timeout)
        self._start_component(state, "kube-apiserver", timeout)
        # The LWS CRDs (2.8 MB) go in while the other components start, so they are Established by the time the LWS
        # controller starts. Server-side: each is over a megabyte, past the limit of client-side apply's
        # last-applied annotation.
        crd_apply = subprocess.Popen(
            [*self._kubectl_argv(state), "apply", "--server-side", "-f", str(lws.crd_directory()), "-o", "name"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            # The controller-manager and the scheduler start together, then are waited for in turn.
            for name in ("kube-controller-manager", "kube-scheduler"):
                self._procs[name] = self._spawn(state, name, self._argv(state, name))
            for name in ("kube-controller-manager", "kube-scheduler"):
                self._wait(state, name, self._procs[name], self._probe(state, name), timeout)
            self._start_component(state, "kwok", timeout)
            self.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(fake_nodes(state.nodes)))
            self._wait_nodes_ready(state, self._procs["kwok"], timeout)
            self._install_lws(state, crd_apply, timeout)
        finally:
            if crd_apply.poll() is None:  # a start that failed before `_install_lws` collected it
                crd_apply.kill()
                crd_apply.communicate()
        self._start_component(state, "lws-controller", timeout)
        if state.metrics:
            ca = keys.ca_cert.read_bytes()
            documents = metrics.cluster_objects(state.ports.prometheus_adapter, ca)
            self.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(documents))
            for name in METRICS_COMPONENTS:
                self._start_component(state, name, timeout)

    @staticmethod
    def _write_metrics_files(state: State, keys: pki.Pki) -> None:
        """Prometheus's and the adapter's configuration files and the adapter's serving certificate."""
        d = state.directory
        config = metrics.prometheus_config(state.server, keys)
        (d / metrics.PROMETHEUS_CONFIG_FILE).write_text(yaml.safe_dump(config, sort_keys=False))
        (d / metrics.ADAPTER_CONFIG_FILE).write_text(yaml.safe_dump(metrics.adapter_config(), sort_keys=False))
        certs = d / metrics.ADAPTER_CERT_DIR
        names = metrics.adapter_dns_names()
        pki.issue_loopback_serving_cert(keys, "prometheus-adapter", certs / "tls.crt", certs / "tls.key", names)

    def _wait_api_service(self, state: State, proc: subprocess.Popen[bytes], timeout: float) -> None:
        """Wait until the API server reports every custom metrics APIService Available (it reached the adapter over
        TLS and read its discovery), failing fast when the adapter exits."""
        deadline = time.monotonic() + timeout
        condition = "jsonpath={.status.conditions[?(@.type=='Available')].status}"
        for version in metrics.API_VERSIONS:
            name = f"{version}.{metrics.API_GROUP}"
            while self.kubectl("get", "apiservice", name, "-o", condition, check=False).stdout.strip() != "True":
                if proc.poll() is not None:
                    log_path = state.directory / "logs" / "prometheus-adapter.log"
                    raise ClusterError(f"prometheus-adapter exited with code {proc.returncode}:\n{tail(log_path)}")
                if time.monotonic() > deadline:
                    status = self.kubectl("get", "apiservice", name, "-o", "jsonpath={.status}", check=False).stdout
                    raise ClusterError(f"APIService {name} not Available after {timeout:.0f}s: {status}")
                time.sleep(0.2)

    def _install_lws(self, state: State, crd_apply: subprocess.Popen[str], timeout: float) -> None:
        """The objects the LWS controller needs before it starts: its namespace and RBAC, its webhook configurations,
        and its CRDs (`crd_apply`, started earlier), Established: the controller cannot start watching a kind the API
        server does not serve yet. They live in etcd, so a stop/start of the controller keeps them."""
        ca = pki.Pki(state.directory / "pki").ca_cert.read_bytes()
        documents = [*lws.rbac_documents(), *lws.webhook_configurations(state.ports.lws_webhook, ca)]
        self.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(documents))
        deadline = time.monotonic() + timeout
        try:
            applied, errors = crd_apply.communicate(timeout=timeout)
        except subprocess.TimeoutExpired as error:
            raise ClusterError(f"applying the LWS CRDs took over {timeout:.0f}s") from error
        if crd_apply.returncode != 0:
            raise ClusterError(f"applying the LWS CRDs failed ({crd_apply.returncode}): {errors.strip()}")
        crds = [line.split("/", 1)[1] for line in applied.split()]
        condition = "jsonpath={.status.conditions[?(@.type=='Established')].status}"
        for name in crds:
            # Right after a create `.status.conditions` is null and `kubectl wait` errors out: poll instead.
            while self.kubectl("get", "crd", name, "-o", condition, check=False).stdout.strip() != "True":
                if time.monotonic() > deadline:
                    raise ClusterError(f"CRD {name} not Established after {timeout:.0f}s")
                time.sleep(0.2)

    def _start_component(self, state: State, name: str, timeout: float) -> None:
        proc = self._spawn(state, name, self._argv(state, name))
        self._procs[name] = proc
        self._wait(state, name, proc, self._probe(state, name), timeout)
        if name == "lws-controller":
            self._wait_lws_webhook(state, proc, timeout)
        if name == "prometheus-adapter":
            self._wait_api_service(state, proc, timeout)

    def _wait_lws_webhook(self, state: State, proc: subprocess.Popen[bytes], timeout: float) -> None:
        """Wait until the LWS webhook server accepts TLS with the local CA's certificate and serves the pod mutating
        webhook. The controller registers its webhooks after its health probes are up, and until then the path
        answers 404, which the API server would turn into a refused LWS pod (failurePolicy Fail)."""
        url = f"https://{LOOPBACK}:{state.ports.lws_webhook}{lws.POD_MUTATING_PATH}"
        context = ssl.create_default_context(cafile=str(pki.Pki(state.directory / "pki").ca_cert))
        # An empty AdmissionReview: a registered webhook answers 200 (with an error in the review), an unknown path 404.
        request = urllib.request.Request(url, data=b"{}", headers={"Content-Type": "application/json"})
        _poll(state, "lws-controller", proc, request, context, timeout, "webhook not serving")

    def _probe(self, state: State, name: str) -> str:
        """The URL that answers 200 once component `name` is healthy."""
        p = state.ports
        return {
            "etcd": f"http://{LOOPBACK}:{p.etcd_client}/health",
            "kube-apiserver": f"{state.server}/readyz",
            "kube-controller-manager": f"https://{LOOPBACK}:{p.controller_manager}/healthz",
            "kube-scheduler": f"https://{LOOPBACK}:{p.scheduler}/healthz",
            "kwok": f"http://{LOOPBACK}:{p.kwok}/healthz",
            "lws-controller": f"http://{LOOPBACK}:{p.lws_health}/readyz",
            "prometheus": f"http://{LOOPBACK}:{p.prometheus}/-/ready",
            # Anonymous: the adapter's delegated authorization always allows its health paths.
            "prometheus-adapter": f"https://{LOOPBACK}:{p.prometheus_adapter}/readyz",
        }[name]

    def _argv(self, state: State, name: str) -> list[str]:
        """The command line of component `name`: the same on every start, so a restart keeps flags, ports and data."""
        d = state.directory
        keys = pki.Pki(d / "pki")
        p = state.ports
        k8s = build.KUBERNETES
        if name == "etcd":
            return [
                str(build.ETCD.path("etcd")),
                "--name=local",
                f"--data-dir={d / 'etcd'}",
                f"--listen-client-urls=http://{LOOPBACK}:{p.etcd_client}",
                f"--advertise-client-urls=http://{LOOPBACK}:{p.etcd_client}",
                f"--listen-peer-urls=http://{LOOPBACK}:{p.etcd_peer}",
                f"--initial-advertise-peer-urls=http://{LOOPBACK}:{p.etcd_peer}",
                f"--initial-cluster=local=http://{LOOPBACK}:{p.etcd_peer}",
                "--listen-metrics-urls=",
                "--log-level=warn",
                # Test data is disposable: skip fsync so 2-core CI machines are not I/O bound.
                "--unsafe-no-fsync",
            ]
        if name == "kube-apiserver":
            return [
                str(k8s.path("kube-apiserver")),
                f"--etcd-servers=http://{LOOPBACK}:{p.etcd_client}",
                f"--bind-address={LOOPBACK}",
                f"--advertise-address={LOOPBACK}",
                f"--secure-port={p.apiserver}",
                f"--tls-cert-file={keys.serving_cert}",
                f"--tls-private-key-file={keys.serving_key}",
                f"--client-ca-file={keys.ca_cert}",
                "--authorization-mode=RBAC",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={keys.sa_pub}",
                f"--service-account-signing-key-file={keys.sa_key}",
                # 127.0.0.1 cannot back the `kubernetes` Service endpoints; nothing in-cluster runs, so keep none.
                "--endpoint-reconciler-type=none",
                "--allow-privileged=true",
                "--profiling=false",
                f"--cert-dir={d / 'apiserver-certs'}",
                # The aggregation layer (front proxy), set whether or not the metrics pipeline runs: with no
                # APIService backed by a Service these flags change nothing (the API server only presents the proxy
                # certificate when it proxies to an aggregated API server), and one command line for every mode means
                # a restart of the API server never depends on how the cluster was started. The request-header CA is
                # the cluster CA: only the certificate whose CN is `front-proxy-client` may assert a user in
                # X-Remote-* headers (every key of this local plane is in its state directory anyway).
                # `--enable-aggregator-routing` stays off: the adapter's Service is an ExternalName (`metrics.py`).
                f"--requestheader-client-ca-file={keys.ca_cert}",
                f"--requestheader-allowed-names={pki.FRONT_PROXY_CLIENT.user}",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={keys.client_cert(pki.FRONT_PROXY_CLIENT)}",
                f"--proxy-client-key-file={keys.client_key(pki.FRONT_PROXY_CLIENT)}",
                "--v=1",
            ]
        if name == "kube-controller-manager":
            return [
                str(k8s.path("kube-controller-manager")),
                *_controller_flags(
                    d / f"{pki.CONTROLLER_MANAGER.filename}.kubeconfig",
                    p.controller_manager,
                    d / "controller-manager-certs",
                ),
                f"--service-account-private-key-file={keys.sa_key}",
                f"--root-ca-file={keys.ca_cert}",
                f"--cluster-signing-cert-file={keys.ca_cert}",
                f"--cluster-signing-key-file={keys.ca_key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                # Each controller acts as its own ServiceAccount with the bootstrap RBAC roles, as kubeadm does.
                "--use-service-account-credentials=true",
                f"--horizontal-pod-autoscaler-sync-period={HPA_SYNC_PERIOD}",
            ]
        if name == "kube-scheduler":
            return [
                str(k8s.path("kube-scheduler")),
                *_controller_flags(d / f"{pki.SCHEDULER.filename}.kubeconfig", p.scheduler, d / "scheduler-certs"),
            ]
        if name == "kwok":
            return [
                str(build.KWOK.path("kwok")),
                f"--kubeconfig={d / f'{pki.KWOK.filename}.kubeconfig'}",
                f"--config={d / 'kwok-stages.yaml'}",
                f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
                f"--cidr={state.pod_cidr}",
                f"--node-ip={LOOPBACK}",
                f"--server-address={LOOPBACK}:{p.kwok}",
            ]
        if name == "lws-controller":
            # Everything else (ports, certificates, leader election, metrics) is in the --config file (`lws.py`).
            return [
                str(build.LWS.path("lws-controller")),
                f"--kubeconfig={d / f'{pki.LWS_CONTROLLER.filename}.kubeconfig'}",
                f"--config={d / lws.CONFIG_FILE}",
                "--zap-devel=false",
                "--zap-encoder=console",
                "--zap-log-level=info",
            ]
        if name == "prometheus":
            return metrics.prometheus_argv(build.PROMETHEUS.path("prometheus"), d, p.prometheus)
        if name == "prometheus-adapter":
            kubeconfig = d / f"{pki.PROMETHEUS_ADAPTER.filename}.kubeconfig"
            binary = build.PROMETHEUS_ADAPTER.path("prometheus-adapter")
            return metrics.adapter_argv(binary, d, p.prometheus_adapter, p.prometheus, kubeconfig)
        raise ClusterError(f"unknown component {name!r}: one of {', '.join(COMPONENTS)}")

    # ---- one component at a time (fault injection) -------------------------------------------------------------

    def _component(self, name: str) -> str:
        canonical = COMPONENT_ALIASES.get(name, name)
        if canonical not in COMPONENTS:
            choices = ", ".join(sorted(set(COMPONENT_ALIASES) | set(COMPONENTS)))
            raise ClusterError(f"unknown component {name!r}: one of {choices}")
        return canonical

    def _ports_of(self, state: State, name: str) -> list[int]:
        p = state.ports
        return {
            "etcd": [p.etcd_client, p.etcd_peer],
            "kube-apiserver": [p.apiserver],
            "kube-controller-manager": [p.controller_manager],
            "kube-scheduler": [p.scheduler],
            "kwok": [p.kwok],
            "lws-controller": [p.lws_webhook, p.lws_health],
            "prometheus": [p.prometheus],
            "prometheus-adapter": [p.prometheus_adapter],
        }[name]

    def stop_component(self, name: str, grace: float = 15.0) -> None:
        """Stop one component (SIGTERM, then SIGKILL after `grace` seconds); its data directory and recorded flags
        stay, so `start_component` brings back the same process. A component that is not running is left alone.

        kube-apiserver may use the whole grace period when a client holds a connection without reading it (a
        SIGSTOPped operator): pass a short one to turn the stop into a crash instead."""
        component = self._component(name)
        state = self.require_state()
        pid = state.pids.get(component)
        if pid is not None:
            stop_pid(component, pid, self.directory, timeout=grace)
        self._procs.pop(component, None)
        log(f"{component} stopped")

    def start_component(self, name: str, timeout: float = 90.0) -> None:
        """Start one stopped component with the flags, ports and data directory it had, and wait until it is
        healthy. Refuses when it is still running (stop it first, or use `restart_component`)."""
        component = self._component(name)
        state = self.require_state()
        if component in METRICS_COMPONENTS and not state.metrics:
            raise ClusterError(
                f"{component} belongs to the metrics pipeline, which this cluster runs without (up --metrics)"
            )
        pid = state.pids.get(component)
        if pid is not None and alive(pid) and is_ours(pid, self.directory):
            raise ClusterError(f"{component} is already running (pid {pid}): use restart")
        # The kernel may hold the port for a moment after the old process exited.
        deadline = time.monotonic() + 15
        ports = self._ports_of(state, component)
        while not all(port_free(port) for port in ports):
            if time.monotonic() > deadline:
                busy = [str(port) for port in ports if not port_free(port)]
                raise ClusterError(f"cannot start {component}: port(s) {', '.join(busy)} still in use")
            time.sleep(0.1)
        started = time.monotonic()
        self._start_component(state, component, timeout)
        log(f"{component} started (pid {state.pids[component]}) and healthy in {time.monotonic() - started:.1f}s")

    def restart_component(self, name: str, timeout: float = 90.0, grace: float = 15.0) -> None:
        """`stop_component` then `start_component`: same flags, ports and data; returns once it is healthy."""
        self.stop_component(name, grace)
        self.start_component(name, timeout)

    def _wait_nodes_ready(self, state: State, kwok: subprocess.Popen[bytes], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if kwok.poll() is not None:
                raise ClusterError(f"kwok exited during start:\n{tail(state.directory / 'logs' / 'kwok.log')}")
            result = self.kubectl(
                "get",
                "nodes",
                "-o",
                "jsonpath={range .items[*]}{.status.conditions[?(@.type=='Ready')].status}{'\\n'}{end}",
                check=False,
            )
            ready = [line for line in result.stdout.splitlines() if line == "True"]
            if len(ready) >= state.nodes.count:
                return
            time.sleep(0.2)
        raise ClusterError(f"kwok nodes not Ready after {timeout:.0f}s:\n{tail(state.directory / 'logs' / 'kwok.log')}")

    def down(self, quiet: bool = False) -> None:
        """Stop every recorded process (last started first) and remove the state directory. Idempotent."""
        state = self.state()
        if (self.directory / SERVING_DIR).is_dir():
            # The pod runner and its processes first: they live under this directory, which is about to go.
            stop_runner(self.directory)
        if state is not None:
            for name, pid in reversed(list(state.pids.items())):
                stop_pid(name, pid, self.directory)
        if self.directory.exists():
            shutil.rmtree(self.directory)
        if not quiet:
            log(f"down: {self.directory} removed")

    def status(self) -> Iterator[str]:
        state = self.state()
        if state is None:
            yield f"down (no state in {self.directory})"
            return
        running = self.running()
        for name, is_running in running.items():
            yield f"{name:<24} pid {state.pids[name]:<8} {'running' if is_running else 'NOT RUNNING'}"
        healthy = all(running.values()) and self._readyz(state)
        yield f"apiserver {state.server}: {'ready' if healthy else 'NOT READY'}"
        yield f"kubeconfig {state.kubeconfig}"
        yield f"lws webhook https://{LOOPBACK}:{state.ports.lws_webhook} (LeaderWorkerSet {build.LWS.version})"
        if state.metrics:
            p = state.ports
            yield (
                f"metrics: prometheus http://{LOOPBACK}:{p.prometheus}, prometheus-adapter "
                f"https://{LOOPBACK}:{p.prometheus_adapter} ({metrics.API_GROUP} {' and '.join(metrics.API_VERSIONS)}; "
                f"custom metrics {', '.join(metrics.METRICS)})"
            )
        mode = "serving (readiness, restarts and deletion by the pod runner: python -m e2e.serving)"
        yield f"pod IPs {state.pod_cidr}, mode: {mode if state.serving else 'default (kwok marks pods Ready)'}"
        if healthy:
            nodes = self.kubectl("get", "nodes", "--no-headers", check=False).stdout.strip()
            yield from nodes.splitlines()


def fake_nodes(shape: NodeShape) -> list[dict[str, object]]:
    """Node objects for kwok: GPU and RDMA capacity, GPU product labels, spread over zones."""
    resources = {
        "cpu": shape.cpu,
        "memory": shape.memory,
        "pods": "110",
        "ephemeral-storage": "4Ti",  # an 8-GPU pod that downloads its weights requests 784Gi (render/sizing.py)
        GPU_RESOURCE: str(shape.gpus),
        RDMA_RESOURCE: str(shape.rdma_devices),
    }
    nodes: list[dict[str, object]] = []
    for index in range(shape.count):
        name = f"gpu-node-{index}"
        nodes.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "annotations": {KWOK_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
                    "labels": {
                        "kubernetes.io/hostname": name,
                        "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": "amd64",
                        "type": "kwok",
                        "topology.kubernetes.io/zone": ZONES[index % len(ZONES)],
                        "nvidia.com/gpu.present": "true",
                        "nvidia.com/gpu.product": shape.product(index),
                        "nvidia.com/gpu.count": str(shape.gpus),
                        "feature.node.kubernetes.io/rdma.available": "true",
                    },
                },
                "status": {"capacity": resources, "allocatable": resources},
            }
        )
        if shape.product(index) != shape.gpu_product:
            nodes[-1]["spec"] = {"taints": [{"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}]}
    return nodes
