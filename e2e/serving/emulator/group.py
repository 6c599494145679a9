"""A multi-node server's group (`--nnodes N --node-rank R --dist-init-addr HOST:PORT`): the rendezvous of its nodes
and the loss of one of them.

What SGLang does (both releases). Every node runs its own schedulers; each scheduler's model runner joins one
torch.distributed group through `tcp://<dist-init-addr>` (0.5.2 model_executor/model_runner.py:619-656; 0.5.23 the
same through distributed/bootstrap.py:241-243): node rank 0 hosts the TCPStore on the address's port, the other
nodes connect to it (retrying while the host does not resolve or refuses), and nobody goes on before every rank has
joined. Only then do they load the model; a node with rank >= 1 runs no tokenizer and no HTTP API. Once serving,
the rank-0 scheduler broadcasts what it receives to every TP rank, on every iteration of its loop (0.5.2
managers/scheduler.py:1094-1099; 0.5.23 managers/scheduler_components/request_receiver.py:204-210): when a node is
lost that collective (or NCCL's watchdog) fails, the scheduler logs `Scheduler hit an exception` and SIGQUITs its
server, which kills its own process tree (0.5.2 entrypoints/engine.py:695-699; 0.5.23 engine.py:1976-1982). So a
lost peer kills the server on every surviving node, the leader included.

What the emulator does instead (**not SGLang's wire format**): one TCP connection per node (standing for the node's
tp_size / nnodes ranks), to `--bind:PORT` of the leader, with a line protocol:

    worker -> leader   rank <R> nnodes <N>
    leader -> worker   ok                      registered
                       error <reason>          refused (rank out of range or already in the group, other N); closed
                       start                   every node has joined (the rendezvous is over)
                       shutdown                0.5.23's ShutdownReq broadcast after the leader's SIGTERM drain
                                               (tokenizer_manager.py:3547, engine.py:1261-1263): exit 0

End of file on either side is a lost peer: the survivor dies like a scheduler whose collective failed (the real
failure is a NCCL/gloo error or NCCL's watchdog timeout, which the emulator shortens to an immediate crash).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from e2e.serving.clusterdns import lookup, parse_pod_name
from e2e.serving.kubeapi import ApiError, KubeApi

log = logging.getLogger("emulator.group")

RETRY_SECONDS: Final = 1.0
"""How often a worker tries again to resolve and reach its leader."""
HELLO_TIMEOUT: Final = 10.0
"""The leader drops a connection that does not say `rank R nnodes N` within this time."""
LOG_EVERY: Final = 30.0
_THIS_POD: Final = ("localhost", "127.0.0.1", "::1")


class GroupError(Exception):
    """The leader refused this node; the message is its reason."""


@dataclass(frozen=True)
class GroupAddress:
    host: str
    port: int


def parse_dist_init_addr(value: str) -> GroupAddress:
    """`host:port` or `[ipv6]:port` (0.5.2 server_args.py:2623-2633 splits it the same way); ValueError otherwise."""
    if value.startswith("["):
        host, sep, port = value[1:].partition("]:")
    else:
        host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"--dist-init-addr {value!r}: expected host:port")
    return GroupAddress(host, int(port))


class Resolver:
    """How a worker finds its leader's address, at each attempt (as a real node's resolver is asked again):

    - an IP literal is itself, except 127.0.0.1/::1 (and `localhost`), which inside a pod mean that pod: `bind`;
    - a pod hostname record (`<hostname>.<subdomain>.<namespace>[.svc[.cluster.local]]`) goes to the cluster-DNS
      stand-in (`e2e.serving.clusterdns`), which reads the API server with `kubeconfig` (given by the pod runner);
    - any other name goes to this machine's resolver.
    None means "does not resolve (yet)"."""

    def __init__(self, bind: str, namespace: str | None, kubeconfig: str | None) -> None:
        self.bind, self.namespace, self.kubeconfig = bind, namespace or "default", kubeconfig
        self._api: KubeApi | None = None

    async def resolve(self, host: str) -> str | None:
        if host.lower() in _THIS_POD:
            return self.bind
        with contextlib.suppress(ValueError):
            return str(ipaddress.ip_address(host))
        name = parse_pod_name(host, self.namespace)
        if name is not None and self.kubeconfig:
            return await asyncio.to_thread(self._lookup, host)
        return await asyncio.to_thread(self._system, host)

    def _lookup(self, host: str) -> str | None:
        name = parse_pod_name(host, self.namespace)
        assert name is not None and self.kubeconfig
        try:
            if self._api is None:
                self._api = KubeApi(Path(self.kubeconfig))
            addresses = lookup(self._api, name)
        except (ApiError, OSError, ValueError) as error:
            log.debug("cluster DNS stand-in: %s: %s", host, error)
            return None
        return addresses[0] if addresses else None

    @staticmethod
    def _system(host: str) -> str | None:
        try:
            infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        except OSError:
            return None
        return str(infos[0][4][0]) if infos else None


class GroupLeader:
    """Node rank 0: the rendezvous point. `complete` is set once every other node has registered; `on_lost(rank,
    why)` is called when a registered node's connection ends (unless the leader itself is closing)."""

    def __init__(self, bind: str, port: int, nnodes: int, on_lost: Callable[[int, str], None]) -> None:
        self.bind, self.port, self.nnodes, self.on_lost = bind, port, nnodes, on_lost
        self.members: dict[int, asyncio.StreamWriter] = {}
        self.complete = asyncio.Event()
        self.closing = False
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self.bind, self.port, reuse_address=True)
        log.info(
            "node rank 0: group rendezvous on %s:%d, waiting for %d node(s)", self.bind, self.port, self.nnodes - 1
        )

    def _refusal(self, line: str) -> tuple[int, str | None]:
        words = line.split()
        if len(words) != 4 or words[0] != "rank" or words[2] != "nnodes" or not all(w.isdigit() for w in words[1::2]):
            return -1, f"expected `rank R nnodes N`, got {line[:80]!r}"
        rank, nnodes = int(words[1]), int(words[3])
        if nnodes != self.nnodes:
            return rank, f"node rank {rank} says nnodes {nnodes}, the leader has {self.nnodes}"
        if not 1 <= rank < self.nnodes:
            return rank, f"node rank {rank} is not in 1..{self.nnodes - 1}"
        if rank in self.members:
            return rank, f"node rank {rank} has already joined"
        return rank, None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peername = writer.get_extra_info("peername") or ("?", 0)
        peer = f"{peername[0]}:{peername[1]}"
        rank = -1
        try:
            try:
                hello = (await asyncio.wait_for(reader.readline(), HELLO_TIMEOUT)).decode(errors="replace").strip()
            except (TimeoutError, OSError):
                return
            if self.closing or not hello:
                return  # a bare connection (a TCP probe, a port scan) says nothing: nothing to refuse
            rank, refusal = self._refusal(hello)
            if refusal is not None:
                log.error("node rank 0: refused %s: %s", peer, refusal)
                writer.write(f"error {refusal}\n".encode())
                await writer.drain()
                rank = -1
                return
            self.members[rank] = writer
            writer.write(b"ok\n")
            log.info("node rank %d joined from %s (%d of %d nodes)", rank, peer, len(self.members) + 1, self.nnodes)
            if len(self.members) == self.nnodes - 1:
                log.info("node rank 0: every node has joined the group")
                self.complete.set()
                for member in self.members.values():
                    member.write(b"start\n")
            await writer.drain()
            while await reader.readline():
                pass  # nothing more is expected from a worker; end of file is the news
        except OSError:
            pass
        finally:
            lost = rank >= 0 and self.members.get(rank) is writer
            if lost:
                del self.members[rank]
            writer.close()
            if lost and not self.closing:
                self.on_lost(rank, f"the connection of node rank {rank} (from {peer}) was lost")

    async def stop(self, shutdown: bool) -> None:
        """Close the group; with `shutdown`, first tell every node to exit (0.5.23's ShutdownReq broadcast)."""
        self.closing = True
        if self._server is not None:
            self._server.close()
        for writer in list(self.members.values()):
            with contextlib.suppress(OSError):
                if shutdown:
                    writer.write(b"shutdown\n")
                    await asyncio.wait_for(writer.drain(), 2)
            writer.close()
        self.members.clear()


class GroupMember:
    """A node with rank >= 1: joined to its leader (`join`), then told when the group starts and when it ends."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, leader: str) -> None:
        self.reader, self.writer, self.leader = reader, writer, leader

    @classmethod
    async def join(
        cls,
        address: GroupAddress,
        rank: int,
        nnodes: int,
        resolve: Callable[[str], Awaitable[str | None]],
        bind: str | None = None,
    ) -> GroupMember:
        """Resolve the leader's host and connect from `bind` (this pod's IP), again every RETRY_SECONDS until it
        answers; raises GroupError when the leader refuses this node."""
        last_said, last_problem = 0.0, ""
        while True:
            problem = ""
            ip = await resolve(address.host)
            if ip is None:
                problem = f"{address.host} does not resolve (yet)"
            else:
                try:
                    local = (bind, 0) if bind else None
                    connecting = asyncio.open_connection(ip, address.port, local_addr=local)
                    reader, writer = await asyncio.wait_for(connecting, 5)
                except (OSError, TimeoutError) as error:
                    problem = f"cannot connect to {address.host} ({ip}:{address.port}): {error or 'timed out'}"
                else:
                    try:
                        writer.write(f"rank {rank} nnodes {nnodes}\n".encode())
                        await writer.drain()
                        answer = (await asyncio.wait_for(reader.readline(), HELLO_TIMEOUT)).decode().strip()
                    except (OSError, TimeoutError) as error:
                        answer, problem = "", f"{ip}:{address.port} did not answer: {error or 'timed out'}"
                    if answer == "ok":
                        log.info("node rank %d: joined the group at %s (%s:%d)", rank, address.host, ip, address.port)
                        return cls(reader, writer, f"{ip}:{address.port}")
                    writer.close()
                    if answer.startswith("error "):
                        raise GroupError(answer[len("error ") :])
                    problem = problem or f"{ip}:{address.port} closed the connection"
            now = time.monotonic()
            if problem != last_problem or now - last_said >= LOG_EVERY:
                log.warning("node rank %d: waiting for the group's rendezvous: %s; retrying", rank, problem)
                last_said, last_problem = now, problem
            await asyncio.sleep(RETRY_SECONDS)

    async def wait_start(self) -> bool:
        """Wait until every node has joined; False when the leader was lost first."""
        return (await self._next()) == "start"

    async def wait_end(self) -> str:
        """Wait for the end of the group: "shutdown" (the leader said so) or "lost" (its connection ended)."""
        while True:
            line = await self._next()
            if line in ("shutdown", "lost"):
                return line

    async def _next(self) -> str:
        try:
            line = await self.reader.readline()
        except OSError:
            return "lost"
        return line.decode(errors="replace").strip() if line else "lost"

    def close(self) -> None:
        self.writer.close()
