"""The SLA planner's decision: both pools' replicas from one window of their servers' metrics (pure; `now` is given).

Prefill is sized for its prompt tokens: demand D (tokens/s arriving: served, from `prompt_tokens`, plus the growth of
the requests not finished there, waiting, bootstrapping or transferring, x the mean prompt P; `signals.unfinished`), one
server's rate mu (learned, `capacity`), and a utilisation target from the TTFT target T: each prefill server is its own
queue (the router sends each request to one), and an M/M/1 queue's mean time in system is S / (1 - rho) for a service
time S (Kleinrock, Queueing Systems I, 3.2); with S = P / mu, TTFT <= T needs rho <= 1 - S / T. M/M/1 is the
conservative choice: a deterministic prefill time (M/D/1) halves the wait, and the margin covers the KV transfer and the
first decode step, which TTFT also holds. rho is clamped to [utilisation_min, utilisation_max]; prefill =
ceil((D + (Q x P + B) / H) / (mu x rho)), where Q x P is the waiting queue's tokens and
B = max(D - ready x mu, 0) x lead_seconds the tokens that queue before the servers asked now are up, both to clear over
H = max(lead_seconds, persist_seconds). Decode is sized for its requests N (running, waiting, in the PD queues) over
what one server holds at the ITL target and within its KV pool (`capacity`): decode = ceil(N / (n x decode_headroom));
while prefill is about to hand over `handover_gate` x the requests per second it passes on now, N is at least that rate
x the time a request takes at n x decode_headroom per server (its learned output length x the step time there / the
accept length; Little's law), so decode grows with a burst in the same decision as prefill instead of once prefill lets
the burst through. Scale-up uses the demand `lead_seconds` ahead: now is the mean of the last `recent_seconds`, or of
the last `surge_seconds` when they stand above the rounds before them by more than the rounds' noise
(`signals.SURGE_ERRORS` standard errors), and ahead is where the trend line of those points leads, its slope less
`signals.FORECAST_ERRORS` standard errors (never below now, `signals.demand`): the stabilization keeps the highest need
of its window, so the planner acts on no step or trend its noise could make; scale-down takes the highest recommendation
of the last `stabilization_seconds` (for prefill, once the queue it was clearing has cleared, `pools.backlog_cleared`,
the servers for its arrivals alone, `Proposal.standing`: a backlog's servers do not wait out the window), only once the
planner has watched that long, never during a rollout, and removes at most half a pool per decision. Before a prefill
rate is learned it is inferred from the queue the servers keep (an M/D/1 queue's length gives their utilisation,
`pools._inferred_rate`). Before a capacity is learned or inferred only saturation moves a pool: a waiting queue that
persisted adds servers (one, or in proportion to the queue's growth over the served rate), no traffic at all lets it
fall to its minimum; otherwise it holds. Whatever the model says, a persisting queue never leaves a pool as it is once
all its servers are up. Then [min, max] per pool, then the prefill/decode band, by raising the smaller pool within its
max.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from disaggspec.autoscale import pools
from disaggspec.autoscale import signals as sig
from disaggspec.autoscale.contract import (
    Decision,
    PlannerSettings,
    PlannerState,
    PoolDecision,
    PoolLimits,
    PoolWindow,
    ServiceWindow,
)

__all__ = [
    "Decision",
    "PlannerSettings",
    "PlannerState",
    "PoolDecision",
    "PoolLimits",
    "PoolWindow",
    "ServiceWindow",
    "decide",
]


def _settle(
    settings: PlannerSettings,
    limits: PoolLimits,
    current: int,
    recommended: int,
    earlier: Sequence[int],
    watched: float,
    rolling_out: bool,
) -> tuple[int, str]:
    """The replicas to ask for, and a note on what held or limited them ("" when the recommendation stands)."""
    if current > limits.max_replicas:
        return limits.max_replicas, f"maxReplicas {limits.max_replicas}"
    if recommended >= current:
        clamped = " (maxReplicas)" if recommended == limits.max_replicas and recommended > current else ""
        return recommended, clamped
    if rolling_out:
        return current, f"scale-down to {recommended} held: a rollout is under way"
    if watched < settings.stabilization_seconds:
        return current, (
            f"scale-down to {recommended} waits for {settings.stabilization_seconds:.0f} s of lower recommendations "
            f"({watched:.0f} s watched)"
        )
    stabilized = max([recommended, *earlier])
    if stabilized >= current:
        return current, (
            f"scale-down to {recommended} waits: {stabilized} recommended within the last "
            f"{settings.stabilization_seconds:.0f} s"
        )
    gentle = max(stabilized, math.ceil(current / 2))
    return gentle, (f"at most half the pool per decision (recommended {stabilized})" if gentle > stabilized else "")


def _band(settings: PlannerSettings, prefill: int, decode: int) -> tuple[int, int, str, str]:
    """Both pools within the prefill/decode ratio band, by raising the smaller one within its maxReplicas."""
    p_note = d_note = ""
    if settings.ratio_min is not None and prefill < settings.ratio_min * decode:
        raised = min(settings.prefill.max_replicas, pools.ceil(settings.ratio_min * decode))
        if raised > prefill:
            prefill, p_note = raised, f"raised to {raised} for prefill/decode >= {settings.ratio_min:g}"
    if settings.ratio_max is not None and settings.ratio_max > 0 and prefill > settings.ratio_max * decode:
        raised = min(settings.decode.max_replicas, pools.ceil(prefill / settings.ratio_max))
        if raised > decode:
            decode, d_note = raised, f"raised to {raised} for prefill/decode <= {settings.ratio_max:g}"
    return prefill, decode, p_note, d_note


def _continued(settings: PlannerSettings, state: PlannerState, window: ServiceWindow, now: float) -> PlannerState:
    """The state this decision starts from: a new fingerprint forgets the capacities; a clock that went back or a
    gap longer than the stabilization window (another process, or the planner was not called) restarts the watch,
    so a scale-down after a restart or a failover waits a whole stabilization window again."""
    if window.fingerprint is not None and window.fingerprint != state.fingerprint:
        state = replace(
            PlannerState(),
            fingerprint=window.fingerprint,
            clock=state.clock,
            watching_since=state.watching_since,
            history=state.history,
        )
    gap = max(settings.stabilization_seconds, 60.0)
    if state.clock is None or state.watching_since is None or now < state.clock or now - state.clock > gap:
        state = replace(state, watching_since=now, learned_until=None, history=())
    return state


def decide(
    settings: PlannerSettings, state: PlannerState, window: ServiceWindow, now: float
) -> tuple[Decision, PlannerState]:
    """Both pools' replicas for this window, and the state to keep for the next one."""
    state = _continued(settings, state, window, now)
    prefill, state = pools.prefill(settings, state, window.prefill, now)
    coming = prefill.inputs.get("handover_requests_per_second")
    passing = prefill.inputs.get("served_requests_per_second", 0.0)
    handover = None if coming is None else pools.Handover(coming, passing)
    decode, state = pools.decode(settings, state, window.decode, now, handover)
    prefill = pools.queue_guard(settings, window.prefill, prefill)
    decode = pools.queue_guard(settings, window.decode, decode)
    recommended = (settings.prefill.clamp(prefill.need), settings.decode.clamp(decode.need))
    horizon = now - settings.stabilization_seconds
    history = tuple(entry for entry in state.history if entry[0] >= horizon)
    watched = now - (state.watching_since if state.watching_since is not None else now)
    # Once the queue prefill was clearing has cleared, the window holds its arrivals' servers, not the backlog's: on
    # the DeepSeek day at 77e7775 a 3x burst's backlog asked for 13-14 prefill servers, all held until 116 s, 32
    # emulated s after the burst, when its arrivals needed 4-5.
    cleared = pools.backlog_cleared(settings, window.prefill, prefill)
    p_earlier = [standing if cleared else p for _, p, _, standing in history]
    p_settled = _settle(
        settings, settings.prefill, window.prefill.replicas, recommended[0], p_earlier, watched, window.rolling_out
    )
    if (
        cleared
        and p_settled[0] < window.prefill.replicas
        and max(p_earlier, default=0) < max((p for _, p, _, _ in history), default=0)
    ):
        p_settled = (p_settled[0], "; ".join(filter(None, [p_settled[1], "the queue it was clearing has cleared"])))
    d_settled = _settle(
        settings,
        settings.decode,
        window.decode.replicas,
        recommended[1],
        [d for _, _, d, _ in history],
        watched,
        window.rolling_out,
    )
    settled = (p_settled, d_settled)
    p, d, p_band, d_band = _band(settings, settled[0][0], settled[1][0])
    decisions = []
    for role, pool, proposal, desired, notes in (
        ("prefill", window.prefill, prefill, p, (settled[0][1], p_band)),
        ("decode", window.decode, decode, d, (settled[1][1], d_band)),
    ):
        reason = "; ".join([proposal.reason, *(note for note in notes if note)])
        decisions.append(PoolDecision(role, pool.replicas, desired, reason, dict(proposal.inputs)))
    ends = [sig.span(pool.series) for pool in (window.prefill, window.decode)]
    seen = max((span[1] for span in ends if span is not None), default=state.learned_until)
    standing = settings.prefill.clamp(prefill.need if prefill.standing is None else prefill.standing)
    entry = (now, recommended[0], recommended[1], standing)
    state = replace(state, clock=now, learned_until=seen, history=(*history, entry))
    ordered = sorted(decisions, key=lambda pool: pool.desired == pool.current)
    message = ". ".join(
        f"{pool.role} {pool.current} -> {pool.desired}: {pool.reason}"
        if pool.desired != pool.current
        else f"{pool.role} {pool.current}: {pool.reason}"
        for pool in ordered
    )
    return Decision(decisions[0], decisions[1], message), state
