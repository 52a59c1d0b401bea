"""Events are append-only (migration `append_only_events_idle_close`): a message, a
tool call or a turn event, once written, is never changed, on either ledger.

The triggers refuse any change but the forgetting's redaction of a message's content,
whoever writes; the random sequences check that no port call short of forgetting a
person, expiring turns or deleting a library session (the steps of
test_port_differential.py, and closing, export and import, and the library's other
writes) changes or removes an event row that was there before it.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.engine_types import ToolCall
from ledger.port.cipher import IntegrityError
from ledger.port.protocols import LedgerPort
from ledger.sqlite.store import Ledger
from tests import ledger_db
from tests.conformance import test_port_differential as diff
from tests.conformance.records import inbound, ingest, turn

# Each event table, its columns and its key (what names one row on one ledger).
TABLES = {
    "messages": ("id, turn_id, seq, role, channel, msg_id, item_id, sender_id, content,"
                 " tokens, created_at", 1),
    "tool_calls": ("id, turn_id, seq, name, arguments, result, status, spawned_session,"
                   " created_at", 1),
    "turn_events": ("turn_id, seq, session_label, type, payload, created_at", 2),
}  # fmt: skip
CHANGES = [
    "UPDATE turn_events SET payload = '{}'",
    "UPDATE turn_events SET type = 'error'",
    "UPDATE tool_calls SET result = 'changed'",
    "UPDATE messages SET content = 'changed'",
    "UPDATE messages SET content = '[erased]', role = 'system'",
    "UPDATE messages SET sender_id = 'someone else'",
]
Snapshot = dict[str, dict[tuple[Any, ...], tuple[Any, ...]]]


@contextlib.contextmanager
def raw(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A plain connection to the ledger the `port` fixture opened, beside its writer."""
    if backend == "sqlite":
        conn = ledger_db.connect(tmp_path / "ledger.db", timeout=10, isolation_level=None)
        try:
            yield conn
        finally:
            conn.close()
    else:
        import psycopg

        with psycopg.connect(request.getfixturevalue("pg_conformance"), autocommit=True) as pg:
            yield pg


def refused(backend: str) -> type[Exception] | tuple[type[Exception], ...]:
    if backend == "sqlite":
        return IntegrityError  # either driver's
    import psycopg

    return psycopg.errors.RaiseException


def snapshot(conn: Any) -> Snapshot:
    out: Snapshot = {}
    for table, (columns, key) in TABLES.items():
        rows = conn.execute(f"SELECT {columns} FROM {table}").fetchall()
        out[table] = {tuple(r[:key]): tuple(r) for r in rows}
    return out


async def a_turn_with_everything(port: LedgerPort) -> str:
    acc = await ingest(port, inbound("m1", text="the person's words"))
    rec = turn(acc.session, None, await port.open_items(acc.session), "the reply")
    rec.tool_calls.append(ToolCall(f"{rec.turn_id}-c0", "read_file", '{"path": "a"}', "x", "ok"))
    rec.events.append(("decision", {"text": "use tea"}))
    await port.submit_turn(rec).result()
    return acc.session


@pytest.mark.anyio
async def test_a_change_to_an_event_is_refused_but_the_redaction_of_a_message(
    port: LedgerPort, ledger_backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    await a_turn_with_everything(port)
    with raw(ledger_backend, tmp_path, request) as conn:
        before = snapshot(conn)
        assert all(before.values())  # a message, a tool call and events to change
        for sql in CHANGES:
            with pytest.raises(refused(ledger_backend), match="append-only"):
                conn.execute(sql)
        assert snapshot(conn) == before
        # The forgetting of a person (ledger/erasure.py) redacts a message's content.
        conn.execute("UPDATE messages SET content = '[erased]' WHERE role = 'user'")
        after = snapshot(conn)
    redacted = {k: r for k, r in before["messages"].items() if r[3] == "user"}
    assert redacted
    for key, row in before["messages"].items():
        expected = (*row[:8], "[erased]", *row[9:]) if key in redacted else row
        assert after["messages"][key] == expected
    assert (after["tool_calls"], after["turn_events"]) == (
        before["tool_calls"],
        before["turn_events"],
    )


def kept(before: Snapshot, now: Snapshot) -> str | None:
    """The first event row of `before` changed or gone in `now`, named; else None."""
    for table, rows in before.items():
        for key, row in rows.items():
            if now[table].get(key) != row:
                return f"{table} {key}: {row} became {now[table].get(key)}"
    return None


async def step_close(t: diff.Twin, data: st.DataObject) -> None:
    if t.model.sessions:
        session = data.draw(st.sampled_from(t.model.sessions))
        summary = data.draw(st.sampled_from([None, "done"]))
        now = t.now()
        await t.both(
            f"close {session}",
            lambda port, ids: port.close_session(ids.raw(session), summary, now),
        )


async def step_export_import(t: diff.Twin, data: st.DataObject) -> None:
    if t.model.sessions:
        session = data.draw(st.sampled_from(t.model.sessions))
        now = t.now()

        async def copy(port: LedgerPort, ids: diff.Ids) -> Any:
            lines = await port.export_session(ids.raw(session), now)
            return await port.import_session([orjson.dumps(ln) for ln in lines], None, now)

        made = await t.both(f"export and import {session}", copy)
        if isinstance(made, (list, tuple)):
            t.model.add(t.model.sessions, made[0])


async def step_library_writes(t: diff.Twin, data: st.DataObject) -> None:
    session = data.draw(st.sampled_from(["lib-1", "lib-2"]))
    call = data.draw(st.sampled_from(["put", "set_title", "compact", "end"]))
    args: dict[str, Any] = {"session": session}
    if call == "put":
        args["turns"] = [["a", {"k": 1}], ["b"]]
    elif call == "set_title":
        args["title"] = "T"
    elif call == "compact":
        args.update(summary=["so far"], turns=1)
    now = t.now()
    await t.both(f"library {call} {args}", lambda port, ids: port.library_call(call, args, now))


# The writes this file adds are drawn about as often as a turn.
STEPS = [*diff.STEP_KINDS, *[step_close] * 3, step_export_import, *[step_library_writes] * 2]


async def run_example(sqlite_path: Path, dsn: str, data: st.DataObject) -> None:
    import psycopg

    from ledger import postgres
    from ledger.postgres import devcluster

    devcluster.empty_database(dsn)
    async with (
        Ledger.open(sqlite_path, writer="thread", check_s=0) as sqlite,
        postgres.open(dsn) as pg,
    ):
        twin = diff.Twin(sqlite, pg)
        lite = ledger_db.connect(sqlite_path, timeout=10, isolation_level=None)
        try:
            with psycopg.connect(dsn, autocommit=True) as pg_raw:
                before = (snapshot(lite), snapshot(pg_raw))
                for first in (diff.step_ingest, diff.step_turn):  # some events to keep
                    await first(twin, data)
                for _ in range(data.draw(st.integers(1, diff.STEPS), label="steps")):
                    step = data.draw(st.sampled_from(STEPS), label="step")
                    await step(twin, data)
                    now = (snapshot(lite), snapshot(pg_raw))
                    for side, was, is_ in zip(("sqlite", "postgres"), before, now, strict=True):
                        lost = kept(was, is_)
                        assert lost is None, f"{side}: {lost}\n" + "\n".join(twin.log)
                    before = now
        finally:
            lite.close()


@pytest.mark.postgres
@pytest.mark.timeout(300)
@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_no_port_call_changes_or_removes_an_event(
    pg_conformance_db: str, data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory(prefix="append-only-") as tmp:
        anyio.run(run_example, Path(tmp) / "ledger.db", pg_conformance_db, data)
