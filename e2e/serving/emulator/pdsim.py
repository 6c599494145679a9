"""A PD deployment on a simulated clock: P prefill and D decode `capacity.Server`s coupled as SGLang couples them.

The same live scheduler rules the emulated servers run (capacity.py), without HTTP, threads or wall-clock time, so a
P:D ratio sweep over minutes of traffic takes seconds. Coupling, as in SGLang's PD mode: a request is routed to one
prefill and one decode (round robin here, like a router's simplest policy); the decode pre-allocates its KV first
(0.5.2 disaggregation/decode.py:368-420) and only then does the prefill take it from its bootstrap queue; the prefill's
KV stays in its pool until the transfer (KV bytes over the transfer bandwidth) is over, then the decode runs it; the
first token reaches the client with the decode's first step. Used by the tests and the benchmark to check that the
P:D optimum the analytic model predicts (`best_ratio`) is the one the stepped model finds.
"""

from __future__ import annotations

import heapq
import itertools
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

from e2e.serving.emulator import capacity
from e2e.serving.emulator.profiles import Profile


@dataclass
class Flow:
    """One request through the deployment."""

    arrival: float
    prompt: int
    output: int
    prefill: int
    decode: int
    on_decode: capacity.Request
    on_prefill: capacity.Request | None = None
    first_token: float | None = None
    finished: float | None = None


@dataclass
class Outcome:
    flows: list[Flow]
    window: tuple[float, float]

    def throughput(self) -> float:
        """Requests finished per second inside the window."""
        start, end = self.window
        return sum(1 for f in self.flows if f.finished is not None and start <= f.finished < end) / (end - start)

    def ttfts(self) -> list[float]:
        return [f.first_token - f.arrival for f in self.flows if f.first_token is not None]

    def median_ttft(self) -> float:
        return statistics.median(self.ttfts())


@dataclass
class _Node:
    server: capacity.Server
    busy: bool = False
    stepped: float = 0.0


@dataclass
class Deployment:
    prefill_profile: Profile
    decode_profile: Profile
    prefill_limits: capacity.Limits
    decode_limits: capacity.Limits
    prefills: int
    decodes: int
    transfer_bytes_per_second: float
    now: float = 0.0
    _events: list[tuple[float, int, Callable[[], None]]] = field(default_factory=list)
    _seq: itertools.count[int] = field(default_factory=itertools.count)

    def __post_init__(self) -> None:
        self.p = [
            _Node(capacity.Server(self.prefill_profile, "prefill", self.prefill_limits, live=True))
            for _ in range(self.prefills)
        ]
        self.d = [
            _Node(capacity.Server(self.decode_profile, "decode", self.decode_limits, live=True))
            for _ in range(self.decodes)
        ]
        self.by_decode_req: dict[int, Flow] = {}
        self.by_prefill_req: dict[int, Flow] = {}

    def _at(self, when: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._events, (when, next(self._seq), action))

    def _kick(self, node: _Node) -> None:
        if not node.busy:
            node.busy = True
            self._at(self.now, lambda: self._step(node))

    def _step(self, node: _Node) -> None:
        server = node.server
        server.clock = self.now
        seconds = server.step()
        for req in server.allocated:
            self._preallocated(self.by_decode_req[id(req)])
        if seconds == 0:
            node.busy = False
            return
        emitted = list(server.emitted)

        def done() -> None:
            for req, _ in emitted:
                if server.role == "prefill":
                    self._prefilled(self.by_prefill_req[id(req)])
                else:
                    self._decoded(self.by_decode_req[id(req)], req)
            self._step(node)

        self._at(self.now + seconds, done)

    def _preallocated(self, flow: Flow) -> None:
        req = capacity.Request(arrival=self.now, prompt=flow.prompt, output=1)
        flow.on_prefill = req
        self.by_prefill_req[id(req)] = flow
        node = self.p[flow.prefill]
        node.server.waiting.append(req)
        self._kick(node)

    def _prefilled(self, flow: Flow) -> None:
        seconds = flow.prompt * self.prefill_profile.model.kv_bytes_per_token / self.transfer_bytes_per_second

        def transferred() -> None:
            assert flow.on_prefill is not None
            self.p[flow.prefill].server.release(flow.on_prefill)
            self._kick(self.p[flow.prefill])
            self.d[flow.decode].server.kv_arrived(flow.on_decode)
            self._kick(self.d[flow.decode])

        self._at(self.now + seconds, transferred)

    def _decoded(self, flow: Flow, req: capacity.Request) -> None:
        if flow.first_token is None:
            flow.first_token = self.now
        if req.finished is not None:
            flow.finished = self.now

    def run(self, arrivals: list[capacity.Request], until: float, warmup: float) -> Outcome:
        """Route `arrivals` (prompt, output) round robin and simulate until `until` seconds."""
        flows: list[Flow] = []
        for index, arrival in enumerate(sorted(arrivals, key=lambda r: r.arrival)):
            on_decode = capacity.Request(
                arrival=arrival.arrival, prompt=arrival.prompt, output=max(1, arrival.output - 1)
            )
            flow = Flow(
                arrival.arrival, arrival.prompt, arrival.output, index % self.prefills, index % self.decodes, on_decode
            )
            flows.append(flow)
            self.by_decode_req[id(on_decode)] = flow

            def arrive(flow: Flow = flow) -> None:
                node = self.d[flow.decode]
                node.server.waiting.append(flow.on_decode)
                self._kick(node)

            self._at(arrival.arrival, arrive)
        while self._events and self._events[0][0] < until:
            self.now, _, action = heapq.heappop(self._events)
            action()
        return Outcome(flows, (warmup, until))


def system_capacity(prefills: int, decodes: int, prefill_rate: float, decode_rate: float) -> float:
    """Requests/s of P prefills and D decodes: the slower side's total (the analytic model)."""
    return min(prefills * prefill_rate, decodes * decode_rate)


def best_ratio(servers: int, prefill_rate: float, decode_rate: float) -> tuple[int, int]:
    """The (P, D) with P + D = `servers` that the analytic model says serves the most."""
    ratios = [(p, servers - p) for p in range(1, servers)]
    return max(ratios, key=lambda pd: system_capacity(pd[0], pd[1], prefill_rate, decode_rate))
