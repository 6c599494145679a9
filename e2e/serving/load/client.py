"""The open-loop client: each request leaves at its scheduled time, streamed, timed token by token; always bounded.

`run(requests, target, bounds)` sends every `Request` at `start + at` whatever the earlier ones are doing, over one
aiohttp session, and records a `Result` per request: when it was due and when it really left (the schedule lag says
whether the client kept up), time to first token, end-to-end latency, output tokens and the inter-token latency
(ITL: the mean time per output token after the first, (last token - first token) / (tokens - 1), which is what
SGLang's own goodput judges as TPOT: sglang 0.5.23 benchmark/goodput.py:30-37), and the longest gap between two
streamed chunks. Token counts come from the server: /generate's cumulative `meta_info.completion_tokens`, the OpenAI
APIs' final `usage` chunk (asked for with `stream_options.include_usage`), else one token per non-empty chunk.

Prompts are text of `prompt_tokens - 1` common English words drawn from the request's own seed (different in every
request, so a real server's prefix cache does not shorten prefill), which the SGLang emulator counts as exactly
`prompt_tokens` (BOS + one token per word: emulator/textgen.py) and a Llama tokenizer as about as many. Outputs ask
for exactly `output_tokens` with `ignore_eos` (SGLang's sampling parameter, also accepted at the top level of the
OpenAI requests). Every request goes to the endpoint the `Target` picks (`e2e.serving.traffic`: one URL, or a
Service's ready pods) and only ever to 127.0.0.0/8 (`traffic.require_loopback`).

Bounds, all hard: at most `max_requests` requests are scheduled, none after `duration` seconds; a request that finds
`max_concurrency` requests in flight is not sent and fails as `client-cap` (queueing it would close the loop); each
request is cut at `timeout` seconds; whatever is still in flight `drain` seconds after the last arrival is cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import resource
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal

import aiohttp

from e2e.serving.load.arrivals import Arrival
from e2e.serving.load.lengths import LengthModel
from e2e.serving.traffic import Endpoint, FixedTarget, Target, require_loopback
from e2e.serving.traffic import _aborted as in_band_error  # SGLang's in-band failures, one definition for both clients
from e2e.serving.traffic import _keep_refreshing as keep_refreshing  # the Target's refresh loop, shared

Api = Literal["completions", "chat", "generate"]
APIS: Final[tuple[Api, ...]] = ("completions", "chat", "generate")
PATHS: Final[dict[Api, str]] = {
    "chat": "/v1/chat/completions",
    "completions": "/v1/completions",
    "generate": "/generate",
}
_WORD_LIST: Final = (
    "the of and to in is that for it as was with be by on not he this are or his from at which but have an they you "
    "were her she there one all we their been has when who will more no if out so said what up its about into than "
    "them can only other new some could time these two may then do first any my now such like our over man me even "
    "most made after also did many before must through back years where much your way well down should because each "
    "just those people how too little state good very make world still own see men work long get here between both "
    "life being under never day same another know while last might us great old year off come since against go came "
    "right used take three"
)
WORDS: Final = tuple(_WORD_LIST.split())
"""Common English words, each a single token in the Llama 3 vocabulary when preceded by a space."""

OK: Final = "ok"
FAILURE_KINDS: Final = (
    "client-cap",  # not sent: max_concurrency requests were in flight
    "no-endpoint",  # not sent: the target had no ready endpoint
    "connect",  # no connection (refused, reset before an answer)
    "http",  # an HTTP error status (the status is recorded)
    "aborted",  # SGLang's in-band error: an `error` object or finish_reason abort, in the body or a chunk
    "truncated",  # the stream ended before its last chunk ([DONE] / the finished /generate chunk)
    "timeout",  # cut at the per-request timeout
    "cancelled",  # still in flight when the drain time after the last arrival ran out
    "stopped",  # not sent: the caller stopped the load
)


@dataclass(frozen=True)
class Request:
    """One scheduled request."""

    index: int
    at: float
    """Seconds after the start."""
    prompt_tokens: int
    output_tokens: int


def plan(arrivals: Sequence[Arrival], lengths: LengthModel, seed: int) -> list[Request]:
    """Requests for `arrivals`, lengths from the arrival (a trace) or drawn from `lengths` (seeded; reproducible)."""
    rng = random.Random(f"lengths-{seed}")
    out = []
    for index, arrival in enumerate(arrivals):
        prompt, output = lengths.draw(rng)  # always drawn, so a trace with lengths does not shift the stream
        out.append(
            Request(
                index,
                arrival.at,
                arrival.prompt_tokens if arrival.prompt_tokens is not None else prompt,
                arrival.output_tokens if arrival.output_tokens is not None else output,
            )
        )
    return out


@dataclass(frozen=True)
class Bounds:
    """Hard limits of one run (see the module documentation)."""

    max_requests: int = 10_000
    max_concurrency: int = 256
    duration: float = 60.0
    timeout: float = 60.0
    drain: float | None = None
    """Seconds allowed after the last arrival; default `timeout`."""

    def __post_init__(self) -> None:
        if self.max_requests < 1 or self.max_concurrency < 1:
            raise ValueError("max_requests and max_concurrency must be at least 1")
        if self.duration <= 0 or self.timeout <= 0 or (self.drain is not None and self.drain < 0):
            raise ValueError("duration and timeout must be > 0, drain >= 0")

    def admit(self, requests: Sequence[Request]) -> list[Request]:
        """The requests these bounds allow: due before `duration`, at most `max_requests` (the earliest)."""
        return [r for r in sorted(requests, key=lambda r: r.at) if r.at < self.duration][: self.max_requests]


@dataclass(frozen=True)
class Result:
    """One request's fate. Times in seconds; `scheduled`/`sent` from the start of the run, the rest from `sent`."""

    index: int
    scheduled: float
    prompt_tokens: int
    output_tokens_asked: int
    kind: str = OK
    sent: float | None = None
    status: int = 0
    error: str = ""
    output_tokens: int = 0
    prompt_tokens_served: int | None = None
    """The prompt length the server reported (usage / meta_info), when it did."""
    ttft: float | None = None
    e2e: float | None = None
    itl: float | None = None
    """Mean seconds per output token after the first; 0 with one output token (as SGLang's goodput counts it)."""
    max_gap: float | None = None
    """The longest wait between two streamed chunks after the first token (a stall)."""
    endpoint: str = ""

    @property
    def ok(self) -> bool:
        return self.kind == OK

    @property
    def done(self) -> float:
        """When it ended (seconds from the start of the run): the last byte, the failure, or when it was due."""
        if self.sent is None:
            return self.scheduled
        return self.sent + (self.e2e or 0.0)

    @property
    def first_token_at(self) -> float | None:
        return None if self.sent is None or self.ttft is None else self.sent + self.ttft


@dataclass
class RunReport:
    """What `run` measured."""

    requests: list[Request]
    results: list[Result] = field(default_factory=list)
    elapsed: float = 0.0
    """Seconds from the start to the end of the run: the last answer, or the last arrival when nothing was left."""
    window: float = 0.0
    """The arrival window the offered rate is measured over (see `run`)."""
    cpu_seconds: float = 0.0
    """CPU (user + system) this process spent during the run: the generator's own cost."""
    pool_samples: list[tuple[float, dict[str, int]]] = field(default_factory=list)
    """(seconds from the start, ready servers per pool) from the pool sampler, when one ran."""
    time_scale: float = 1.0
    """Wall-clock seconds per emulated second the run was sent at; every time above is in emulated seconds except
    `cpu_seconds` (`e2e.serving.load.timescale`)."""


def prompt_text(request: Request, seed: int) -> str:
    """`prompt_tokens - 1` words, drawn from this request's own stream."""
    rng = random.Random(f"prompt-{seed}-{request.index}")
    return " ".join(rng.choices(WORDS, k=max(0, request.prompt_tokens - 1)))


def body(api: Api, model: str, request: Request, seed: int) -> dict[str, Any]:
    """The streamed request body of `api` asking for exactly `request.output_tokens` tokens."""
    text = prompt_text(request, seed)
    if api == "generate":
        return {
            "model": model,
            "text": text,
            "sampling_params": {"max_new_tokens": request.output_tokens, "ignore_eos": True, "temperature": 0},
            "stream": True,
        }
    common: dict[str, Any] = {
        "model": model,
        "max_tokens": request.output_tokens,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if api == "chat":
        return {**common, "messages": [{"role": "user", "content": text}]}
    return {**common, "prompt": text}


class _Stream:
    """Token accounting of one streamed answer, chunk by chunk."""

    def __init__(self, api: Api, sent_at: float) -> None:
        self.api = api
        self.sent_at = sent_at
        self.first: float | None = None
        self.last: float | None = None
        self.max_gap = 0.0
        self.tokens = 0
        self.usage_tokens: int | None = None
        self.prompt_tokens: int | None = None
        self.finished = False
        self.error = ""

    def chunk(self, event: dict[str, Any], now: float) -> None:
        error = in_band_error(event)
        if error:
            self.error = self.error or error
            return
        new = 0
        if self.api == "generate":
            meta = event.get("meta_info") or {}
            total = int(meta.get("completion_tokens") or 0)
            new, self.tokens = max(0, total - self.tokens), max(self.tokens, total)
            if meta.get("prompt_tokens") is not None:
                self.prompt_tokens = int(meta["prompt_tokens"])
            self.finished = self.finished or bool(meta.get("finish_reason"))
        else:
            usage = event.get("usage")
            if isinstance(usage, dict) and usage.get("completion_tokens") is not None:
                self.usage_tokens = int(usage["completion_tokens"])
                self.prompt_tokens = int(usage.get("prompt_tokens") or 0) or None
            choices = event.get("choices") or []
            choice = choices[0] if choices and isinstance(choices[0], dict) else {}
            delta = choice.get("delta") if self.api == "chat" else None
            content = (delta or {}).get("content") if self.api == "chat" else choice.get("text")
            if content:
                new = 1
                self.tokens += 1
        if new:
            if self.first is None:
                self.first = now
            elif self.last is not None:
                self.max_gap = max(self.max_gap, now - self.last)
            self.last = now

    def output_tokens(self) -> int:
        return self.usage_tokens if self.usage_tokens is not None else self.tokens


async def _send(
    session: aiohttp.ClientSession,
    api: Api,
    model: str,
    request: Request,
    endpoint: Endpoint,
    seed: int,
    limits: tuple[float, float],
    t0: float,
) -> Result:
    """One request; `limits` is (the per-request timeout, the absolute drain deadline)."""
    sent = time.monotonic()
    timeout, drain_deadline = limits
    cut_by_drain = drain_deadline - sent < timeout
    base = Result(
        request.index, request.at, request.prompt_tokens, request.output_tokens, sent=sent - t0, endpoint=endpoint.name
    )
    stream = _Stream(api, sent)
    status = 0
    try:
        url = require_loopback(endpoint.url) + PATHS[api]
        async with (
            asyncio.timeout(max(0.0, min(timeout, drain_deadline - sent))),
            session.post(url, json=body(api, model, request, seed)) as response,
        ):
            status = response.status
            if status != 200:
                raw = await response.text()
                try:
                    payload = json.loads(raw)
                except json.JSONDecodeError:
                    payload = None
                message = (in_band_error(payload) if isinstance(payload, dict) else "") or raw[:300]
                return _ended(base, stream, "http", status, message)
            async for line in response.content:
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    stream.finished = True
                    continue
                try:
                    event = json.loads(data)
                except json.JSONDecodeError:
                    continue
                if isinstance(event, dict):
                    try:
                        stream.chunk(event, time.monotonic())
                    except (TypeError, ValueError) as error:  # a token count that is not a number
                        stream.error = stream.error or f"malformed chunk: {error}: {data[:200]!r}"
    except TimeoutError:
        if cut_by_drain:
            return _ended(base, stream, "cancelled", status, "in flight when the drain time ran out")
        return _ended(base, stream, "timeout", status, f"no end within {timeout:g}s")
    except (aiohttp.ClientError, OSError) as error:
        kind = "truncated" if status == 200 else "connect"
        return _ended(base, stream, kind, status, f"{type(error).__name__}: {error}")
    if stream.error:
        return _ended(base, stream, "aborted", status, stream.error)
    if not stream.finished:
        return _ended(base, stream, "truncated", status, "the stream ended before its last chunk")
    return _ended(base, stream, OK, status, "")


def _ended(base: Result, stream: _Stream, kind: str, status: int, error: str) -> Result:
    end = time.monotonic()
    tokens = stream.output_tokens()
    itl = None
    if stream.first is not None and stream.last is not None:
        itl = (stream.last - stream.first) / (tokens - 1) if tokens > 1 else 0.0
    return replace(
        base,
        kind=kind,
        status=status,
        error=error,
        output_tokens=tokens,
        prompt_tokens_served=stream.prompt_tokens,
        ttft=None if stream.first is None else stream.first - stream.sent_at,
        e2e=end - stream.sent_at,
        itl=itl,
        max_gap=stream.max_gap if stream.first is not None else None,
    )


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


STOP_POLL: Final = 0.1
"""Seconds between two looks at the caller's stop event while waiting for the next arrival."""

Sampler = Callable[[], Awaitable[dict[str, int]]]
"""Reads the ready servers per pool (`e2e.serving.load.pools`)."""


async def _sample_pools(sampler: Sampler, interval: float, t0: float, into: list[tuple[float, dict[str, int]]]) -> None:
    while True:
        started = time.monotonic()
        with contextlib.suppress(Exception):  # a failed read is a missing sample, never the end of the load
            into.append((started - t0, await sampler()))
        await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))


def _unsent(request: Request, kind: str, error: str) -> Result:
    return Result(request.index, request.at, request.prompt_tokens, request.output_tokens, kind=kind, error=error)


async def run(
    requests: Sequence[Request],
    target: Target | str,
    *,
    api: Api = "completions",
    model: str = "default",
    bounds: Bounds | None = None,
    window: float | None = None,
    seed: int = 0,
    stop: threading.Event | None = None,
    pools: Sampler | None = None,
    pool_interval: float = 1.0,
    time_scale: float = 1.0,
) -> RunReport:
    """Send `requests` open loop to `target` (a URL or a `traffic.Target`); never raises for a failed request.

    `window` is the arrival window the offered rate is measured over (default `bounds.duration`; when
    `bounds.max_requests` leaves requests out, it ends at the first of them, so pass one request more than the cap
    to have it measured). `pools`, when given, is called every `pool_interval` seconds while the load runs. Setting
    `stop` ends the load early: no request leaves after that (the rest are `stopped`), those in flight finish within
    the drain time. A bug of the generator or a target that picks an address off loopback raises.

    `time_scale` S > 1 is for servers emulated S times slower than a GPU: request times, `bounds`' duration, timeout
    and drain, `window` and `pool_interval` are emulated seconds, the load is sent S times slower, and the report's
    times are emulated seconds again (`e2e.serving.load.timescale`)."""
    from e2e.serving.load import timescale  # it builds on this module's types: imported here, not at the top

    scale = timescale.check_scale(time_scale)
    bounds = bounds or Bounds()
    if scale == 1.0:
        return await _run_wall(requests, target, api, model, bounds, window, seed, stop, pools, pool_interval)
    wall = await _run_wall(
        timescale.wall_requests(requests, scale),
        target,
        api,
        model,
        timescale.wall_bounds(bounds, scale),
        None if window is None else window * scale,
        seed,
        stop,
        pools,
        pool_interval * scale,
    )
    return timescale.to_emulated(wall, scale, requests)


async def _run_wall(
    requests: Sequence[Request],
    target: Target | str,
    api: Api,
    model: str,
    bounds: Bounds,
    window: float | None,
    seed: int,
    stop: threading.Event | None,
    pools: Sampler | None,
    pool_interval: float,
) -> RunReport:
    """`run` in wall-clock seconds."""
    if isinstance(target, str):
        target = FixedTarget(target)
    admitted = bounds.admit(requests)
    span = min(bounds.duration, window if window is not None else bounds.duration)
    cut = [r.at for r in requests if r.at < bounds.duration and r.at > (admitted[-1].at if admitted else -1.0)]
    if len(admitted) == bounds.max_requests and cut:
        span = min(span, min(cut))  # the request cap ended the arrivals: the window ends at the first one left out
    report = RunReport(admitted, window=span)
    drain = bounds.timeout if bounds.drain is None else bounds.drain
    await asyncio.to_thread(target.refresh)
    cpu0 = _cpu()
    t0 = time.monotonic()
    drain_deadline = t0 + (admitted[-1].at if admitted else 0.0) + drain
    refresher = asyncio.ensure_future(keep_refreshing(target))
    sampler = asyncio.ensure_future(_sample_pools(pools, pool_interval, t0, report.pool_samples)) if pools else None
    in_flight: dict[asyncio.Task[Result], Request] = {}
    results: list[Result] = []
    crashed: list[BaseException] = []

    def stopping() -> bool:
        return stop is not None and stop.is_set()

    def finished(task: asyncio.Task[Result]) -> None:
        request = in_flight.pop(task)
        if task.cancelled():  # only the safety net below cancels
            results.append(_unsent(request, "cancelled", "cancelled past the drain deadline"))
        elif task.exception() is not None:  # a bug of the generator, not a failed request: raised by `run`
            crashed.append(task.exception())  # type: ignore[arg-type]
        else:
            results.append(task.result())

    connector = aiohttp.TCPConnector(limit=bounds.max_concurrency, limit_per_host=0)
    unlimited = aiohttp.ClientTimeout(total=None)  # each request's own deadline governs (`_send`)
    try:
        async with aiohttp.ClientSession(connector=connector, timeout=unlimited) as session:
            try:
                for position, request in enumerate(admitted):
                    while (delay := t0 + request.at - time.monotonic()) > 0 and not stopping():
                        await asyncio.sleep(min(delay, STOP_POLL))  # a long gap between arrivals still sees `stop`
                    if stopping():
                        results.extend(_unsent(r, "stopped", "the load was stopped") for r in admitted[position:])
                        report.window = min(report.window, time.monotonic() - t0)  # the arrivals ended here
                        break
                    if len(in_flight) >= bounds.max_concurrency:
                        results.append(_unsent(request, "client-cap", f"{len(in_flight)} requests in flight"))
                        continue
                    endpoint = target.pick()
                    if endpoint is None:
                        results.append(_unsent(request, "no-endpoint", f"no ready endpoint: {target}"))
                        continue
                    require_loopback(endpoint.url)  # a target that picks another address ends the load at once
                    limits = (bounds.timeout, drain_deadline)
                    task = asyncio.ensure_future(_send(session, api, model, request, endpoint, seed, limits, t0))
                    in_flight[task] = request
                    task.add_done_callback(finished)
                if in_flight:
                    # Every request ends by the drain deadline on its own; the margin only covers a wedged event loop.
                    await asyncio.wait(set(in_flight), timeout=max(0.0, drain_deadline - time.monotonic()) + 5.0)
            finally:  # requests still in flight now (past the deadline, or the load failed) are cut
                for task in list(in_flight):
                    task.cancel()
                await asyncio.gather(*in_flight, return_exceptions=True)
    finally:
        for helper in (refresher, sampler):
            if helper is not None:
                helper.cancel()
        await asyncio.gather(*(h for h in (refresher, sampler) if h is not None), return_exceptions=True)
    if crashed:
        raise crashed[0]
    report.cpu_seconds = _cpu() - cpu0
    report.results = sorted(results, key=lambda r: r.index)
    report.elapsed = time.monotonic() - t0
    return report
