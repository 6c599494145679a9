"""Pinned versions of every binary the local control plane builds; changing one here rebuilds that component."""

KUBERNETES = "v1.37.2"
ETCD = "v3.6.16"
KWOK = "v0.8.0"
# helm v4 from its Go module: one toolchain (Go) builds every binary, and no wheel of a third party is trusted
# with a static binary whose provenance we cannot check.
HELM = "v4.3.2"
# promtool, to check and unit-test the chart's alert rules (`promtool test rules`). Prometheus 3.x is published on the
# module proxy as github.com/prometheus/prometheus v0.3XX.Y: v0.316.0 is Prometheus 3.16.0 (its VERSION file).
PROMETHEUS = "v0.316.0"
# The Prometheus server is built from the same module version (a component of its own, so promtool's cache entry stays
# valid), for the optional metrics pipeline of the local control plane (`up --metrics`).
# prometheus-adapter (sigs.k8s.io/prometheus-adapter, cmd/adapter) serves custom.metrics.k8s.io from Prometheus queries,
# for the HPA controller of the local control plane. Pinned explicitly: the module proxy refuses its version list.
PROMETHEUS_ADAPTER = "v0.12.0"
# The LeaderWorkerSet controller (sigs.k8s.io/lws), for the operator's multi-node pools: the newest version the module
# proxy serves. Its version list endpoint does not answer and v0.9.1 / v0.10.x are refused, so it is pinned explicitly.
LWS = "v0.9.0"
# k8s.io/kubernetes v1.37 declares `go 1.26.0` in its go.mod.
GO_MIN = "1.26"


def staging() -> str:
    """The k8s.io staging module release that matches KUBERNETES (v1.37.2 -> v0.37.2)."""
    _major, minor, patch = KUBERNETES.lstrip("v").split(".")
    return f"v0.{minor}.{patch}"
