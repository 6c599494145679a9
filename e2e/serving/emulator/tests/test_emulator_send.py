"""The decode's metadata send to the prefill rank fails like SGLang's ZMQ push: only when no peer takes it (a refused
connect, 0.5.23's send timeout), never because a loaded prefill answers late; the heartbeat judges a slow prefill."""

from __future__ import annotations

import asyncio
import dataclasses
import socket

import pytest
from aiohttp import web

from e2e.serving.emulator import pd
from e2e.serving.emulator.engine import Engine
from e2e.serving.emulator.facts import Version, facts_for
from e2e.serving.emulator.options import parse_options
from e2e.serving.emulator.sglang_args import server_config
from e2e.serving.emulator.tests.harness import sglang_args

VERSIONS: tuple[Version, ...] = ("0.5.2", "0.5.23")


def _decode(version: Version, heartbeat_interval: float) -> Engine:
    cfg = server_config(version, sglang_args("decode"))
    options = parse_options(["capacity=off"])
    timeouts = dataclasses.replace(
        pd.Timeouts.from_env(), heartbeat_interval=heartbeat_interval, heartbeat_max_failure=1
    )
    return Engine(cfg, options, facts_for(version), bind="127.0.0.1", pod_name="decode-0", timeouts=timeouts)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _send_to_a_prefill_answering_after(version: Version, delay: float, heartbeat_interval: float) -> bytes | None:
    async def answer(request: web.Request) -> web.Response:
        await asyncio.sleep(delay)
        return web.json_response({"prefill_revision": "r1"})

    app = web.Application()
    app.router.add_post("/room", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    engine = _decode(version, heartbeat_interval)
    try:
        return await engine._send_metadata(f"http://127.0.0.1:{port}/room", {"rid": "r"})
    finally:
        await engine.close()
        await runner.cleanup()


def test_a_prefill_answering_after_5_s_is_received_not_a_failed_send() -> None:
    # 5.5 s of answer delay stands for a loaded prefill's event loop (the emulator used to fail the send after 5 s:
    # 88 requests of a saturated run). SGLang's push returns at once and the prefill reads the message when it gets
    # to it, so the send does not fail while the heartbeat's patience (here 10 s) lasts.
    answered = asyncio.run(_send_to_a_prefill_answering_after("0.5.23", 5.5, heartbeat_interval=10.0))
    assert answered is not None and b"prefill_revision" in answered


@pytest.mark.parametrize("version", VERSIONS)
def test_an_answer_later_than_the_heartbeat_leaves_the_prefill_to_the_heartbeat(version: Version) -> None:
    # No answer within one heartbeat's patience: the send stands (b""), and _wait_for_transfer's heartbeat decides.
    assert asyncio.run(_send_to_a_prefill_answering_after(version, 1.0, heartbeat_interval=0.3)) == b""


@pytest.mark.parametrize(("version", "expected"), [("0.5.2", b""), ("0.5.23", None)])
def test_a_refused_connect_fails_the_send_on_0_5_23_only(version: Version, expected: bytes | None) -> None:
    # 0.5.23: no peer takes the push within ZMQ_SNDTIMEO, a ZMQError, and the request fails (common/conn.py:2818-2837).
    # 0.5.2 sets no send timeout and has no failure path there; its heartbeat notices the dead prefill.
    async def send() -> bytes | None:
        engine = _decode(version, heartbeat_interval=2.0)
        try:
            return await engine._send_metadata(f"http://127.0.0.1:{_closed_port()}/room", {"rid": "r"})
        finally:
            await engine.close()

    assert asyncio.run(send()) == expected
