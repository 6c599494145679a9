"""The live scheduler loop (batching.py) over the capacity model: what a prefill holds until its transfer is over, a
decode pre-allocating only what fits, cancellation giving everything back, and tokens delivered per step. Real
asyncio time at a small time scale, so a step is a few milliseconds; nothing asserts a duration."""

from __future__ import annotations

import asyncio

from e2e.serving.emulator import batching, capacity
from e2e.serving.emulator.profiles import H100_LLAMA_3_1_8B, with_eagle3

FAST = 0.05
"""Time scale: 20 emulated seconds per wall-clock second."""


def _scheduler(role: capacity.Role, pool: int, running: int = 8, spec: bool = False) -> batching.Scheduler:
    profile = with_eagle3(H100_LLAMA_3_1_8B, 3.0, 3, 4) if spec else H100_LLAMA_3_1_8B
    limits = capacity.Limits(max_total_num_tokens=pool, max_running_requests=running, chunked_prefill_size=512)
    return batching.Scheduler([capacity.Server(profile, role, limits, live=True)], time_scale=FAST)


def test_a_prefill_holds_the_kv_until_its_transfer_is_over() -> None:
    async def scenario() -> None:
        sched = _scheduler("prefill", pool=4_000)
        first = sched.submit(0, 1_500, 1)
        second = sched.submit(0, 1_500, 1)
        third = sched.submit(0, 1_500, 1)  # 3 x 1,501 > 4,000: waits for a transfer to end
        for ticket in (first, second):
            assert [size async for size in ticket.sizes()] == [1]
        assert sched.transferring() == 2 and sched.used_tokens() == 2 * 1_501
        await asyncio.sleep(0.05)
        assert sched.queued() == 1 and third.tokens.empty()
        sched.release(first)
        assert [size async for size in third.sizes()] == [1]  # chunked: 512 + 512 + 476
        assert sched.servers[0].steps >= 4
        for ticket in (second, third):
            sched.release(ticket)
        assert sched.used_tokens() == 0
        await sched.stop()

    asyncio.run(scenario())


def test_a_decode_preallocates_what_fits_and_streams_per_step() -> None:
    async def scenario() -> None:
        sched = _scheduler("decode", pool=3_100, spec=True)
        big = sched.submit(0, 1_000, 20)
        small = sched.submit(0, 1_000, 20)
        blocked = sched.submit(0, 1_000, 20)  # 3 x (1,000 + 512 reserved) > 3,100
        await asyncio.wait_for(small.allocated.wait(), 2)
        assert big.allocated.is_set() and not blocked.allocated.is_set()
        assert sched.transferring() == 2 and sched.preallocating() == 1
        sched.kv_arrived(big)
        sizes = [size async for size in big.sizes()]
        assert sum(sizes) == 20 and set(sizes) == {3, 2} and len(sizes) == 7  # accept length 3: 3 x 6 + 2
        assert big.req.steps == 7
        await asyncio.wait_for(blocked.allocated.wait(), 2)  # the finished request's KV came back
        sched.cancel(small)
        sched.cancel(blocked)
        assert [size async for size in small.sizes()] == []
        assert sched.used_tokens() == 0 and sched.transferring() == 0
        await sched.stop()

    asyncio.run(scenario())


def test_running_requests_share_one_step_and_the_loop_counts_its_lag() -> None:
    async def scenario() -> None:
        sched = _scheduler("decode", pool=100_000, running=4)
        tickets = [sched.submit(0, 100, 10) for _ in range(6)]
        for group in (tickets[:4], tickets[4:]):  # 4 request slots: the last two are pre-allocated when 4 finish
            await asyncio.wait_for(asyncio.gather(*(t.allocated.wait() for t in group)), 2)
            for ticket in group:
                sched.kv_arrived(ticket)
        await asyncio.gather(*(_drain(t) for t in tickets))
        server = sched.servers[0]
        # 4 run at once (max_running_requests), the other two after them: 10 steps, then 10 more.
        assert server.steps == 20
        assert sched.busy_seconds > 0 and sched.lag_seconds >= 0
        assert sched.report()["ranks"][0]["steps"] == 20  # type: ignore[index]
        await sched.stop()

    asyncio.run(scenario())


async def _drain(ticket: batching.Ticket) -> None:
    async for _ in ticket.sizes():
        pass
