"""SpecDecodeHealthy on the serving simulation (issue 29): the service, the emulator knob and the mixed-prompt workload
shared by `e2e/tests/test_serving_local.py` (short runs) and `e2e/perf/bench_spec_health.py` (the 20-minute run).

The service is the EAGLE3 example at 0.5.23 (it exports `sglang:spec_accept_rate`) drafting as the DeepSeek MTP
example does: 3 steps, top-k 1, 4 draft tokens; its decode emulator accepts 1.565 tokens per verify step, the healthy
DeepSeek NEXTN figure of the seed, and the seed's bug is 1.362 (`set_accept_length`, the emulator's run-time knob).
The workload blends prompt mixes: phases of a random number of streams and a random output length (16 to 32 tokens:
the emulator ends every answer at 32), so the accept length each window sees swings as the mix does.
"""

from __future__ import annotations

import json
import random
import threading
import urllib.request
from typing import Any, Final

from e2e.serving.traffic import Load, Report, send
from e2e.support.kube import Cluster
from e2e.support.workloads import example, get, load

HEALTHY: Final = 1.565
BROKEN: Final = 1.362
DRAFT_TOKENS: Final = 4
MIX_MAX_TOKENS: Final = (16, 20, 24, 32)
MIX_STREAMS: Final = (2, 3, 4, 6)


def seed_drop_service(name: str) -> dict[str, Any]:
    """The service described above, named `name`."""
    obj: dict[str, Any] = load(example("llama"))
    obj["metadata"]["name"] = name
    obj["spec"]["sglang"] = {"version": "0.5.23", "image": "disaggspec/sglang:v0.5.23-disaggspec"}
    obj["spec"]["speculative"].update(numSteps=3, eagleTopk=1, numDraftTokens=DRAFT_TOKENS)
    annotations = {"emulator.disaggspec.io/accept-length": str(HEALTHY)}
    obj["spec"]["decode"] = {**obj["spec"].get("decode", {}), "podAnnotations": annotations}
    return obj


def set_accept_length(pod: dict[str, Any], value: float) -> None:
    """`POST /emulator/options` on a decode pod (docs/serving-emulator.md): the emulated draft accepts `value` tokens
    per verify step from the next step on."""
    body = json.dumps({"accept-length": str(value)}).encode()
    url = f"http://{pod['status']['podIP']}:30000/emulator/options"
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=5) as response:
        if response.status != 200:
            raise RuntimeError(f"{url}: HTTP {response.status}")


def condition(cluster: Cluster, namespace: str, name: str, type_: str) -> dict[str, Any]:
    conditions = get(cluster, namespace, "dss", name).get("status", {}).get("conditions", [])
    return next((cond for cond in conditions if cond["type"] == type_), {})


class MixedTraffic:
    """Phases of `phase_seconds`, each a random prompt mix (streams, output length), on a thread until `stop`."""

    def __init__(
        self,
        url: str,
        model: str,
        *,
        seed: int = 29,
        phase_seconds: float = 10.0,
        max_tokens: tuple[int, ...] = MIX_MAX_TOKENS,
        streams: tuple[int, ...] = MIX_STREAMS,
    ) -> None:
        self.url, self.model, self.phase_seconds = url, model, phase_seconds
        self.max_tokens, self.streams = max_tokens, streams
        self.rng = random.Random(seed)
        self.reports: list[tuple[int, int, Report]] = []
        """(streams, max tokens, report) per phase."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mixed-traffic", daemon=True)

    def start(self) -> MixedTraffic:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            streams, tokens = self.rng.choice(self.streams), self.rng.choice(self.max_tokens)
            load_ = Load(
                url=self.url,
                model=self.model,
                streams=streams,
                requests=1_000_000,
                duration=self.phase_seconds,
                max_tokens=tokens,
                stream=False,
            )
            self.reports.append((streams, tokens, send(load_)))

    def stop(self) -> list[tuple[int, int, Report]]:
        self._stop.set()
        self._thread.join(timeout=self.phase_seconds + 60)
        return self.reports

    def requests(self) -> tuple[int, int]:
        """(requests sent, failed) so far."""
        done = list(self.reports)
        return sum(len(r.outcomes) for _, _, r in done), sum(len(r.failures) for _, _, r in done)
