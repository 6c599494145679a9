"""The PD router (`spec.router`: replicas, image, policy, port, Service type, resources, disruption budget and spread)
and how a change of the must-match settings rolls out as a new revision (`spec.rollout`: surge, unavailability,
lockstep skew and the progress deadline).
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import Field

from disaggspec.api.v1alpha1.base import _DNS_SUBDOMAIN, _MAX_NAME, _MAX_STR, SpecModel
from disaggspec.api.v1alpha1.podspec import ResourceRequirements
from disaggspec.api.v1alpha1.pools import DisruptionSpec, SpreadMode

RouterPolicy = Literal["random", "round_robin", "cache_aware", "power_of_two"]
ServiceType = Literal["ClusterIP", "NodePort", "LoadBalancer"]

DEFAULT_ROUTER_PORT: Final = 30000
"""The router's HTTP port (sglang-router's own default)."""
ROUTER_METRICS_PORT: Final = 29000
"""The router's Prometheus port (sglang-router's own default); its HTTP port must differ."""

# ---- router ------------------------------------------------------------------------------------------------------


class RouterSpec(SpecModel):
    """The PD router that pairs prefill and decode servers and serves the OpenAI API: the router package pinned for
    spec.sglang.version (sglang-router 0.1.9 for 0.5.2, smg 1.13.0 for 0.5.23)."""

    replicas: int = Field(default=1, ge=0, le=64, description="Number of router pods.")
    image: str | None = Field(
        default=None,
        max_length=_MAX_STR,
        description=(
            "Router image; defaults to the operator's routerImage setting, else the project's router image for "
            "spec.sglang.version (disaggspec/router:sglang-router-0.1.9 for 0.5.2, disaggspec/router:smg-1.13.0 "
            "for 0.5.23), which carries exactly the pinned router package and the readiness helper. An image "
            "reference like spec.sglang.image."
        ),
    )
    policy: RouterPolicy | None = Field(
        default=None,
        description=(
            "Load-balancing policy (--policy). Unset: cache_aware with smg (0.5.23), round_robin with sglang-router "
            "0.1.9 (0.5.2), whose cache_aware cannot select the workers it discovers."
        ),
    )
    port: int = Field(
        default=DEFAULT_ROUTER_PORT,
        ge=1,
        le=65535,
        description=f"HTTP port of the router and its Service; not {ROUTER_METRICS_PORT}, the router's metrics port.",
    )
    service_type: ServiceType = Field(default="ClusterIP", description="Type of the router's Service.")
    resources: ResourceRequirements = Field(
        default_factory=ResourceRequirements,
        description="Resources of the router container. Unset requests default to cpu 1 and memory 1Gi (a router "
        "proxies every request and, with cache_aware, keeps a prefix tree per worker); each key given here wins.",
    )
    disruption: DisruptionSpec = Field(
        default_factory=DisruptionSpec, description="The PodDisruptionBudget of the router."
    )
    priority_class_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=_MAX_NAME,
        pattern=_DNS_SUBDOMAIN,
        description="PriorityClass of the router pods (a DNS subdomain); unset uses the cluster's default priority.",
    )
    spread: SpreadMode = Field(
        default="Preferred",
        description="How router replicas spread over nodes: Preferred, Required or Off, as spec.<pool>.spread.",
    )


# ---- rollout -----------------------------------------------------------------------------------------------------


class RolloutSpec(SpecModel):
    """How a change of the spec fingerprint (image, model or draft revision, speculative settings, engine, transfer)
    rolls out: the new settings run as a new revision (its own prefill, decode and router Deployments) next to the
    old one, which keeps serving until the new one has replaced its capacity (README, Changing a running service).
    maxSurge and maxUnavailable also shape an ordinary rolling update within one revision."""

    max_surge: int = Field(
        default=1,
        ge=0,
        le=1024,
        description="Pods of each pool the rollout may run above its replicas while the old revision serves: each "
        "one needs a free slot for a whole pool pod (its GPUs). 0: a new pod starts only where an old one was "
        "removed, which needs maxUnavailable of at least 1; and a pool of 1 replica then has no slot for the new "
        "revision's pod while the old revision serves (it keeps one pod of each pool for its pair), so the rollout "
        "holds at once (Progressing=False, reason RolloutHeld) unless maxUnavailable is at least the other pool's "
        "replicas (the service then stops serving while the pair is replaced).",
    )
    max_unavailable: int = Field(
        default=0,
        ge=0,
        le=1024,
        description="How far the ready pods of each pool (both revisions together) may fall below its replicas "
        "during a rollout. 0 (the default): an old pod is removed only once a new one is ready and serving, so the "
        "service never loses capacity; a rollout without a free slot for a surge pod then holds (Progressing=False, "
        "reason RolloutHeld) instead of emptying the pool. 1 with maxSurge 0 replaces pods in place, one at a time.",
    )
    max_skew: float = Field(
        default=0.25,
        ge=0,
        le=1,
        description="Lockstep of the new revision's two pools: neither may run ahead of the other by more than this "
        "fraction of its replicas (ready new prefill / prefill replicas against ready new decode / decode "
        "replicas), so the new revision grows as matched pairs. Each pool may always have one pod, and a pool not "
        "ahead of the other may always ask for one pod beyond its ready ones: with 0 the pools grow in step, the one "
        "behind (both, when level) one pod at a time. A pool is not held back by the other while the other has every "
        "pod maxSurge leaves it, all ready (it grows again only as the old revision shrinks, which this pool's ready "
        "pods allow).",
    )
    progress_deadline_seconds: int | None = Field(
        default=None,
        ge=30,
        le=86400,
        description="How long the new revision may wait for pods it asked for without another one becoming ready "
        "before the rollout holds: Progressing=False with reason RolloutHeld and a RolloutHeld Event, the old revision "
        "keeps serving, nothing more is scaled until a pod becomes ready or the spec changes. Only waiting counts: a "
        "pass that finds every pod it asked for ready starts the count again. Unset: the larger pool's start-up budget "
        "plus its drain budget and 600 s (spec.<pool>.lifecycle), as for the Deployments.",
    )
