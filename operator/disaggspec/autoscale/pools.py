"""What the model asks of each pool before limits and stabilization (pure): `prefill` and `decode` proposals.

See `planner` for the model; `signals` and `capacity` for where each number comes from.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace

from disaggspec.autoscale import capacity as cap
from disaggspec.autoscale import signals as sig
from disaggspec.autoscale.contract import PlannerSettings, PlannerState, PoolWindow, Series


@dataclass(frozen=True)
class Proposal:
    """What the model asks of one pool before limits and stabilization."""

    need: int
    reason: str
    inputs: dict[str, float] = field(default_factory=dict)
    standing: int | None = None
    """The servers for the arrivals alone, without the queues `need` also clears (None: `need`): what the
    stabilization window remembers, so a backlog's servers go once it has cleared."""


def ceil(value: float) -> int:
    return math.ceil(value - 1e-9)


def fmt(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _queue_per_server(series: Series) -> list[sig.Point]:
    """The waiting queue per server of each round since the pool last changed size: a queue that built up before the
    servers a scale-up added were ready says nothing about whether they suffice (counting it added one server per
    round while the old queue drained: measured on the capacity emulator, prefill 4 -> 7 where 4 sufficed)."""
    pods = sig.gauge_points(series, lambda _, __: 1.0)
    queue = sig.gauge_points(series, sig.queued)
    points = [(t, q / n if n else 0.0, n) for (t, q), (_, n) in zip(queue, pods, strict=True)]
    current = points[-1][2] if points else 0.0
    since = len(points)
    while since > 0 and points[since - 1][2] == current:
        since -= 1
    return [(t, value) for t, value, _ in points[since:]]


def _saturation(
    settings: PlannerSettings, pool: PoolWindow, served: float, growth: float, noun: str
) -> Proposal | None:
    """Before a capacity is learned: more servers for a persisting queue (None without one)."""
    per_server = _queue_per_server(pool.series)
    lasted = sig.persisted(per_server, settings.queue_threshold)
    if lasted < settings.persist_seconds:
        return None
    queue = f"a queue of {fmt(per_server[-1][1])} {noun} per server persisted {lasted:.0f} s"
    inputs = {"queued_per_server": per_server[-1][1], "queue_seconds": lasted}
    if pool.ready < pool.replicas:
        return Proposal(pool.replicas, f"{queue}; waiting for the {pool.replicas} servers asked to be ready", inputs)
    step = max(1, ceil(pool.replicas * growth / served)) if served > 0 and growth > 0 else 1
    return Proposal(pool.replicas + step, f"{queue}; capacity not learned yet: {step} more", inputs)


def _prefill_rate(
    settings: PlannerSettings, state: PlannerState, series: Series, start: float, end: float
) -> float | None:
    """One prefill server's prompt tokens/s: learned from the windows where a queue persisted (EWMA), and at least
    what the busiest server served recently (it sustains that much)."""
    tokens, seconds = cap.saturated(
        series, state.learned_until or -math.inf, settings.queue_threshold, settings.persist_seconds
    )
    rate = state.prefill_rate
    if seconds > 0 and tokens > 0:
        rate = cap.ewma(rate, tokens / seconds, settings.learn_weight)
    floor = cap.busiest(series, max(start, end - settings.recent_seconds), end)
    if rate is not None and floor > rate:
        rate = floor
    return rate


def prefill(
    settings: PlannerSettings, state: PlannerState, pool: PoolWindow, now: float
) -> tuple[Proposal, PlannerState]:
    series, bounds = pool.series, sig.span(pool.series)
    if pool.ready == 0 or bounds is None:
        return Proposal(pool.replicas, "no ready prefill server scraped twice yet: holding"), state
    start, end = bounds
    grown = sig.intervals(series)
    prompts, requests = sum(i.grew("prompt_tokens") for i in grown), sum(i.grew("requests") for i in grown)
    mean_prompt = (prompts / requests if requests > 0 else state.mean_prompt) or 0.0
    queue = sig.gauge_points(series, sig.queued)
    served = sig.rate_points(series, "prompt_tokens")
    # Arrivals = served + the growth of the requests not finished on prefill (requests, converted to tokens with the
    # mean prompt). The waiting queue's growth alone missed the arrivals a full decode pool holds in the bootstrap
    # queue: on the DeepSeek day a 3x burst onto one decode server read 9,381-12,061 prompt tokens/s for 6 emulated s
    # while about 35,000 arrived, so prefill held 6 servers and asked for 11 only once decode drained. And a
    # decode scale-up that releases prefilled requests together counts their tokens at once, which the inflight
    # queue's fall offsets (measured on the capacity emulator: 67,452 and 94,443 tokens/s read where 35,000 arrived).
    unfinished = sig.gauge_points(series, sig.unfinished)
    growth = [(b - a) / (tb - ta) for (ta, a), (tb, b) in itertools.pairwise(unfinished)]
    arriving = [(t, s + g * mean_prompt) for (t, s), g in zip(served, growth, strict=True)]
    demand = sig.demand(arriving, now, settings.recent_seconds, settings.lead_seconds, settings.surge_seconds)
    rate = _prefill_rate(settings, state, series, start, end)
    state = replace(state, prefill_rate=rate, mean_prompt=mean_prompt or None)
    recent_growth = sig.mean(
        sig.recent([(t, g) for (t, _), g in zip(served, growth, strict=True)], end, settings.recent_seconds)
    )
    served_requests = sig.mean(sig.recent(sig.rate_points(series, "requests"), end, settings.recent_seconds))
    # The queue already waiting must be served on top of the arrivals: sizing for the arrivals alone leaves a backlog
    # that drains only at the margin the utilisation target leaves (measured on the capacity emulator: a 3x burst's
    # queue outlived the burst). It is planned to clear over the lead (the servers asked now are up by then), and
    # over at least `persist_seconds`, the planner's notion of a queue that lasts.
    drain = max(settings.lead_seconds, settings.persist_seconds)
    backlog = max(queue[-1][1], 0.0) / drain
    inputs = {
        "prompt_tokens_per_second": demand.now,
        "forecast_prompt_tokens_per_second": demand.forecast,
        "requests_per_second": served_requests + recent_growth,
        "served_requests_per_second": served_requests,
        "queued": queue[-1][1],
        "backlog_prompt_tokens_per_second": backlog * mean_prompt,
        "ready": float(pool.ready),
    }
    if mean_prompt > 0:
        # What this pool is about to pass to decode: its forecast arrivals and the queue it is planned to clear.
        inputs["handover_requests_per_second"] = demand.forecast / mean_prompt + backlog
    if demand.forecast <= 0 and queue[-1][1] <= 0:
        return Proposal(0, "no prompt tokens in the window", inputs), state
    inferred = _inferred_rate(settings, series, served, end) if rate is None else None
    if inferred is not None:
        rate = inferred[0]
        inputs["inferred_from_queue_per_server"] = inferred[1]
    if rate is None:
        growing = max(recent_growth, 0.0) + backlog
        return _unlearned_prefill(settings, pool, inputs, served_requests, demand.now, growing), state
    proposal = _sized_prefill(settings, pool, demand, rate, mean_prompt, queue[-1][1], inputs)
    if inferred is not None:
        text = f"{proposal.reason}; one server's rate inferred from a queue of {inferred[1]:.2g} per server"
        proposal = replace(proposal, reason=f"{text} (not learned yet)")
    return proposal, state


def _sized_prefill(
    settings: PlannerSettings,
    pool: PoolWindow,
    demand: sig.Demand,
    rate: float,
    mean_prompt: float,
    queued: float,
    inputs: dict[str, float],
) -> Proposal:
    """The servers for the forecast arrivals and the queues to clear, at one server's `rate` and the utilisation
    the TTFT target allows (see `planner`)."""
    drain = max(settings.lead_seconds, settings.persist_seconds)
    backlog = max(queued, 0.0) / drain
    utilisation = min(
        max(1.0 - mean_prompt / rate / settings.ttft_seconds, settings.utilisation_min), settings.utilisation_max
    )
    # The servers asked now inherit the queue that builds until they are up: the arrivals beyond what the ready
    # servers prefill, over the lead. Cleared with the queue already waiting (measured on the capacity emulator: a
    # 3x burst asked for the arrivals' 9 servers at once and for the 14 its queue needed only as that queue showed,
    # a model load later).
    building = max(demand.now - pool.ready * rate, 0.0) * settings.lead_seconds
    clearing = backlog * mean_prompt + building / drain
    need = ceil((demand.forecast + clearing) / (rate * utilisation))
    standing = ceil(demand.forecast / (rate * utilisation))
    inputs |= {
        "server_tokens_per_second": rate,
        "utilisation_target": utilisation,
        "mean_prompt_tokens": mean_prompt,
        "building_prompt_tokens": building,
    }
    if mean_prompt > 0:
        inputs["handover_requests_per_second"] += building / drain / mean_prompt
    ahead = (
        f" (forecast {fmt(demand.forecast)} in {settings.lead_seconds:.0f} s)"
        if demand.forecast > demand.now * 1.05
        else ""
    )
    clear = f" + a queue of {fmt(queued)} to clear in {drain:.0f} s" if backlog > 0 else ""
    if building > 0:
        clear += f" + {fmt(building)} prompt tokens queueing before new servers are up, to clear in {drain:.0f} s"
    text = (
        f"{fmt(demand.now)} prompt tokens/s{ahead}{clear} over {pool.ready} servers; one server {fmt(rate)} at "
        f"utilisation {utilisation:.2f} (mean prompt {fmt(mean_prompt)} tokens, "
        f"TTFT {settings.ttft_seconds * 1000:.0f} ms)"
    )
    return Proposal(need, text, inputs, standing)


MIN_INFERRING_QUEUE = 0.25
"""Waiting requests per server below which a queue says too little of the servers' utilisation to infer a rate."""


def _inferred_rate(
    settings: PlannerSettings, series: Series, served: list[sig.Point], end: float
) -> tuple[float, float] | None:
    """(one prefill server's prompt tokens/s, the waiting requests per server it is read from) before a rate is
    learned, from the queue the servers keep: an M/D/1 queue (Poisson arrivals, a fixed prefill time) waits
    Lq = rho^2 / (2 (1 - rho)) requests on average (Pollaczek-Khinchine; Kleinrock, Queueing Systems I, 5.6), so
    rho = sqrt(Lq^2 + 2 Lq) - Lq and a server's rate is what it serves / rho. The deterministic service is the
    cautious reading: a variable prefill time keeps a longer queue at the same utilisation, which this reads as a
    higher one (a lower rate, more servers). A saturated server's queue grows without bound and rho tends to 1: its
    rate is what it serves. Without it the planner learned nothing until a queue had persisted through
    `persist_seconds` (on the capacity emulator prefill held at 2 servers while SLA attainment fell to 70% over the
    12 s before a burst). None with too short or too small a queue, or a KV pool nearly full
    (its queue waits for memory, not compute)."""
    queue = sig.recent(_queue_per_server(series), end, settings.recent_seconds)
    waiting = sig.mean(queue)
    if len(queue) < 3 or waiting < MIN_INFERRING_QUEUE:
        return None
    if any((scrapes[-1][1].token_usage or 0.0) >= cap.FULL_KV for scrapes in series.values() if scrapes):
        return None
    servers = sig.gauge_points(series, lambda _, __: 1.0)[-1][1]
    per_server = sig.mean([p for p in served if p[0] >= queue[0][0]]) / max(servers, 1.0)
    utilisation = math.sqrt(waiting * waiting + 2 * waiting) - waiting
    return (per_server / utilisation, waiting) if per_server > 0 else None


def _unlearned_prefill(
    settings: PlannerSettings,
    pool: PoolWindow,
    inputs: dict[str, float],
    served_requests: float,
    tokens_now: float,
    growth: float,
) -> Proposal:
    """Before a prefill server's rate is learned: saturation only (a persisting queue adds servers), else hold."""
    saturated = _saturation(settings, pool, served_requests, growth, "requests")
    if saturated is not None:
        return replace(saturated, inputs=inputs | saturated.inputs)
    text = f"{fmt(tokens_now)} prompt tokens/s; capacity not learned yet (no window with a persisting queue): holding"
    return Proposal(pool.replicas, text, inputs)


@dataclass(frozen=True)
class Handover:
    """Requests per second prefill is about to pass to decode (its forecast arrivals and the queue it plans to
    clear) and passes now (what it finished over the recent window)."""

    coming: float
    passing: float


def _mean_output(
    settings: PlannerSettings, state: PlannerState, series: Series, points: list[sig.Point]
) -> float | None:
    """Output tokens per request, learned (EWMA) from the windows over which decode's requests held steady (their
    count moved by at most a tenth): generated tokens over finished requests counts the tokens of requests that have
    not finished yet too, which is the mean only when as many start as finish (over the first minute of traffic on
    the capacity emulator it read twice the output length)."""
    grown = sig.intervals(series)
    tokens, finished = sum(i.grew("generation_tokens") for i in grown), sum(i.grew("requests") for i in grown)
    held = [value for _, value in points]
    steady = bool(held) and abs(held[-1] - held[0]) <= 0.1 * max(sig.mean(points), 1.0)
    if not steady or finished <= 0 or tokens <= 0:
        return state.mean_output
    return cap.ewma(state.mean_output, tokens / finished, settings.learn_weight)


def _handed_over(
    settings: PlannerSettings, handover: Handover | None, seconds: float | None
) -> tuple[float, dict[str, float]]:
    """The requests that prefill's handover will keep on decode, by Little's law: N = handover x W, W the time a
    request takes on a decode server at the batch the pool is sized for (`seconds`: its output tokens x the step
    time there over the accept length; not what decode's requests take now, which is shorter on a pool below that
    batch and longer on a saturated one). 0 unless it is a surge: prefill about to hand over `handover_gate` x what
    it passes now (gated on prefill's side, where arrivals show first: decode's own completions trail its arrivals
    whenever it fills up, which read as a surge at every warm-up on the capacity emulator). Sizing decode for its
    own requests alone scales it one reaction late in a burst: while prefill is the bottleneck decode sees only what
    prefill lets through (measured on the capacity emulator: decode asked for 10 servers 10 s after prefill did)."""
    if handover is None or seconds is None or handover.coming < settings.handover_gate * handover.passing:
        return 0.0, {}
    inputs = {
        "handover_requests_per_second": handover.coming,
        "prefill_passing_per_second": handover.passing,
        "decode_seconds": seconds,
    }
    return handover.coming * seconds, inputs


def _request_seconds(
    settings: PlannerSettings, fit: cap.StepFit | None, per_server: float, length: float, output: float | None
) -> float | None:
    """A request's time on decode at `per_server` x `decode_headroom` requests per server: its output tokens x the
    step time there (the fit; the ITL target x the accept length without one) / the accept length."""
    if output is None:
        return None
    batch = per_server * settings.decode_headroom
    step = fit.base + fit.per_request * batch if fit is not None else settings.itl_seconds * length
    return output * step / length


def decode(
    settings: PlannerSettings, state: PlannerState, pool: PoolWindow, now: float, handover: Handover | None = None
) -> tuple[Proposal, PlannerState]:
    """`handover`: what prefill is about to pass on and passes now (None: not known)."""
    series, bounds = pool.series, sig.span(pool.series)
    if pool.ready == 0 or bounds is None:
        return Proposal(pool.replicas, "no ready decode server scraped twice yet: holding"), state
    _, end = bounds
    after = state.learned_until or -math.inf
    steps = cap.remember(
        state.step_samples,
        cap.step_samples(series, after),
        settings.step_samples_per_bucket,
        settings.step_samples_limit,
    )
    held = cap.kv_samples(series, after)
    kv = cap.ewma(state.kv_requests, sum(held) / len(held), settings.learn_weight) if held else state.kv_requests
    accept = sig.accept_length(series, end - settings.recent_seconds) or state.accept_length
    points = sig.gauge_points(series, sig.concurrency)
    output = _mean_output(settings, state, series, points)
    state = replace(state, step_samples=steps, kv_requests=kv, accept_length=accept, mean_output=output)
    length = accept or 1.0
    demand = sig.demand(points, now, settings.recent_seconds, settings.lead_seconds, settings.surge_seconds)
    inputs = {"requests": demand.now, "forecast_requests": demand.forecast, "accept_length": length}
    inputs["ready"] = float(pool.ready)
    if demand.forecast <= 0:
        return Proposal(0, "no request on the decode servers in the window", inputs), state
    fit = cap.fit(steps)
    holds = [v for v in (fit.holds(settings.itl_seconds, length) if fit else None, kv) if v is not None]
    if not holds:
        served = sig.mean(sig.recent(sig.rate_points(series, "requests"), end, settings.recent_seconds))
        saturated = _saturation(settings, pool, served, max(demand.per_second, 0.0), "requests")
        if saturated is not None:
            return replace(saturated, inputs=inputs | saturated.inputs), state
        return Proposal(pool.replicas, "capacity not learned yet (no decode step measured): holding", inputs), state
    per_server = min(holds)
    coming, coupling = _handed_over(settings, handover, _request_seconds(settings, fit, per_server, length, output))
    need = ceil(max(demand.forecast, coming) / (per_server * settings.decode_headroom))
    inputs |= {"forecast_requests": max(demand.forecast, coming), **coupling}
    if fit is not None:
        inputs |= {"step_base_seconds": fit.base, "step_per_request_seconds": fit.per_request}
    inputs |= {"server_requests": per_server, **({"kv_requests": kv} if kv is not None else {})}
    if output is not None:
        inputs["mean_output_tokens"] = output
    bound = " (its KV pool)" if kv is not None and kv == per_server else ""
    ahead = (
        f" (forecast {fmt(demand.forecast)} in {settings.lead_seconds:.0f} s)"
        if demand.forecast > demand.now * 1.05
        else ""
    )
    if coming > demand.forecast:
        ahead = (
            f" ({fmt(coming)} once prefill hands over {fmt(coupling['handover_requests_per_second'])}/s, "
            f"{coupling['decode_seconds']:.2g} s each)"
        )
    text = (
        f"{fmt(demand.now)} requests{ahead} over {pool.ready} servers at accept length {length:.2f}; one server "
        f"holds {per_server:.1f}{bound} at ITL {settings.itl_seconds * 1000:.0f} ms"
    )
    return Proposal(need, text, inputs), state


def backlog_cleared(settings: PlannerSettings, pool: PoolWindow, proposal: Proposal) -> bool:
    """Whether the servers asked to clear a queue may go: every server asked is up, none is still planned for a
    queue building before new servers are up, and the waiting queue has stayed under `queue_threshold` per server
    for `persist_seconds`. Until then the stabilization window holds the whole recommendation: releasing on the
    recommendation alone removed servers still loading (on the DeepSeek day prefill went 12 -> 9 -> 10 -> 7 within
    8 emulated s of a burst, as the rate inferred from the queue rose, with 2 of its servers up)."""
    if proposal.standing is None or pool.ready < pool.replicas or proposal.inputs.get("building_prompt_tokens", 0.0):
        return False
    calm = sig.trailing_run(_queue_per_server(pool.series), lambda value: value < settings.queue_threshold)
    return calm is not None and calm >= settings.persist_seconds


def queue_guard(settings: PlannerSettings, pool: PoolWindow, proposal: Proposal) -> Proposal:
    """A queue that persisted on a pool whose servers are all up means too few servers, whatever the model says."""
    if proposal.need > pool.replicas or pool.ready < pool.replicas or not pool.series:
        return proposal
    per_server = _queue_per_server(pool.series)
    lasted = sig.persisted(per_server, settings.queue_threshold)
    if lasted < settings.persist_seconds:
        return proposal
    text = f"{proposal.reason}; but a queue of {fmt(per_server[-1][1])} per server persisted {lasted:.0f} s: one more"
    return Proposal(pool.replicas + 1, text, proposal.inputs)
