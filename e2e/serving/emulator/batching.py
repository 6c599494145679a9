"""The emulated server's scheduler loop: capacity.Server stepped in (scaled) wall-clock time, one loop per DP rank.

SGLang runs one scheduler process per DP rank (with DP attention, `dp_size` of them behind the DP controller), and
each iteration forms one batch: so does this module. A request gets a `Ticket` (`submit`); the loop of its rank steps
the model (`capacity.Server.step`), sleeps the step's duration times the **time scale**, then delivers what the step
emitted to the tickets. One timer per batch, not per request: a saturated server costs one wake-up per step whatever
its batch size (issue 31 item 5).

The time scale slows every emulated server uniformly: a step the model times at 10 ms takes 10 ms x `time_scale` of
wall-clock time, so a 2-core machine can drive many servers past saturation while every ratio (prefill vs decode
time, TTFT vs ITL, capacity per P:D ratio) stays as the model says. Everything measured from outside (the router's
and the client's latencies, SGLang's histograms) is then in scaled time: divide by the scale for the GPU-time figure.
Wall-clock time the event loop loses (it wakes later than asked when the machine is saturated) is counted in
`lag_seconds`: a run whose lag is a sizeable part of its busy time measured the machine, not the model.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from e2e.serving.emulator import capacity


@dataclass(eq=False)
class Ticket:
    """One request on one rank's scheduler."""

    rank: int
    req: capacity.Request
    tokens: asyncio.Queue[int] = field(default_factory=asyncio.Queue)
    """Tokens emitted per step, in order; 0 means the request left the scheduler without finishing (cancelled)."""
    allocated: asyncio.Event = field(default_factory=asyncio.Event)
    """Decode: set when the request is pre-allocated (its KV has a place)."""

    async def sizes(self) -> AsyncIterator[int]:
        """Tokens per step until the request's output is complete."""
        produced = 0
        while produced < self.req.output:
            size = await self.tokens.get()
            if size == 0:
                return
            produced += size
            yield size


class Scheduler:
    """One `capacity.Server` and one stepping loop per DP rank of this emulated server."""

    def __init__(
        self,
        servers: list[capacity.Server],
        *,
        time_scale: float,
        on_step: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.servers = servers
        self.time_scale = time_scale
        self.on_step = on_step
        self._clock = clock
        self._start = clock()
        self._wake = [asyncio.Event() for _ in servers]
        self._tickets: dict[int, Ticket] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self.lag_seconds = 0.0
        """Wall-clock seconds the loops woke later than their steps asked (the machine could not keep up)."""
        self.busy_seconds = 0.0
        """Wall-clock seconds the loops slept through steps."""

    @property
    def role(self) -> capacity.Role:
        return self.servers[0].role

    def now(self) -> float:
        """Emulated seconds since start (wall-clock seconds / time scale)."""
        return (self._clock() - self._start) / self.time_scale

    def start(self) -> None:
        if not self._tasks:
            self._tasks = [asyncio.ensure_future(self._loop(rank)) for rank in range(len(self.servers))]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    # --- requests ---------------------------------------------------------------------------------------------------

    def submit(self, rank: int, prompt: int, output: int) -> Ticket:
        """Queue a request on `rank`: a prefill of `prompt` tokens, or a decode pre-allocation for `prompt` tokens
        that then generates `output` tokens."""
        self.start()
        rank = rank % len(self.servers)
        req = capacity.Request(arrival=self.now(), prompt=prompt, output=output)
        ticket = Ticket(rank, req)
        self._tickets[id(req)] = ticket
        self.servers[rank].waiting.append(req)
        self._wake[rank].set()
        return ticket

    def release(self, ticket: Ticket) -> None:
        """Prefill: the request's KV transfer is over; its KV is freed."""
        self.servers[ticket.rank].release(ticket.req)
        self._forget(ticket)
        self._wake[ticket.rank].set()

    def kv_arrived(self, ticket: Ticket) -> None:
        """Decode: the request's KV is here; it joins the running batch when there is a place."""
        self.servers[ticket.rank].kv_arrived(ticket.req)
        self._wake[ticket.rank].set()

    def cancel(self, ticket: Ticket) -> None:
        """The request failed or its client left: whatever it holds is freed (idempotent)."""
        if id(ticket.req) not in self._tickets:
            return
        self.servers[ticket.rank].cancel(ticket.req)
        self._forget(ticket)
        ticket.tokens.put_nowait(0)
        self._wake[ticket.rank].set()

    def _forget(self, ticket: Ticket) -> None:
        self._tickets.pop(id(ticket.req), None)

    # --- what the metrics read --------------------------------------------------------------------------------------

    def running(self) -> int:
        return sum(s.running_count for s in self.servers)

    def queued(self) -> int:
        return sum(s.queued_count for s in self.servers)

    def preallocating(self) -> int:
        """Decode: requests waiting for KV space (the pre-allocation queue's part the scheduler holds)."""
        return sum(len(s.waiting) for s in self.servers) if self.role == "decode" else 0

    def transferring(self) -> int:
        return sum(len(s.inflight) if s.role == "prefill" else len(s.transferring) for s in self.servers)

    def used_tokens(self) -> int:
        return sum(s.used_tokens for s in self.servers)

    def total_tokens(self) -> int:
        return sum(s.limits.max_total_num_tokens for s in self.servers)

    def load(self) -> int:
        """/get_load: used KV tokens plus the prompts still waiting (0.5.2 managers/scheduler.py:2224-2234)."""
        return self.used_tokens() + sum(r.prompt for s in self.servers for r in s.waiting)

    def report(self) -> dict[str, object]:
        return {
            "time_scale": self.time_scale,
            "lag_seconds": round(self.lag_seconds, 3),
            "busy_seconds": round(self.busy_seconds, 3),
            "ranks": [
                {
                    "max_total_num_tokens": s.limits.max_total_num_tokens,
                    "max_running_requests": s.limits.max_running_requests,
                    "used_tokens": s.used_tokens,
                    "waiting": len(s.waiting),
                    "running": len(s.running),
                    "ready": len(s.ready),
                    "transferring": len(s.transferring),
                    "inflight": len(s.inflight),
                    "retracted": len(s.retracted),
                    "steps": s.steps,
                    "retractions": s.retractions,
                }
                for s in self.servers
            ],
        }

    # --- the loop ---------------------------------------------------------------------------------------------------

    async def _loop(self, rank: int) -> None:
        server = self.servers[rank]
        wake = self._wake[rank]
        while True:
            wake.clear()
            server.clock = self.now()
            seconds = server.step()
            for req in server.allocated:
                ticket = self._tickets.get(id(req))
                if ticket is not None:
                    ticket.allocated.set()
            if seconds > 0:
                planned = seconds * self.time_scale
                asked = self._clock()
                await asyncio.sleep(planned)
                woke = self._clock() - asked
                self.busy_seconds += woke
                self.lag_seconds += max(0.0, woke - planned)
                for req, size in server.emitted:
                    ticket = self._tickets.get(id(req))
                    if ticket is None:
                        continue
                    ticket.tokens.put_nowait(size)
                    if req.finished is not None and server.role == "decode":
                        self._forget(ticket)
            if self.on_step is not None:
                self.on_step()
            if seconds == 0:
                await wake.wait()
