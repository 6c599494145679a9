"""The same signals from a Prometheus HTTP API: the instant queries for one service, and their answers (pure).

Assumed labels (what the Prometheus Operator's PodMonitor and the usual `kubernetes_sd_configs` relabelling attach):
`namespace` (the pod's namespace) and `pod` (the pod's name). A service's pool pods are selected by name: its
Deployments `NAME-prefill-<revision>` and `NAME-decode-<revision>` (8 hex characters, `rollout`) name their pods
`NAME-prefill-<revision>-<replicaset hash>-<suffix>`, so the selector
`pod=~"NAME-(prefill|decode)-[0-9a-f]{8}(-[a-z0-9]+-[a-z0-9]+|-[0-9]+)"` takes them, of every revision, and no other
service's (a service named `NAME-decode` has pods `NAME-decode-decode-...`, one more dash). A multi-node pool's
LeaderWorkerSet `NAME-prefill-<revision>` names its group leaders `NAME-prefill-<revision>-<group>` (the second
branch) and its workers `NAME-prefill-<revision>-<group>-<worker>`, worker >= 1 (LeaderWorkerSet v0.9.0
pkg/controllers/pod_controller.go `constructWorkerStatefulSetApplyConfiguration`: a StatefulSet named after the leader
pod, ordinals from 1). The workers match the first branch, so a second matcher excludes them
(`pod!~"NAME-(prefill|decode)-<revision>-[0-9]+-[0-9]{1,4}"`): a worker node serves SGLang's dummy health server with
the metrics exporter of its own scheduler ranks (0.5.2 entrypoints/engine.py:805-820, utils.py:2069-2089
`launch_dummy_health_check_server`), and those ranks count every failed request too (see `samples`), so a tp16
server over two pods would count each failure sixteen times. The leader speaks for the server. The exclusion never
takes a Deployment's pod, whose name ends in exactly five random characters (Kubernetes apiserver
pkg/storage/names/generate.go, `randomLength = 5`; all digits now and then), while a worker index has at most four
digits in any group of fewer than 10000 nodes.

Counters are read with `increase(...[W])` and the accept-length gauge with `avg_over_time(...[W])` (idle time weighs
as much as busy time there, unlike the scrape source; the gauge only moves under traffic, so its value at idle is the
last busy interval's). The failure counters are counted by every TP rank of a server (`samples`), so each rank's
bootstrap plus transfer increase is taken and the largest per DP group of a pod, summed over the groups (`sum by (pod)
(max by (pod, dp_rank) (...))`: without DP attention there is one group, no `dp_rank` label), not every rank's sum.
The per-rank sum
is `B + T or B or T`: `increase()` drops the metric name, so a rank's two counters have one label set (one selector
for both names would be refused: "vector cannot contain metrics with the same labelset"), and a rank that has never
counted one of them does not export it (SGLang's multiprocess client has no series for a child never incremented).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from disaggspec import constants as c
from disaggspec.config import HealthSettings
from disaggspec.servinghealth import samples as s
from disaggspec.servinghealth.judge import PodWindow, Role

SIGNALS: Final = ("accept_length", "verify_calls", "generation_tokens", "requests", "failures")
"""One instant query each, per service."""

_POD_SUFFIX: Final = "-[0-9a-f]{8}(-[a-z0-9]+-[a-z0-9]+|-[0-9]+)"
_WORKER_SUFFIX: Final = "-[0-9a-f]{8}-[0-9]+-[0-9]{1,4}"
"""A LeaderWorkerSet worker pod: `<revision>-<group>-<worker>` (never a Deployment's pod: see the module docstring)."""


def _quote(value: str) -> str:
    """A PromQL string literal (Kubernetes names need no escaping; quotes and backslashes are escaped anyway)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def selector(namespace: str, service: str, roles: tuple[str, ...]) -> str:
    """The label matchers of one service's pods of `roles`."""
    prefix = f"{re.escape(service)}-({'|'.join(roles)})"
    return f"namespace={_quote(namespace)},pod=~{_quote(prefix + _POD_SUFFIX)},pod!~{_quote(prefix + _WORKER_SUFFIX)}"


@dataclass(frozen=True)
class Query:
    signal: str
    promql: str


def queries(namespace: str, service: str, settings: HealthSettings) -> list[Query]:
    """The instant queries for one service, each answering one number per pod."""
    window = f"[{int(settings.window_seconds)}s]"
    decode = selector(namespace, service, (c.ROLE_DECODE,))
    pools = selector(namespace, service, c.POOLS)
    bootstrap = f"increase({s.BOOTSTRAP_FAILED}{{{pools}}}{window})"
    transfer = f"increase({s.TRANSFER_FAILED}{{{pools}}}{window})"
    return [
        Query("accept_length", f"avg by (pod) (avg_over_time({s.ACCEPT_LENGTH}{{{decode}}}{window}))"),
        Query("verify_calls", f"sum by (pod) (increase({s.VERIFY_CALLS}{{{decode}}}{window}))"),
        Query("generation_tokens", f"sum by (pod) (increase({s.GENERATION_TOKENS}{{{decode}}}{window}))"),
        Query("requests", f"sum by (pod) (increase({s.REQUESTS}{{{pools}}}{window}))"),
        Query(
            "failures",
            f"sum by (pod) (max by (pod, dp_rank) ({bootstrap} + {transfer} or {bootstrap} or {transfer}))",
        ),
    ]


class BadAnswer(ValueError):
    """Prometheus answered something other than a successful instant vector."""


def per_pod(answer: Mapping[str, Any]) -> dict[str, float]:
    """pod -> value of one `/api/v1/query` answer (a vector `sum by (pod)` or `max by (pod)`)."""
    if answer.get("status") != "success":
        raise BadAnswer(f"{answer.get('errorType', 'error')}: {answer.get('error', 'no error text')}")
    data = answer.get("data") or {}
    if data.get("resultType") != "vector":
        raise BadAnswer(f"expected a vector, got {data.get('resultType')!r}")
    values: dict[str, float] = {}
    for item in data.get("result") or ():
        pod = (item.get("metric") or {}).get("pod")
        value = float(item.get("value", [0, "nan"])[1])
        if pod and value == value:  # NaN (e.g. avg over nothing) is no value
            values[str(pod)] = value
    return values


def _role(service: str, pod: str) -> Role | None:
    for role in c.POOLS:
        prefix = f"{re.escape(service)}-{role}"
        if re.fullmatch(prefix + _POD_SUFFIX, pod) and not re.fullmatch(prefix + _WORKER_SUFFIX, pod):
            return role
    return None


def windows(service: str, answers: Mapping[str, Mapping[str, float]]) -> list[PodWindow]:
    """Every pod that appears in any answer, as a window (verify steps estimated as in `judge.reduce` where the
    release has no verify counter)."""
    pods = sorted({pod for values in answers.values() for pod in values})
    result = []
    for pod in pods:
        role = _role(service, pod)
        if role is None:
            continue
        accept = answers.get("accept_length", {}).get(pod)
        if accept is not None and accept <= 0:
            accept = None
        verify = answers.get("verify_calls", {}).get(pod)
        if verify is None and accept is not None:
            verify = answers.get("generation_tokens", {}).get(pod, 0.0) / max(accept, 1.0)
        result.append(
            PodWindow(
                pod,
                role,
                accept if role == c.ROLE_DECODE else None,
                verify or 0.0,
                answers.get("requests", {}).get(pod, 0.0),
                answers.get("failures", {}).get(pod, 0.0),
            )
        )
    return result
