"""Leader election: the pure decision and records, and `LeaderElector` against a fake Lease API with a fake clock."""

from __future__ import annotations

import copy
import datetime
import itertools
import os
import threading
from collections.abc import Callable
from typing import Any, cast

import pytest

from disaggspec import apply, metrics
from disaggspec.runtime import leader
from disaggspec.runtime.leader import Action, LeaderElector, Observation, decide, observe

NS, NAME = "ops", "disaggspec-operator"
PATH = leader.LEASE.item(NS, NAME)
T0 = datetime.datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=datetime.UTC)


class Clock:
    """A monotonic clock and a wall clock that move together, only when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def wall(self) -> datetime.datetime:
        return T0 + datetime.timedelta(seconds=self.now - 1000.0)

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FakeLeases(apply.Client):
    """The Lease API: GET, POST (409 if present) and PUT (409 on a stale resourceVersion), nothing else."""

    def __init__(self) -> None:  # no ApiClient
        self.lease: dict[str, Any] | None = None
        self.versions = itertools.count(1)
        self.fail: apply.ApiError | None = None
        """Raised by every request while set (an API server that is down or refusing)."""
        self.before_write: Callable[[], None] | None = None
        """Runs once before the next write is checked (another replica writing in between)."""
        self.requests: list[str] = []

    def request(
        self,
        method: str,
        path: str,
        query: dict[str, str] | None = None,
        body: Any = None,
        content_type: str = "",
        accept: str = "application/json",
    ) -> dict[str, Any]:
        self.requests.append(method)
        if self.fail is not None:
            raise self.fail
        if method == "GET":
            assert path == PATH
            if self.lease is None:
                raise apply.ApiError(404, method, path, "not found")
            return copy.deepcopy(self.lease)
        if self.before_write is not None:
            hook, self.before_write = self.before_write, None
            hook()
        if method == "POST":
            assert path == leader.LEASE.collection(NS)
            if self.lease is not None:
                raise apply.ApiError(409, method, path, "already exists")
            return self.store(body)
        assert method == "PUT" and path == PATH, (method, path)
        if self.lease is None:
            raise apply.ApiError(404, method, path, "not found")
        if body["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]:
            raise apply.ApiError(409, method, path, "the object has been modified")
        return self.store(body)

    def store(self, body: dict[str, Any]) -> dict[str, Any]:
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = str(next(self.versions))
        self.lease = stored
        return copy.deepcopy(stored)

    @property
    def spec(self) -> dict[str, Any]:
        assert self.lease is not None
        return dict(self.lease["spec"])


def elector(client: FakeLeases, clock: Clock, identity: str, lost: list[str] | None = None) -> LeaderElector:
    return LeaderElector(
        client,
        NS,
        NAME,
        identity,
        lease_duration=15,
        renew_deadline=10,
        retry_period=2,
        on_lost=None if lost is None else (lambda: lost.append(identity)),
        clock=clock,
        wall_clock=clock.wall,
    )


def lease(holder: str, version: str = "7", duration: int = 15, transitions: int = 2) -> dict[str, Any]:
    return {
        "metadata": {"name": NAME, "namespace": NS, "resourceVersion": version},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration, "leaseTransitions": transitions},
    }


# ---- the pure decision ---------------------------------------------------------------------------------------------


def test_decide_creates_a_missing_lease_and_renews_its_own() -> None:
    assert decide(None, "a", None, 0.0, 15) is Action.CREATE
    assert decide(lease("a"), "a", Observation("7", 0.0), 1e9, 15) is Action.RENEW


def test_decide_takes_a_released_lease_at_once() -> None:
    assert decide(lease(""), "b", Observation("7", 100.0), 100.0, 15) is Action.TAKE_OVER


def test_decide_waits_out_the_lease_duration_from_its_own_first_observation() -> None:
    seen = Observation("7", 100.0)
    assert decide(lease("a"), "b", seen, 114.9, 15) is Action.WAIT
    assert decide(lease("a"), "b", seen, 115.0, 15) is Action.TAKE_OVER
    # The Lease's own duration counts, not the candidate's default.
    assert decide(lease("a", duration=60), "b", seen, 159.0, 15) is Action.WAIT


def test_observe_keeps_the_first_time_a_record_was_seen_and_restarts_on_any_change() -> None:
    first = observe(lease("a", version="7"), None, 100.0)
    assert first == Observation("7", 100.0)
    assert observe(lease("a", version="7"), first, 200.0) is first
    assert observe(lease("a", version="8"), first, 200.0) == Observation("8", 200.0)
    assert observe(None, first, 200.0) is None


def test_records_written_on_create_take_over_renew_and_release() -> None:
    created = leader.acquired(None, NS, NAME, "a", 15, T0)
    assert created["metadata"] == {"name": NAME, "namespace": NS}
    assert created["spec"] == {
        "holderIdentity": "a",
        "leaseDurationSeconds": 15,
        "acquireTime": "2025-01-02T03:04:05.678901Z",
        "renewTime": "2025-01-02T03:04:05.678901Z",
        "leaseTransitions": 0,
    }
    taken = leader.acquired(lease("a"), NS, NAME, "b", 15, T0)
    assert taken["spec"]["holderIdentity"] == "b" and taken["spec"]["leaseTransitions"] == 3
    assert taken["metadata"]["resourceVersion"] == "7"  # the update is conditional on what was read
    assert leader.acquired(lease("b"), NS, NAME, "b", 15, T0)["spec"]["leaseTransitions"] == 2
    later = T0 + datetime.timedelta(seconds=2)
    renewed = leader.renewed(taken, 15, later)
    assert renewed["spec"]["renewTime"] == "2025-01-02T03:04:07.678901Z"
    assert renewed["spec"]["acquireTime"] == taken["spec"]["acquireTime"]
    released = leader.released(renewed, later)
    assert released["spec"]["holderIdentity"] == "" and released["spec"]["leaseTransitions"] == 3
    assert released["spec"]["leaseDurationSeconds"] == 1


def test_timings_must_be_ordered() -> None:
    with pytest.raises(ValueError, match="retry period < renew deadline < lease duration"):
        LeaderElector(FakeLeases(), NS, NAME, "a", lease_duration=10, renew_deadline=10, retry_period=2)


# ---- the elector against the fake API -------------------------------------------------------------------------------


def test_the_first_replica_creates_the_lease_and_leads() -> None:
    client, clock = FakeLeases(), Clock()
    a = elector(client, clock, "a")
    assert not a.is_leader()
    assert a.try_acquire_or_renew()
    assert a.is_leader()
    assert metrics.IS_LEADER._value.get() == 1
    assert client.spec["holderIdentity"] == "a" and client.spec["leaseTransitions"] == 0
    assert client.requests == ["GET", "POST"]


def test_a_standby_waits_while_the_leader_renews_and_takes_over_once_it_stops() -> None:
    client, clock = FakeLeases(), Clock()
    a, b = elector(client, clock, "a"), elector(client, clock, "b")
    assert a.try_acquire_or_renew()
    for _ in range(20):  # 40 s of the leader renewing every 2 s: far beyond one lease duration
        clock.advance(2)
        assert a.try_acquire_or_renew()
        assert not b.try_acquire_or_renew()
    assert a.is_leader() and not b.is_leader()
    # The leader dies: the record stops changing. The standby waits a full lease duration from when it saw it last.
    clock.advance(14)
    assert not b.try_acquire_or_renew()
    clock.advance(1)
    assert b.try_acquire_or_renew()
    assert b.is_leader()
    assert client.spec["holderIdentity"] == "b" and client.spec["leaseTransitions"] == 1


def test_a_replica_started_after_the_leader_died_waits_one_lease_duration() -> None:
    """Skew-proof: the stale renewTime is not compared with this host's clock; the record's age is measured here."""
    client, clock = FakeLeases(), Clock()
    client.lease = lease("dead-pod", version="3")
    b = elector(client, clock, "b")
    assert not b.try_acquire_or_renew()
    clock.advance(14.9)
    assert not b.try_acquire_or_renew()
    clock.advance(0.1)
    assert b.try_acquire_or_renew()
    assert client.spec["holderIdentity"] == "b" and client.spec["leaseTransitions"] == 3


def test_a_released_lease_is_taken_at_the_next_try() -> None:
    client, clock = FakeLeases(), Clock()
    a, b = elector(client, clock, "a"), elector(client, clock, "b")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    a.release()
    assert not a.is_leader() and metrics.IS_LEADER._value.get() == 0
    assert client.spec["holderIdentity"] == ""
    clock.advance(2)
    assert b.try_acquire_or_renew()
    assert client.spec["holderIdentity"] == "b" and client.spec["leaseTransitions"] == 1


def test_release_by_a_standby_writes_nothing() -> None:
    client, clock = FakeLeases(), Clock()
    client.lease = lease("a")
    b = elector(client, clock, "b")
    assert not b.try_acquire_or_renew()
    writes_before = [m for m in client.requests if m != "GET"]
    b.release()
    assert [m for m in client.requests if m != "GET"] == writes_before
    assert client.spec["holderIdentity"] == "a"


def test_of_two_candidates_racing_for_an_expired_lease_only_one_wins() -> None:
    client, clock = FakeLeases(), Clock()
    client.lease = lease("dead-pod", version="3")
    a, b = elector(client, clock, "a"), elector(client, clock, "b")
    assert not a.try_acquire_or_renew() and not b.try_acquire_or_renew()
    clock.advance(15)

    def a_takes_it_first() -> None:  # b read version 3 too, but a's update lands between b's read and b's write
        assert a.try_acquire_or_renew()

    client.before_write = a_takes_it_first
    with pytest.raises(apply.ApiError) as refused:
        b.try_acquire_or_renew()
    assert refused.value.status == 409
    assert a.is_leader() and not b.is_leader()
    assert client.spec["holderIdentity"] == "a"
    assert not b.try_acquire_or_renew()  # next round b sees a fresh record held by a: it waits


def test_a_leader_that_cannot_renew_within_the_deadline_is_lost_once_and_leads_again_while_the_lease_names_it() -> None:
    client, clock = FakeLeases(), Clock()
    lost: list[str] = []
    a = elector(client, clock, "a", lost)
    assert a.try_acquire_or_renew()
    client.fail = apply.ApiError(500, "GET", PATH, "etcd timeout")
    for _ in range(5):
        clock.advance(2)
        with pytest.raises(apply.ApiError):
            a.try_acquire_or_renew()
        a.check_deadline()
    assert lost == [] and a.is_leader()  # 10 s: still within the deadline
    clock.advance(0.5)
    assert not a.is_leader()  # writes stop being authorized before the watchdog even runs
    a.check_deadline()
    a.check_deadline()
    assert lost == ["a"]
    assert metrics.IS_LEADER._value.get() == 0
    client.fail = None
    # The API server is back and the Lease still names a (nobody took over): a leads again at its next round, in
    # the same process, instead of exiting into a restart.
    assert a.try_acquire_or_renew() and a.is_leader()
    assert lost == ["a"] and metrics.IS_LEADER._value.get() == 1


def test_a_lost_leader_whose_lease_was_taken_over_stays_a_standby_and_a_write_in_flight_does_not_lead() -> None:
    client, clock = FakeLeases(), Clock()
    lost: list[str] = []
    a = elector(client, clock, "a", lost)
    b = elector(client, clock, "b", [])
    assert a.try_acquire_or_renew()

    def deadline_passes_during_the_write() -> None:
        clock.advance(11)
        a.check_deadline()

    client.before_write = deadline_passes_during_the_write
    assert not a.try_acquire_or_renew()  # its renewal landed after it had lost: that answer makes no leader
    assert lost == ["a"] and not a.is_leader()
    client.before_write = None
    assert not b.try_acquire_or_renew()  # b sees a's record for the first time: valid, b waits
    clock.advance(16)
    assert b.try_acquire_or_renew()  # unchanged for 16 s as b measured it: expired, taken over
    assert not a.try_acquire_or_renew() and not a.is_leader()  # a waits for b's Lease, campaigning
    assert lost == ["a"]


def test_a_leader_that_finds_another_holder_is_lost_at_once() -> None:
    client, clock = FakeLeases(), Clock()
    lost: list[str] = []
    a = elector(client, clock, "a", lost)
    assert a.try_acquire_or_renew()
    client.store(leader.acquired(client.lease, NS, NAME, "b", 15, clock.wall()))
    clock.advance(2)
    assert not a.try_acquire_or_renew()
    assert lost == ["a"] and not a.is_leader()


def test_the_threads_acquire_wait_until_leader_returns_and_release_hands_over() -> None:
    client = FakeLeases()
    a = LeaderElector(client, NS, NAME, "a", lease_duration=1.5, renew_deadline=1.0, retry_period=0.05)
    a.start()
    done = threading.Event()
    threading.Thread(target=lambda: (a.wait_until_leader(), done.set()), daemon=True).start()
    assert done.wait(5)
    assert a.is_leader()
    first = client.spec["renewTime"]
    for _ in range(100):
        if client.spec["renewTime"] != first:
            break
        threading.Event().wait(0.05)
    assert client.spec["renewTime"] != first, "the leader never renewed"
    a.release()
    assert client.spec["holderIdentity"] == ""
    for thread in a._threads:
        thread.join(5)
        assert not thread.is_alive()


# ---- the entry point's flags -------------------------------------------------------------------------------------


def test_leader_election_flags_and_their_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    from disaggspec import __main__ as entry

    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    args = entry.parse_args([])
    assert not args.leader_elect
    assert (args.leader_election_namespace, args.leader_election_id) == ("default", "disaggspec-operator")
    assert (args.lease_duration_seconds, args.renew_deadline_seconds, args.retry_period_seconds) == (15, 10, 2)
    assert (args.webhook_timeout_seconds, args.health_grace_seconds) == (5, 60)
    monkeypatch.setenv("POD_NAMESPACE", "ops")
    args = entry.parse_args(["--leader-elect", "--webhook-timeout-seconds", "12", "--health-grace-seconds", "30"])
    assert args.leader_elect and args.leader_election_namespace == "ops"
    assert (args.webhook_timeout_seconds, args.health_grace_seconds) == (12, 30)


@pytest.mark.parametrize(
    "bad",
    [
        ["--webhook-timeout-seconds", "31"],
        ["--webhook-timeout-seconds", "0"],
        ["--lease-duration-seconds", "-1"],
        ["--leader-elect", "--renew-deadline-seconds", "20"],
    ],
)
def test_bad_flags_are_refused(bad: list[str]) -> None:
    from disaggspec import __main__ as entry

    with pytest.raises(SystemExit):
        entry.parse_args(bad)


def test_identity_is_the_pod_name_else_host_and_pid(monkeypatch: pytest.MonkeyPatch) -> None:
    from disaggspec import __main__ as entry

    monkeypatch.setenv("POD_NAME", "op-7d9f-abcde")
    assert entry.identity() == "op-7d9f-abcde"
    monkeypatch.delenv("POD_NAME")
    assert entry.identity().endswith(f"_{os.getpid()}")


class _RecordingApi:
    """The two ApiClient calls `apply.Client.request` makes; every request answers 200 with an empty object."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []

    def param_serialize(self, method: str, path: str, **_: Any) -> tuple[str, str, dict[str, str], Any, None]:
        return method, path, {}, None, None

    def call_api(self, method: str, url: str, **_: Any) -> Any:
        self.sent.append((method, url))

        class Response:
            status = 200
            headers: dict[str, str] = {}

            def read(self) -> bytes:
                return b"{}"

        return Response()


def test_a_fenced_client_sends_no_write_unless_its_replica_leads_at_that_moment() -> None:
    api = _RecordingApi()
    leading = [True]
    client = apply.Client(cast(Any, api)).fenced(lambda: leading[0])
    client.request("PATCH", "/apis/apps/v1/namespaces/ns/deployments/d", body={})
    leading[0] = False
    client.request("GET", "/apis/apps/v1/namespaces/ns/deployments/d")  # reads go on: the caches stay warm
    client.request("PATCH", "/apis/apps/v1/namespaces/ns/deployments/d", {"dryRun": "All"}, {})  # persists nothing
    for method in ("PATCH", "POST", "PUT", "DELETE"):
        with pytest.raises(apply.NotLeading):
            client.request(method, "/apis/apps/v1/namespaces/ns/deployments/d", body={})
    assert [method for method, _ in api.sent] == ["PATCH", "GET", "PATCH"]
    assert not isinstance(apply.NotLeading("x"), apply.ApiError)  # never reported as the API server's answer
