"""A running turn's writes fenced by its session lease, through the port, on both
ledgers (ledger/port/fencing.py, `ledger.leases.fenced`): each kind of write a clustered
turn makes, submitted under a taking another attempt has since superseded, changes
nothing in the ledger, fails with `LeaseFenced` and tells its fence; the same write
under the current taking lands."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from core.timers import TimerSpec
from ledger.port.errors import LeaseFenced
from ledger.port.fencing import FENCE, Fence
from ledger.port.protocols import LedgerPort
from ledger.port.records import Limits
from plumbing.ids import new_id
from tests.conformance.records import inbound, ingest, tick, turn
from tests.conformance.test_append_only import raw

pytestmark = pytest.mark.anyio
TTL = 1_000
LIMITS = Limits(max_depth=2, max_children=4, timeout_ms=60_000)


class Session:
    """A session with a turn committed, a second item in a turn cut off mid-run, and
    its lease taken by a first attempt and then, lapsed, by a second."""

    def __init__(self, port: LedgerPort) -> None:
        self.port = port
        self.label = ""
        self.committed = ""  # a committed turn's id
        self.cut_off = ""  # the running turn's id, its item marked running
        self.item = ""
        self.stale = self.current = 0  # the two takings' tokens

    async def set_up(self) -> None:
        port = self.port
        acc = await ingest(port, inbound("m1", text="first"))
        self.label = acc.session
        rec = turn(self.label, None, await port.open_items(self.label), "hi")
        await port.submit_turn(rec).result()
        self.committed = rec.turn_id
        await ingest(port, inbound("m2", text="second"))
        [item] = await port.open_items(self.label)
        self.item, self.cut_off = item.id, new_id()
        await port.submit_mark_running(self.cut_off, [item.id], tick()).result()
        first = await port.take_lease(self.label, "node-a/1#1", 10_000, TTL)
        second = await port.take_lease(self.label, "node-b/1#2", 11_000, TTL)
        assert first.taken and second.taken and second.token > first.token
        self.stale, self.current = first.token, second.token


async def _commit(s: Session) -> Any:
    [item] = await s.port.open_items(s.label)
    rec = turn(s.label, s.committed, [item], "the answer")
    rec.turn_id = s.cut_off
    return await s.port.submit_turn(rec).result()


async def _orphan(s: Session) -> Any:
    [item] = await s.port.open_items(s.label)
    return await s.port.submit_orphan(turn(s.label, None, [item], "lost")).result()


async def _dispatch(s: Session) -> Any:
    return await s.port.dispatch(
        parent=s.label, parent_turn=s.committed, tool_call="call-1",
        target={"kind": "new_session", "label_hint": "w"}, task="count", persona=None,
        limits=LIMITS, now=tick(),
    )  # fmt: skip


# Every kind of write a turn attempt's tasks make (broker/runtime/temporal/activities.py
# `run_items` and what it reaches), each as its caller awaits it.
WRITES: dict[str, Callable[[Session], Awaitable[Any]]] = {
    "recover_crashed": lambda s: s.port.recover_crashed(tick(), session=s.label),
    "mark_running": lambda s: s.port.submit_mark_running(s.cut_off, [s.item], tick()).result(),
    "progress": lambda s: s.port.submit_progress(s.cut_off, s.label, "half", tick()).result(),
    "events": lambda s: s.port.submit_events(
        s.cut_off, s.label, s.committed, 0, [("decision", {"text": "tea"})], tick()
    ).result(),
    "item_status": lambda s: s.port.submit_item_status(
        [(s.item, "dropped", "cap")], tick()
    ).result(),
    "command_done": lambda s: s.port.submit_command_done(
        s.item, "handled", None, False, tick()
    ).result(),
    "new_thread": lambda s: s.port.submit_new_thread(s.label, tick()).result(),
    "commit": _commit,
    "orphan": _orphan,
    "agent_send": _dispatch,
    "timer": lambda s: s.port.add_timer(s.label, TimerSpec("ping", tick() + 60_000, None), tick()),
    "title": lambda s: s.port.set_title(s.committed, "Tea", "engine"),
    "scratchpad": lambda s: s.port.scratchpad_merge(s.label, {"city": "Oslo"}, tick()),
}


@contextlib.contextmanager
def fenced(session: str, token: int, refusals: list[int]) -> Iterator[None]:
    reset = FENCE.set(Fence(session, token, lambda: refusals.append(token)))
    try:
        yield
    finally:
        FENCE.reset(reset)


def everything(conn: Any, backend: str) -> dict[str, list[str]]:
    """Every row of every table but the leases', as text, sorted."""
    if backend == "sqlite":
        names = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'"
                " AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '%fts%'"
            ).fetchall()
        ]
    else:
        names = [
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables"
                " WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'"
            ).fetchall()
        ]
    return {
        name: sorted(repr(tuple(r)) for r in conn.execute(f"SELECT * FROM {name}").fetchall())
        for name in names
        if name != "session_leases"
    }


@pytest.mark.parametrize("write", list(WRITES))
async def test_a_write_under_a_superseded_taking_changes_nothing(
    port: LedgerPort,
    ledger_backend: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    write: str,
) -> None:
    s = Session(port)
    await s.set_up()
    refusals: list[int] = []
    with raw(ledger_backend, tmp_path, request) as conn:
        before = everything(conn, ledger_backend)
        with fenced(s.label, s.stale, refusals), pytest.raises(LeaseFenced):
            await WRITES[write](s)
        await port.settled()
        assert everything(conn, ledger_backend) == before
        assert refusals == [s.stale]
        with fenced(s.label, s.current, refusals):
            await WRITES[write](s)  # the taking that holds the lease writes
        assert everything(conn, ledger_backend) != before
    assert refusals == [s.stale]


async def test_a_release_keeps_the_token_so_its_takings_late_writes_land(
    port: LedgerPort,
) -> None:
    """The release is lazy (the head of the batch it joins): a write of the same taking
    queued before it lands after it, and the next taking fences it out."""
    s = Session(port)
    await s.set_up()
    refusals: list[int] = []
    await port.submit_release_lease(s.label, s.current).result()
    with fenced(s.label, s.current, refusals):
        await port.set_title(s.committed, "Tea", "engine")
    third = await port.take_lease(s.label, "node-c/1#3", 11_100, TTL)
    assert third.taken and third.token > s.current
    with fenced(s.label, s.current, refusals), pytest.raises(LeaseFenced):
        await port.submit_progress(s.cut_off, s.label, "late", tick()).result()
    assert refusals == [s.current]


async def test_a_session_never_leased_fences_every_write(port: LedgerPort) -> None:
    refusals: list[int] = []
    with fenced("dm:nobody", 1, refusals), pytest.raises(LeaseFenced):
        await port.scratchpad_merge("dm:nobody", {"a": 1}, tick())
    assert refusals == [1]


@pytest.mark.postgres
async def test_on_postgres_a_taking_waits_for_a_fenced_write_and_a_renewal_does_not(
    request: pytest.FixtureRequest,
) -> None:
    """The check's key-share lock (migration `lease_fence`): a taking on another node,
    which moves the token on, waits for the checked write's commit; a renewal or a
    release, which change the expiry alone, do not wait."""
    import psycopg

    from ledger import postgres

    dsn = request.getfixturevalue("pg_conformance")
    async with postgres.open(dsn) as port:
        taken = await port.take_lease("s1", "a:1", 10_000, TTL)
    with psycopg.connect(dsn) as writing, psycopg.connect(dsn, autocommit=True) as other:
        other.execute("SET lock_timeout = '300ms'")
        held = writing.execute(
            "SELECT token FROM session_leases WHERE session_label = 's1' FOR KEY SHARE"
        ).fetchone()
        assert held == (taken.token,)  # the fenced write's transaction, still open
        other.execute("UPDATE session_leases SET expires_at = 12000 WHERE session_label = 's1'")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            other.execute("UPDATE session_leases SET token = token + 1 WHERE session_label = 's1'")
        writing.commit()
        other.execute("UPDATE session_leases SET token = token + 1 WHERE session_label = 's1'")
