"""A PD deployment of stepped servers on a simulated clock (pdsim.py) against the analytic model: the P:D sweep finds
the predicted optimum, the saturated role is where requests queue, and a slower transfer backend adds the TTFT the
model says. Pure and seeded."""

from __future__ import annotations

import statistics

import pytest

from e2e.serving.emulator import capacity, pdsim, sizing
from e2e.serving.emulator.profiles import H100_LLAMA_3_1_8B, H100_SXM, LLAMA_3_1_8B, max_total_num_tokens

PROFILE = H100_LLAMA_3_1_8B
# Request slots as SGLang sizes them for this pool (sizing.size_server: 2,048), more than the running batch.
LIMITS = capacity.Limits(
    max_total_num_tokens=max_total_num_tokens(H100_SXM, LLAMA_3_1_8B, 0.85), max_running_requests=128, max_num_reqs=2048
)
RDMA = 8 * sizing.RDMA_NIC_BYTES_PER_SECOND * sizing.RDMA_EFFICIENCY


def _deploy(prefills: int, decodes: int, bandwidth: float = RDMA) -> pdsim.Deployment:
    return pdsim.Deployment(PROFILE, PROFILE, LIMITS, LIMITS, prefills, decodes, bandwidth)


@pytest.mark.parametrize(("prompt", "output"), [(3000, 200), (512, 512)], ids=["prefill-heavy", "decode-heavy"])
def test_a_ratio_sweep_finds_the_analytic_optimum(prompt: int, output: int) -> None:
    """Six servers split P + D: throughput at 1.3x the best split's capacity follows min(P x prefill, D x decode)
    for every split (within 10%: a decode batch admits and finishes in waves, so a 25 s window sees them unevenly),
    and the best split is the analytic one (4:2 for long prompts, 2:4 for long outputs)."""
    servers = 6
    cap_p = capacity.prefill_capacity(PROFILE, LIMITS, prompt)
    cap_d = capacity.decode_capacity(PROFILE, LIMITS, prompt, output)
    ratios = [(p, servers - p) for p in range(1, servers)]
    offered = 1.3 * max(pdsim.system_capacity(p, d, cap_p, cap_d) for p, d in ratios)
    arrivals = capacity.poisson_arrivals(offered, 40.0, prompt, output, seed=3)
    measured: dict[tuple[int, int], float] = {}
    for p, d in ratios:
        outcome = _deploy(p, d).run([capacity.Request(r.arrival, r.prompt, r.output) for r in arrivals], 40.0, 15.0)
        measured[(p, d)] = outcome.throughput()
        assert measured[(p, d)] == pytest.approx(pdsim.system_capacity(p, d, cap_p, cap_d), rel=0.10), (p, d)
    assert max(measured, key=lambda pd: measured[pd]) == pdsim.best_ratio(servers, cap_p, cap_d)


def test_requests_queue_on_the_saturated_role() -> None:
    for prompt, output, saturated in ((8192, 16, "prefill"), (256, 2048, "decode")):
        cap_p = capacity.prefill_capacity(PROFILE, LIMITS, prompt)
        cap_d = capacity.decode_capacity(PROFILE, LIMITS, prompt, output)
        deployment = _deploy(1, 1)
        # 40 s: a 2,048-token output takes ~29 s, so the decode's batch is full only after that long.
        deployment.run(capacity.poisson_arrivals(1.5 * min(cap_p, cap_d), 40.0, prompt, output, seed=5), 40.0, 5.0)
        prefill, decode = deployment.p[0].server, deployment.d[0].server
        # A saturated prefill holds bootstrapped requests in its queue; a saturated decode pre-allocates what its
        # pool holds (more than it runs: 2,048 slots) and keeps the rest waiting for a place in its running batch,
        # while the prefill keeps up.
        decode_queue = len(decode.waiting) + len(decode.ready)
        if saturated == "prefill":
            assert len(prefill.waiting) > 10 and decode_queue <= 3
        else:
            assert decode_queue > 10 and len(prefill.waiting) <= 3


def test_tcp_instead_of_rdma_adds_the_transfer_time_to_ttft() -> None:
    prompt, output = 4000, 64
    arrivals = capacity.poisson_arrivals(1.0, 30.0, prompt, output, seed=9)  # light load: no queueing
    ttft = {}
    for name, bandwidth in (("rdma", RDMA), ("tcp", sizing.TCP_BYTES_PER_SECOND)):
        outcome = _deploy(1, 1, bandwidth).run(
            [capacity.Request(r.arrival, r.prompt, r.output) for r in arrivals], 40.0, 0.0
        )
        ttft[name] = statistics.median(outcome.ttfts())
    kv_bytes = prompt * LLAMA_3_1_8B.kv_bytes_per_token
    expected = kv_bytes / sizing.TCP_BYTES_PER_SECOND - kv_bytes / RDMA
    assert ttft["tcp"] - ttft["rdma"] == pytest.approx(expected, rel=0.10)
    assert ttft["tcp"] > 2 * ttft["rdma"]
