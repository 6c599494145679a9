"""Bounded traffic through a PD router on loopback: N concurrent streams, at most R requests, at most T seconds.

The client of the serving simulation. It speaks the OpenAI API with the served model name (which both router modes
accept) or SGLang's native /generate, streams or not, and records every request's outcome: HTTP status, latency,
time to first token, the error text, which router got it, and which prefill and decode pods served it with which
speculative fingerprint, revision and bootstrap port (the SGLang emulator reports that in every answer; see
docs/serving-emulator.md). Requests go to `Load.url`, or to whatever a `Target` picks for each one (a Service's
ready pods, `e2e.serving.servicetraffic`). It refuses any address outside 127.0.0.0/8 and always stops by itself:
when the request budget is spent, the deadline passes or the caller's stop event is set, whichever comes first (the
requests in flight then finish, each bounded by its timeout).

    python -m e2e.serving.traffic --url http://127.163.0.5:8000 --model llama --streams 8 --requests 200 --duration 30
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import itertools
import json
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

import aiohttp

Api = Literal["chat", "completions", "generate"]
APIS: tuple[Api, ...] = ("chat", "completions", "generate")
_PATHS: dict[Api, str] = {"chat": "/v1/chat/completions", "completions": "/v1/completions", "generate": "/generate"}


class NotLoopback(ValueError):
    """The target is not on 127.0.0.0/8: the simulation never sends traffic anywhere else."""


def require_loopback(url: str) -> str:
    """`url` unchanged when its host is a literal 127.0.0.0/8 address; raises NotLoopback otherwise."""
    host = urlsplit(url).hostname or ""
    try:
        address = ipaddress.ip_address(host)
    except ValueError as error:
        raise NotLoopback(f"{url}: the host must be a literal 127.x.y.z address, not {host!r}") from error
    if address not in ipaddress.ip_network("127.0.0.0/8"):
        raise NotLoopback(f"{url}: {address} is not on 127.0.0.0/8")
    return url.rstrip("/")


@dataclass(frozen=True)
class Endpoint:
    """Where one request goes: a base URL on 127.0.0.0/8, and the name the outcome records as its `router`."""

    url: str
    name: str


class Target(Protocol):
    """Picks each request's endpoint. `refresh` (blocking; run on a worker thread) updates what `pick` chooses
    from, every `refresh_interval` seconds while a load runs (None: never)."""

    refresh_interval: float | None

    def refresh(self) -> None: ...

    def pick(self) -> Endpoint | None:
        """The next request's endpoint; None when there is none (the request fails without being sent)."""
        ...


class FixedTarget:
    """Every request to one URL (a router pod's own address); the outcome's `router` is its IP."""

    refresh_interval: float | None = None

    def __init__(self, url: str) -> None:
        self.endpoint = Endpoint(require_loopback(url), urlsplit(url).hostname or url)

    def refresh(self) -> None:
        pass

    def pick(self) -> Endpoint | None:
        return self.endpoint

    def __str__(self) -> str:
        return self.endpoint.url


@dataclass(frozen=True)
class Load:
    """What to send; both bounds (requests, duration) always apply.

    `url` is where every request goes; it may be "" when a `Target` given to `run` picks each request's address."""

    url: str
    model: str
    streams: int = 4
    requests: int = 100
    duration: float = 30.0
    apis: tuple[Api, ...] = APIS
    stream: bool | None = None
    """True/False forces streaming on or off; None alternates request by request."""
    max_tokens: int = 8
    timeout: float = 30.0
    """Per-request timeout in seconds."""

    def __post_init__(self) -> None:
        if self.url:
            require_loopback(self.url)
        if self.streams < 1 or self.requests < 1 or self.duration <= 0:
            raise ValueError("streams and requests must be at least 1 and duration positive")


@dataclass(frozen=True)
class Outcome:
    """One request's fate."""

    index: int
    api: Api
    stream: bool
    ok: bool
    status: int
    """HTTP status; 0 when no response arrived (connection refused, timeout, cancelled at the deadline)."""
    latency: float
    first_token: float | None
    error: str = ""
    text: str = ""
    prefill_pod: str | None = None
    decode_pod: str | None = None
    fingerprint: str | None = None
    fingerprint_match: bool | None = None
    bootstrap_port: int | None = None
    started: float = 0.0
    """Seconds since the load started."""
    prefill_revision: str | None = None
    decode_revision: str | None = None
    """The serving revisions of the pods that served it (the emulator's `revision` oracle; None when unset)."""
    router: str | None = None
    """Which endpoint got it: the router pod's name through a Service target, else its IP (None: none was ready)."""


@dataclass
class Report:
    """Every outcome of one load, and summaries of them."""

    load: Load
    outcomes: list[Outcome] = field(default_factory=list)
    elapsed: float = 0.0

    @property
    def failures(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.ok]

    @property
    def succeeded(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.ok]

    def served_by(self, role: Literal["prefill", "decode"]) -> Counter[str]:
        pods = (o.prefill_pod if role == "prefill" else o.decode_pod for o in self.succeeded)
        return Counter(p for p in pods if p)

    def percentile(self, q: float) -> float:
        latencies = sorted(o.latency for o in self.succeeded)
        if not latencies:
            return float("nan")
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))]

    def summary(self) -> dict[str, Any]:
        ok = self.succeeded
        first_tokens = [o.first_token for o in ok if o.first_token is not None]
        return {
            "requests": len(self.outcomes),
            "failures": len(self.failures),
            "elapsed_s": round(self.elapsed, 3),
            "throughput_rps": round(len(ok) / self.elapsed, 2) if self.elapsed else 0.0,
            "latency_p50_ms": round(self.percentile(0.50) * 1000, 1),
            "latency_p99_ms": round(self.percentile(0.99) * 1000, 1),
            "first_token_p50_ms": round(statistics.median(first_tokens) * 1000, 1) if first_tokens else None,
            "prefill_pods": dict(self.served_by("prefill")),
            "decode_pods": dict(self.served_by("decode")),
            "routers": dict(Counter(o.router for o in ok if o.router)),
            "errors": dict(Counter(o.error[:120] for o in self.failures).most_common(5)),
        }


def _body(api: Api, load: Load, stream: bool, index: int) -> dict[str, Any]:
    prompt = f"request {index}: say something emulated"
    if api == "chat":
        return {
            "model": load.model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": load.max_tokens,
            "stream": stream,
        }
    if api == "completions":
        return {"model": load.model, "prompt": prompt, "max_tokens": load.max_tokens, "stream": stream}
    return {
        "model": load.model,
        "text": prompt,
        "sampling_params": {"max_new_tokens": load.max_tokens, "temperature": 0},
        "stream": stream,
    }


def served_by(payload: Any) -> dict[str, Any]:
    """The emulator's report of who served a response (top-level `emulator`, or `meta_info.emulator` in /generate)."""
    if not isinstance(payload, dict):
        return {}
    report = payload.get("emulator")
    if not isinstance(report, dict):
        meta = payload.get("meta_info")
        report = meta.get("emulator") if isinstance(meta, dict) else None
    return report if isinstance(report, dict) else {}


def _text_of(payload: dict[str, Any]) -> str:
    choices = payload.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        choice = choices[0]
        for part in (choice.get("delta"), choice.get("message")):
            if isinstance(part, dict) and isinstance(part.get("content"), str):
                return str(part["content"])
        if isinstance(choice.get("text"), str):
            return str(choice["text"])
    text = payload.get("text")
    return text if isinstance(text, str) else ""


def _sse_events(chunk_lines: Sequence[str]) -> Iterator[dict[str, Any]]:
    for line in chunk_lines:
        if not line.startswith("data:"):
            continue
        data = line[len("data:") :].strip()
        if not data or data == "[DONE]":
            continue
        try:
            event = json.loads(data)
        except json.JSONDecodeError:
            continue
        if isinstance(event, dict):
            yield event


def _aborted(payload: dict[str, Any]) -> str:
    """SGLang's in-band failure: an `error` object, or finish_reason type `abort` with its message."""
    error = payload.get("error")
    if isinstance(error, dict):
        return str(error.get("message") or error)
    if error:
        return str(error)
    meta = payload.get("meta_info")
    finish = meta.get("finish_reason") if isinstance(meta, dict) else None
    if isinstance(finish, dict) and finish.get("type") == "abort":
        return str(finish.get("message") or "aborted")
    return ""


def _error_of(payload: Any, raw: str) -> str:
    found = _aborted(payload) if isinstance(payload, dict) else ""
    return found or raw[:300] or "no body"


async def _one(
    session: aiohttp.ClientSession, load: Load, endpoint: Endpoint, index: int, api: Api, stream: bool, t0: float
) -> Outcome:
    started = time.monotonic()
    first: float | None = None
    status = 0
    url = require_loopback(endpoint.url) + _PATHS[api]
    try:
        async with session.post(
            url, json=_body(api, load, stream, index), timeout=aiohttp.ClientTimeout(load.timeout)
        ) as response:
            status = response.status
            if stream and response.status == 200:
                lines: list[str] = []
                async for raw_line in response.content:
                    if first is None:
                        first = time.monotonic() - started
                    lines.append(raw_line.decode(errors="replace").strip())
                events = list(_sse_events(lines))
                aborts = [reason for reason in map(_aborted, events) if reason]
                text = "".join(_text_of(e) for e in events)
                report = next((served_by(e) for e in reversed(events) if served_by(e)), {})
                error = aborts[0] if aborts else ("" if events else "empty stream")
            else:
                raw = await response.text()
                first = time.monotonic() - started
                try:
                    payload = json.loads(raw)
                except json.JSONDecodeError:
                    payload = None
                text = _text_of(payload) if isinstance(payload, dict) else ""
                report = served_by(payload)
                if response.status != 200:
                    error = _error_of(payload, raw)
                else:
                    error = _aborted(payload) if isinstance(payload, dict) else "the answer is not JSON"
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        failure = f"{type(exc).__name__}: {exc}"
        return Outcome(
            index,
            api,
            stream,
            False,
            status,
            time.monotonic() - started,
            first,
            failure,
            started=started - t0,
            router=endpoint.name,
        )
    latency = time.monotonic() - started
    ok = status == 200 and not error
    return Outcome(
        index=index,
        api=api,
        stream=stream,
        ok=ok,
        status=status,
        latency=latency,
        first_token=first,
        error=error,
        text=text,
        prefill_pod=report.get("prefill_pod"),
        decode_pod=report.get("decode_pod"),
        fingerprint=report.get("fingerprint"),
        fingerprint_match=report.get("fingerprint_match"),
        bootstrap_port=report.get("bootstrap_port"),
        started=started - t0,
        prefill_revision=report.get("prefill_revision"),
        decode_revision=report.get("decode_revision"),
        router=endpoint.name,
    )


NO_ENDPOINT_PAUSE = 0.05
"""A stream that found no endpoint waits this long before its next request, so it neither spins the event loop
(no I/O to yield on) nor burns the request budget in a moment."""


async def _keep_refreshing(target: Target) -> None:
    interval = target.refresh_interval
    if interval is None:
        return
    while True:
        await asyncio.sleep(interval)
        await asyncio.to_thread(target.refresh)


async def run(
    load: Load, target: Target | None = None, *, stop: threading.Event | None = None, report: Report | None = None
) -> Report:
    """Send `load` to `target` (default: `load.url`) and wait for every answer (or the deadline); never raises for a
    failed request. Setting `stop` ends the load early: no new request starts, those in flight finish. Outcomes are
    appended to `report` (a fresh one by default) as they come, so another thread can watch them."""
    if target is None:
        if not load.url:
            raise ValueError("Load.url is empty and no target was given")
        target = FixedTarget(load.url)
    report = report if report is not None else Report(load)
    t0 = time.monotonic()
    deadline = t0 + load.duration
    counter = itertools.count()
    mix = itertools.cycle(load.apis)

    def more() -> bool:
        return time.monotonic() < deadline and not (stop is not None and stop.is_set())

    async def stream_worker(session: aiohttp.ClientSession) -> None:
        while more():
            index = next(counter)
            if index >= load.requests:
                return
            api = next(mix)
            stream = load.stream if load.stream is not None else index % 2 == 1
            endpoint = target.pick()
            if endpoint is None:
                failure = f"no ready endpoint: {target}"
                report.outcomes.append(
                    Outcome(index, api, stream, False, 0, 0.0, None, failure, started=time.monotonic() - t0)
                )
                await asyncio.sleep(NO_ENDPOINT_PAUSE)
                continue
            report.outcomes.append(await _one(session, load, endpoint, index, api, stream, t0))

    await asyncio.to_thread(target.refresh)  # a first view before the first request
    refresher = asyncio.ensure_future(_keep_refreshing(target))
    connector = aiohttp.TCPConnector(limit=load.streams)
    try:
        async with aiohttp.ClientSession(connector=connector) as session:
            workers = [asyncio.ensure_future(stream_worker(session)) for _ in range(load.streams)]
            done, pending = await asyncio.wait(workers, timeout=max(0.0, deadline - time.monotonic()) + load.timeout)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            for task in done:
                task.result()  # a stream that died (a target that picked a non-loopback address) fails the load
    finally:
        refresher.cancel()
        ended = (await asyncio.gather(refresher, return_exceptions=True))[0]
    if isinstance(ended, Exception):  # a refresh that failed unexpectedly: a stale view must not pass unnoticed
        raise ended
    report.elapsed = time.monotonic() - t0
    # A new sorted list, not an in-place sort: a watching thread never sees the list half sorted.
    report.outcomes = sorted(report.outcomes, key=lambda o: o.index)
    return report


def send(load: Load, target: Target | None = None) -> Report:
    """Synchronous entry point for tests and scripts (`run` to `target`, default `load.url`)."""
    return asyncio.run(run(load, target))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--url", required=True, help="router base URL on 127.0.0.0/8, e.g. http://127.163.0.5:8000")
    parser.add_argument("--model", required=True, help="served model name")
    parser.add_argument("--streams", type=int, default=4, help="concurrent streams")
    parser.add_argument("--requests", type=int, default=100, help="at most this many requests")
    parser.add_argument("--duration", type=float, default=30.0, help="at most this many seconds")
    parser.add_argument("--api", choices=APIS, action="append", help="API(s) to use, in turn (default: all)")
    parser.add_argument("--stream", choices=("on", "off", "mixed"), default="mixed")
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--json", action="store_true", help="print every outcome as JSON lines too")
    args = parser.parse_args(argv)
    load = Load(
        url=require_loopback(args.url),
        model=args.model,
        streams=args.streams,
        requests=args.requests,
        duration=args.duration,
        apis=tuple(args.api or APIS),
        stream={"on": True, "off": False, "mixed": None}[args.stream],
        max_tokens=args.max_tokens,
    )
    report = send(load)
    if args.json:
        for outcome in report.outcomes:
            print(json.dumps(asdict(outcome)))
    print(json.dumps(report.summary(), indent=2))
    return 0 if not report.failures else 1


if __name__ == "__main__":
    sys.exit(main())
