"""The status vocabulary: every condition reason and Event reason the operator writes, each with what it means.

`status.py` and `reconcile.py` use these constants and never a literal, so this module is the whole list; the
conditions reference (`docs/reference/conditions.md`) is generated from it, as gateway-api documents its conditions.
Condition types themselves are in `constants.py` (`CONDITION_*`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from disaggspec import constants as c


@dataclass(frozen=True)
class ConditionReason:
    """One (condition type, status, reason) the operator sets, and what a user should read into it."""

    condition: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    meaning: str


@dataclass(frozen=True)
class EventReason:
    """One Event reason the operator emits on a DisaggSpecService."""

    reason: str
    type: Literal["Normal", "Warning"]
    meaning: str


# ---- Ready ---------------------------------------------------------------------------------------------------------
READY_ALL_REPLICAS: Final = ConditionReason(
    c.CONDITION_READY, "True", "AllReplicasReady", "Prefill, decode and router have every replica updated and ready."
)
READY_ROLLOUT_IN_PROGRESS: Final = ConditionReason(
    c.CONDITION_READY,
    "False",
    "RolloutInProgress",
    "Some replicas are not updated or ready yet; the message names the pools.",
)
READY_INVALID_SPEC: Final = ConditionReason(
    c.CONDITION_READY,
    "False",
    "InvalidSpec",
    "The spec breaks a rule; see SpecConfigConsistent. Children are left as they were.",
)
READY_APPLY_FAILED: Final = ConditionReason(
    c.CONDITION_READY,
    "False",
    "ApplyFailed",
    "Every replica is ready, but the last apply of a child failed; see Degraded.",
)
READY_CHILD_REFUSED: Final = ConditionReason(
    c.CONDITION_READY,
    "False",
    "ChildRefused",
    "The API server refuses a child of the current spec, so the spec is not applied; see Degraded.",
)
READY_API_MISSING: Final = ConditionReason(
    c.CONDITION_READY,
    "False",
    "ApiMissing",
    "The spec needs an API the cluster does not serve (a multi-node pool needs LeaderWorkerSet); nothing of the "
    "spec is applied; see Degraded.",
)
READY_RENDER_FAILED: Final = ConditionReason(
    c.CONDITION_READY,
    "False",
    "RenderFailed",
    "The operator could not render the children; see SpecConfigConsistent. Children are left as they were.",
)
READY_NAMESPACE_DENIED: Final = ConditionReason(
    c.CONDITION_READY,
    "False",
    "NamespaceDenied",
    "The service's namespace is in the operator's denied namespaces (chart value `deniedNamespaces`): the operator "
    "creates no children there. Move the service to another namespace, or change the chart value.",
)

# ---- SpecConfigConsistent ------------------------------------------------------------------------------------------
CONSISTENT_ALL_RULES_PASSED: Final = ConditionReason(
    c.CONDITION_SPEC_CONSISTENT, "True", "AllRulesPassed", "Prefill and decode agree: the spec passed the rule table."
)
CONSISTENT_RULE_VIOLATED: Final = ConditionReason(
    c.CONDITION_SPEC_CONSISTENT,
    "False",
    "RuleViolated",
    "The spec breaks one or more rules; the message lists each as `[rule-id] field: message` with the fix.",
)
CONSISTENT_RENDER_FAILED: Final = ConditionReason(
    c.CONDITION_SPEC_CONSISTENT,
    "False",
    "RenderFailed",
    "Rendering the children (or validating the spec) raised an error: a bug in the operator; the message has the "
    "error, please report it. No child is changed; the operator keeps running and tries again on the next change or "
    "resync, not in a hot loop.",
)

# ---- Progressing ---------------------------------------------------------------------------------------------------
PROGRESSING_ROLLING_OUT: Final = ConditionReason(
    c.CONDITION_PROGRESSING,
    "True",
    "RollingOut",
    "Children were applied and a pool or the router is still rolling out.",
)
PROGRESSING_ROLLOUT_COMPLETE: Final = ConditionReason(
    c.CONDITION_PROGRESSING, "False", "RolloutComplete", "Every replica runs the latest template."
)
PROGRESSING_ROLLOUT_HELD: Final = ConditionReason(
    c.CONDITION_PROGRESSING,
    "False",
    "RolloutHeld",
    "The new revision waited spec.rollout.progressDeadlineSeconds for pods it asked for without another becoming "
    "ready, or (at once) spec.rollout allows it no further step: no pod of it can start within maxSurge and no older "
    "pod can go within maxUnavailable. It grows no further and the older revision keeps serving. The message says "
    "what is ready and what to do: check the new pods, free GPUs for a surge pod (or allow maxUnavailable 1), allow "
    "a larger maxSurge or maxUnavailable, fix the spec, or apply the previous spec.",
)
PROGRESSING_INVALID_SPEC: Final = ConditionReason(
    c.CONDITION_PROGRESSING, "False", "InvalidSpec", "Nothing rolls out while the spec is rejected."
)
PROGRESSING_CHILD_REFUSED: Final = ConditionReason(
    c.CONDITION_PROGRESSING, "False", "ChildRefused", "Nothing rolls out while a child is refused; see Degraded."
)
PROGRESSING_API_MISSING: Final = ConditionReason(
    c.CONDITION_PROGRESSING, "False", "ApiMissing", "Nothing rolls out while a needed API is missing; see Degraded."
)
PROGRESSING_RENDER_FAILED: Final = ConditionReason(
    c.CONDITION_PROGRESSING, "False", "RenderFailed", "Nothing rolls out while rendering fails."
)
PROGRESSING_NAMESPACE_DENIED: Final = ConditionReason(
    c.CONDITION_PROGRESSING, "False", "NamespaceDenied", "Nothing rolls out in a denied namespace; see Ready."
)

# ---- Degraded ------------------------------------------------------------------------------------------------------
DEGRADED_APPLY_FAILED: Final = ConditionReason(
    c.CONDITION_DEGRADED, "True", "ApplyFailed", "The API server refused a child write; the message says which and why."
)
DEGRADED_CHILD_REFUSED: Final = ConditionReason(
    c.CONDITION_DEGRADED,
    "True",
    "ChildRefused",
    "The API server would refuse a child (found by a server-side dry-run before any write, or when a write was "
    "refused, e.g. by a ResourceQuota): nothing of the pass is applied, the children the pass had created are "
    "deleted again. The message names each child, what is wrong and, where it is clear, the spec field it comes "
    "from. Retried with backoff (up to a minute), so it clears by itself once the namespace allows the child. With "
    "the webhook up, such a spec is refused at admission with the same message.",
)
DEGRADED_API_MISSING: Final = ConditionReason(
    c.CONDITION_DEGRADED,
    "True",
    "ApiMissing",
    "A pool with spec.<pool>.nodesPerInstance > 1 is a LeaderWorkerSet (leaderworkerset.x-k8s.io/v1), and the "
    "cluster does not serve that API: install the LeaderWorkerSet controller (" + c.LWS_MIN_VERSION + " or newer; "
    "charts/disaggspec-operator/README.md) or set nodesPerInstance to 1. Nothing of the spec is applied (the "
    "children of the previous spec keep running); the operator looks for the API again every 30 s and applies the "
    "spec once it is there.",
)
DEGRADED_ROLLOUT_STUCK: Final = ConditionReason(
    c.CONDITION_DEGRADED,
    "True",
    "RolloutStuck",
    "A Deployment exceeded its progress deadline or reports a replica failure; the message names the pool.",
)
DEGRADED_AS_EXPECTED: Final = ConditionReason(c.CONDITION_DEGRADED, "False", "AsExpected", "No failure is known.")

# ---- SpecDecodeHealthy and TransferHealthy (runtime health, measured off the reconcile path) -------------------------
# Both judge the pods running now, whatever generation they were rendered from; observedGeneration is the generation
# of the pass that wrote them. See docs/operator.md, "Runtime health".
SPEC_DECODE_ACCEPTING: Final = ConditionReason(
    c.CONDITION_SPEC_DECODE_HEALTHY,
    "True",
    "AcceptLengthNormal",
    "The decode pods' mean accept length (`sglang:spec_accept_length`, weighted by verify steps) over the health "
    "window is at or above the floor and, normalised by the draft tokens ((L - 1) / (numDraftTokens - 1), SGLang "
    "0.5.23's `sglang:spec_accept_rate`), no more than the drop threshold (25%) below the expected value "
    "(spec.speculative.expectedAcceptLength, else the baseline learned from the service's healthy traffic, "
    "status.specDecode); the message has the mean, each pod's, the expectation and the drop.",
)
SPEC_DECODE_LEARNING: Final = ConditionReason(
    c.CONDITION_SPEC_DECODE_HEALTHY,
    "True",
    "LearningBaseline",
    "The decode pods' mean accept length is at or above the floor, and there is nothing yet to judge a drop against: "
    "spec.speculative.expectedAcceptLength is unset and the baseline learned from the service's healthy traffic "
    "holds too few verify steps (`DISAGGSPEC_HEALTH_BASELINE_MIN_VERIFY_STEPS`); the message says how far it is. A "
    "draft broken from the first request would be learned as normal: set expectedAcceptLength to catch that.",
)
SPEC_DECODE_LOW_ACCEPT: Final = ConditionReason(
    c.CONDITION_SPEC_DECODE_HEALTHY,
    "False",
    "LowAcceptLength",
    "Under traffic, the decode pods' mean accept length over the window is below the floor "
    "(`DISAGGSPEC_HEALTH_MIN_ACCEPT_LENGTH`, 1.1; 1.0: no draft token is accepted), or its normalised accept rate "
    "dropped more than `DISAGGSPEC_HEALTH_ACCEPT_DROP` (25%) below the expected one: a draft model that does not "
    "match the target, a broken draft-state transfer (the seed's mock top-k: DeepSeek NEXTN 1.565 -> 1.362, 36%). "
    "It turns True again only once the drop is within `DISAGGSPEC_HEALTH_ACCEPT_RECOVER` (15%). The message names "
    "each decode pod with its accept length and verify steps, the expectation and the drop.",
)
SPEC_DECODE_NO_TRAFFIC: Final = ConditionReason(
    c.CONDITION_SPEC_DECODE_HEALTHY,
    "Unknown",
    "NoTraffic",
    "Too few verify steps on the decode pods in the window to judge (operator setting "
    "`DISAGGSPEC_HEALTH_MIN_VERIFY_STEPS`).",
)
SPEC_DECODE_NO_METRICS: Final = ConditionReason(
    c.CONDITION_SPEC_DECODE_HEALTHY,
    "Unknown",
    "NoMetrics",
    "No ready decode pod answered `/metrics` (or the Prometheus query failed); the message names the pods or the "
    "error.",
)
SPEC_DECODE_NOT_MEASURED: Final = ConditionReason(
    c.CONDITION_SPEC_DECODE_HEALTHY,
    "Unknown",
    "NotMeasured",
    "No measurement yet (the first one comes within `DISAGGSPEC_HEALTH_INTERVAL_SECONDS` of the leader starting), "
    "or measurement is off (`DISAGGSPEC_HEALTH_SOURCE=off`). A restarted or newly elected operator keeps the "
    "condition status already holds until its own measurement differs.",
)
TRANSFER_OK: Final = ConditionReason(
    c.CONDITION_TRANSFER_HEALTHY,
    "True",
    "NoTransferFailures",
    "Requests were served in the window and bootstrap plus transfer failures stay at or below the threshold.",
)
TRANSFER_FAILING: Final = ConditionReason(
    c.CONDITION_TRANSFER_HEALTHY,
    "False",
    "TransferFailures",
    "Bootstrap plus transfer failures (`sglang:num_bootstrap_failed_reqs_total`, "
    "`sglang:num_transfer_failed_reqs_total`) per second over the window exceed the threshold; the message names "
    "each pod with its count. Whether RDMA or TCP carries the transfer is not judged: no supported SGLang release "
    "exposes it (docs/operator.md).",
)
TRANSFER_NO_TRAFFIC: Final = ConditionReason(
    c.CONDITION_TRANSFER_HEALTHY, "Unknown", "NoTraffic", "No request and no failure in the window."
)
TRANSFER_NO_METRICS: Final = ConditionReason(
    c.CONDITION_TRANSFER_HEALTHY,
    "Unknown",
    "NoMetrics",
    "No ready pool pod answered `/metrics` (or the Prometheus query failed); the message names the pods or the error.",
)
TRANSFER_NOT_MEASURED: Final = ConditionReason(
    c.CONDITION_TRANSFER_HEALTHY,
    "Unknown",
    "NotMeasured",
    "No measurement yet, or measurement is off (`DISAGGSPEC_HEALTH_SOURCE=off`); a restarted or newly elected "
    "operator keeps the condition status already holds until its own measurement differs.",
)

# ---- ModelCached (only with spec.model.cache; absent otherwise) ---------------------------------------------------
# Computed from the fill Job alone (status.model_cached). Absent without a model cache rather than Unknown: there is
# nothing to wait for, and kubectl wait --for=condition=ModelCached has no meaning then. Absent too in a pass whose
# spec did not render (rejected, denied namespace): the Job it would name says nothing about what runs.
MODEL_CACHED_FILLED: Final = ConditionReason(
    c.CONDITION_MODEL_CACHED,
    "True",
    "Filled",
    "The fill Job of the current model, draft and tokenizer revisions completed: the cache holds them and the pool "
    "pods' init containers let the servers start.",
)
MODEL_CACHED_FILLING: Final = ConditionReason(
    c.CONDITION_MODEL_CACHED,
    "False",
    "Filling",
    "The fill Job is running (or not created yet); the pool pods wait in their init container. While it runs, a "
    "pool's exceeded progress deadline is not reported as RolloutStuck: the wait is expected.",
)
MODEL_CACHED_FILL_FAILED: Final = ConditionReason(
    c.CONDITION_MODEL_CACHED,
    "False",
    "FillFailed",
    "The fill Job failed (backoff limit reached); the message has the Job's reason and message. Look at the Job's "
    "pod logs (a wrong repo id or revision, a missing or unauthorised HF token, a full volume); delete the Job to "
    "retry: the operator creates it again.",
)
MODEL_CACHED_NODE_LOCAL: Final = ConditionReason(
    c.CONDITION_MODEL_CACHED,
    "Unknown",
    "NodeLocal",
    "The cache is a hostPath: each pool pod fills its own node's directory in its init container (fill-model-cache), "
    "so there is no single fill to report; a pod still filling is not ready yet.",
)

CONDITION_REASONS: Final[tuple[ConditionReason, ...]] = (
    READY_ALL_REPLICAS,
    READY_ROLLOUT_IN_PROGRESS,
    READY_INVALID_SPEC,
    READY_APPLY_FAILED,
    READY_CHILD_REFUSED,
    READY_API_MISSING,
    READY_RENDER_FAILED,
    READY_NAMESPACE_DENIED,
    CONSISTENT_ALL_RULES_PASSED,
    CONSISTENT_RULE_VIOLATED,
    CONSISTENT_RENDER_FAILED,
    PROGRESSING_ROLLING_OUT,
    PROGRESSING_ROLLOUT_COMPLETE,
    PROGRESSING_ROLLOUT_HELD,
    PROGRESSING_INVALID_SPEC,
    PROGRESSING_CHILD_REFUSED,
    PROGRESSING_API_MISSING,
    PROGRESSING_RENDER_FAILED,
    PROGRESSING_NAMESPACE_DENIED,
    DEGRADED_APPLY_FAILED,
    DEGRADED_CHILD_REFUSED,
    DEGRADED_API_MISSING,
    DEGRADED_ROLLOUT_STUCK,
    DEGRADED_AS_EXPECTED,
    SPEC_DECODE_ACCEPTING,
    SPEC_DECODE_LEARNING,
    SPEC_DECODE_LOW_ACCEPT,
    SPEC_DECODE_NO_TRAFFIC,
    SPEC_DECODE_NO_METRICS,
    SPEC_DECODE_NOT_MEASURED,
    TRANSFER_OK,
    TRANSFER_FAILING,
    TRANSFER_NO_TRAFFIC,
    TRANSFER_NO_METRICS,
    TRANSFER_NOT_MEASURED,
    MODEL_CACHED_FILLED,
    MODEL_CACHED_FILLING,
    MODEL_CACHED_FILL_FAILED,
    MODEL_CACHED_NODE_LOCAL,
)
"""Every condition reason, in the order the conditions reference lists them."""

# ---- Events --------------------------------------------------------------------------------------------------------
EVENT_SPEC_REJECTED: Final = EventReason(
    "SpecRejected", "Warning", "Reconcile found rule violations (once per distinct message); no child was changed."
)
EVENT_CHILDREN_APPLIED: Final = EventReason(
    "ChildrenApplied", "Normal", "Children were created, updated or pruned; the message lists them."
)
EVENT_FOREIGN_EDIT_REVERTED: Final = EventReason(
    "ForeignEditReverted",
    "Warning",
    "A child's merged form was invalid because of fields another field manager set (a hand edit of a port, a "
    "one-of field): those fields were removed and the operator's form applied again; the message names the child, "
    "each field and its field manager.",
)
EVENT_READY: Final = EventReason("Ready", "Normal", "The service became Ready.")
EVENT_APPLY_FAILED: Final = EventReason(
    DEGRADED_APPLY_FAILED.reason, "Warning", "Degraded turned True because a child write failed (once per message)."
)
EVENT_CHILD_REFUSED: Final = EventReason(
    DEGRADED_CHILD_REFUSED.reason,
    "Warning",
    "Degraded turned True because the API server refuses a child; nothing was applied (once per message).",
)
EVENT_API_MISSING: Final = EventReason(
    DEGRADED_API_MISSING.reason,
    "Warning",
    "Degraded turned True because the spec needs an API the cluster does not serve (LeaderWorkerSet).",
)
EVENT_RENDER_FAILED: Final = EventReason(
    CONSISTENT_RENDER_FAILED.reason,
    "Warning",
    "Rendering the children failed: a bug in the operator (once per message); no child was changed.",
)
EVENT_ROLLOUT_STUCK: Final = EventReason(
    DEGRADED_ROLLOUT_STUCK.reason, "Warning", "Degraded turned True because a rollout is stuck (once per message)."
)
EVENT_ROLLOUT_HELD: Final = EventReason(
    PROGRESSING_ROLLOUT_HELD.reason,
    "Warning",
    "Progressing turned RolloutHeld: the new revision stopped making progress; the old one keeps serving.",
)
EVENT_REVISION_CREATED: Final = EventReason(
    "RevisionCreated",
    "Normal",
    "A change of the must-match settings started a new revision next to the one serving (names both).",
)
EVENT_REVISION_RETIRED: Final = EventReason(
    "RevisionRetired", "Normal", "An older revision was drained and removed (the message names it)."
)
EVENT_TRAFFIC_SHIFTED: Final = EventReason(
    "TrafficShifted",
    "Normal",
    "During a rollout the split of the requests between revisions changed: the message gives each revision's "
    "share, its router pods of those taking requests, and the capacity share its routers were sized by.",
)
EVENT_NAMESPACE_DENIED: Final = EventReason(
    READY_NAMESPACE_DENIED.reason,
    "Warning",
    "The service is in a denied namespace (chart value `deniedNamespaces`); no child is created (once, when Ready "
    "turns NamespaceDenied).",
)

EVENT_LOW_ACCEPT_LENGTH: Final = EventReason(
    SPEC_DECODE_LOW_ACCEPT.reason, "Warning", "SpecDecodeHealthy turned False (the message names the decode pods)."
)
EVENT_ACCEPT_LENGTH_RECOVERED: Final = EventReason(
    "AcceptLengthRecovered", "Normal", "SpecDecodeHealthy turned True again after being False."
)
EVENT_TRANSFER_FAILURES: Final = EventReason(
    TRANSFER_FAILING.reason, "Warning", "TransferHealthy turned False (the message names the pods and counts)."
)
EVENT_TRANSFER_RECOVERED: Final = EventReason(
    "TransferRecovered", "Normal", "TransferHealthy turned True again after being False."
)

EVENT_MODEL_CACHE_FILLED: Final = EventReason(
    "ModelCacheFilled", "Normal", "ModelCached turned True: the fill Job completed."
)
EVENT_MODEL_CACHE_FILL_FAILED: Final = EventReason(
    "ModelCacheFillFailed", "Warning", "ModelCached turned False with FillFailed (once per message)."
)

EVENT_POOL_SCALED: Final = EventReason(
    "PoolScaled",
    "Normal",
    "The planner (spec.autoscaling.mode Planner) set a pool's size; the message names the inputs that drove it.",
)

EVENT_REASONS: Final[tuple[EventReason, ...]] = (
    EVENT_SPEC_REJECTED,
    EVENT_CHILDREN_APPLIED,
    EVENT_FOREIGN_EDIT_REVERTED,
    EVENT_READY,
    EVENT_APPLY_FAILED,
    EVENT_CHILD_REFUSED,
    EVENT_API_MISSING,
    EVENT_RENDER_FAILED,
    EVENT_ROLLOUT_STUCK,
    EVENT_ROLLOUT_HELD,
    EVENT_REVISION_CREATED,
    EVENT_REVISION_RETIRED,
    EVENT_TRAFFIC_SHIFTED,
    EVENT_NAMESPACE_DENIED,
    EVENT_LOW_ACCEPT_LENGTH,
    EVENT_ACCEPT_LENGTH_RECOVERED,
    EVENT_TRANSFER_FAILURES,
    EVENT_TRANSFER_RECOVERED,
    EVENT_MODEL_CACHE_FILLED,
    EVENT_MODEL_CACHE_FILL_FAILED,
    EVENT_POOL_SCALED,
)
"""Every Event reason; Events are emitted only after the status write and only on transitions."""
