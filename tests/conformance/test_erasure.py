"""`entity.erase` through the port: the person, every entity merged with them, their
sessions with forks and workers, and their words in groups, gone from every read
and, on SQLite, from the bytes of the ledger and its WAL."""

from __future__ import annotations

from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import anyio
import pytest

from core.bindings import Conversation
from core.identity import SessionSpec
from core.timers import TimerSpec
from ledger.port.erasure import ErasureRunning
from ledger.port.errors import Invalid, NotFound
from ledger.port.protocols import InboundRecord, LedgerPort, Request
from ledger.port.records import Limits
from ledger.sqlite.store import Ledger
from plumbing.ids import new_id
from tests.conformance.records import DM, inbound, tick, turn

pytestmark = pytest.mark.anyio
GROUP = SessionSpec("group:{channel}:{peer}", None)


def group_message(msg_id: str, sender: str, text: str) -> InboundRecord:
    return InboundRecord(
        "chat", msg_id, sender, sender.title(), "group", "room1", None, text, None, None, None
    )


async def say(
    port: LedgerPort, rec: InboundRecord, spec: SessionSpec = DM, answer: str = "ok"
) -> tuple[str, str, str | None]:
    """Ingest `rec` and run its turn: (session, turn, entity)."""
    acc = await port.submit_inbound(rec, spec, tick()).result()
    head = (await port.session_start(acc.session)).start.head
    done = turn(acc.session, head, await port.open_items(acc.session), answer)
    if spec is DM:  # the person's own file, in their own session
        content = f"{rec.text}\n"
        done.events = [("file", {"path": "notes.txt", "op": "write", "content": content})]
    await port.submit_turn(done).result()
    return acc.session, done.turn_id, acc.entity


def raw_bytes(path: Path) -> bytes:
    """The ledger file, its WAL and whatever else lies beside it."""
    return b"".join(p.read_bytes() for p in sorted(path.parent.glob(path.name + "*")))


def pg_table_bytes(request: pytest.FixtureRequest) -> bytes:
    """The test cluster's table files after a CHECKPOINT (not its WAL: docs/forgetting.md)."""
    import psycopg

    cluster = request.getfixturevalue("pg_template")[0]
    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute("CHECKPOINT")
    return b"".join(
        p.read_bytes() for p in sorted((cluster.data / "base").rglob("*")) if p.is_file()
    )


def pg_analyze(request: pytest.FixtureRequest) -> None:
    """ANALYZE the suite's database, as autovacuum does by itself some time: it copies
    sample values of the columns it gathers statistics of into the catalog."""
    import psycopg

    with psycopg.connect(request.getfixturevalue("pg_conformance_db"), autocommit=True) as conn:
        conn.execute("ANALYZE")


# The types whose values a person may have written (PG migration 0020).
TEXT_TYPES = ("text", "character varying", "character", "json", "jsonb", "bytea")


@pytest.mark.postgres
def test_no_text_column_of_the_ledger_keeps_planner_statistics(
    pg_conformance: str,
) -> None:
    """A column added later without a statistics target of 0 fails here, by name. The
    messages' words keep theirs, for the search's plan; an erasure or expiry gathers
    them again and rewrites the catalog (the erasure test below, and the expiry's in
    test_retention.py)."""
    import psycopg

    with psycopg.connect(pg_conformance) as conn:
        targets = conn.execute(
            "SELECT c.relname || '.' || a.attname, a.attstattarget = 0 FROM pg_attribute a"
            " JOIN pg_class c ON c.oid = a.attrelid"
            " WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p')"
            " AND a.attnum > 0 AND NOT a.attisdropped"
            " AND format_type(a.atttypid, NULL) = ANY(%s) ORDER BY 1",
            ([*TEXT_TYPES, "tsvector"],),
        ).fetchall()
    gathered = [name for name, off in targets if not off]
    assert gathered == ["messages.words"]
    assert ("messages.content", True) in targets and len(targets) > 150


async def test_erase_forgets_the_person_and_keeps_everyone_else(
    port: LedgerPort, ledger_backend: str, request: pytest.FixtureRequest
) -> None:
    marker = f"zqx{new_id().lower()}"
    alice, a_turn, alice_ent = await say(port, inbound("a1", "alice", f"my secret {marker}"))
    _, _, alias_ent = await say(port, inbound("a2", "alice2", f"other phone {marker}"))
    assert alice_ent is not None and alias_ent is not None
    await port.merge_entities(alias_ent, alice_ent, tick())
    fork = await port.fork(a_turn, None, tick())
    bob, _, _ = await say(port, inbound("b1", "bob", "bob talks about herons"), answer="herons!")
    group, g_turn, _ = await say(port, group_message("g1", "alice", f"group {marker}"), GROUP)
    await say(port, group_message("g2", "bob", "bob in the group"), GROUP)
    before_bob = await port.session_show(bob, 100)
    assert [h.session for h in await port.recall_search(marker, None, 10)]

    path = port.path if isinstance(port, Ledger) and port.backend == "sqlite" else None
    if path is not None:  # the search below finds what is there
        assert marker[-16:].encode() in raw_bytes(path)
    if ledger_backend == "postgres":
        pg_analyze(request)
        assert marker.encode() in pg_table_bytes(request)
    counts = await port.erase_entity(alice_ent, alice_ent, tick())
    assert counts["sessions"] >= 2 and counts["messages"] >= 3 and counts["files"] >= 2

    assert await port.recall_search(marker, None, 10) == []
    for label in (alice, fork):
        with pytest.raises(NotFound):
            await port.session_show(label, 100)
    for sender in ("alice", "alice2"):
        with pytest.raises(NotFound):
            await port.contact_show("chat", sender)
    listed = {s["label"] for s in await port.sessions_list(None, 100)}
    assert alice not in listed and fork not in listed and {bob, group} <= listed
    shown = await port.session_show(group, 100)
    assert [t["title"] for t in shown["turns"]] == [None, "bob in the group"]
    said = str(await port.recall(Request("range", group, 10, around_turn=g_turn, context_turns=2)))
    assert marker not in said and "[erased]" in said and "bob in the group" in said
    assert await port.session_show(bob, 100) == before_bob
    assert (await port.file_at(bob, "notes.txt", None))["content"] == "bob talks about herons\n"
    # A new message from one of their senders starts a new entity.
    _, _, again = await say(port, inbound("a3", "alice", "hello again"))
    assert again is not None and again not in (alice_ent, alias_ent)
    if path is not None:
        data = raw_bytes(path)
        assert marker.encode() not in data
        assert marker[-16:].encode() not in data  # FTS5 keeps terms by prefix
    if ledger_backend == "postgres":
        assert marker.encode() not in pg_table_bytes(request)


async def test_erase_refuses_bad_input_and_changes_nothing(port: LedgerPort) -> None:
    alice, _, ent = await say(port, inbound("a1", "alice", "hello"))
    assert ent is not None
    with pytest.raises(NotFound):
        await port.erase_entity("ent_nobody", "ent_nobody", tick())
    with pytest.raises(Invalid):
        await port.erase_entity(ent, "ent_other", tick())
    assert (await port.contact_show("chat", "alice"))["entity"] == ent
    assert (await port.session_show(alice, 10))["label"] == alice


async def test_one_erasure_at_a_time_and_a_cut_off_one_resumes(port: LedgerPort) -> None:
    _, _, alice = await say(port, inbound("a1", "alice", "alice words"))
    bob_session, _, bob = await say(port, inbound("b1", "bob", "bob words"))
    assert alice is not None and bob is not None

    with anyio.CancelScope() as stopped:

        async def cut_off(sessions: list[str]) -> None:
            with pytest.raises(ErasureRunning):
                await port.erase_entity(bob, bob, tick())
            stopped.cancel()  # the daemon stops here
            await anyio.sleep(1)

        await port.erase_entity(alice, alice, tick(), cut_off)
    assert stopped.cancelled_caught
    with pytest.raises(NotFound):
        await port.contact_show("chat", "alice")  # marked: already cut off
    resumed = await port.resume_erasure()
    assert resumed is not None and resumed["entity"] == alice and resumed["sessions"] == 1
    assert await port.resume_erasure() is None
    assert await port.recall_search("alice", None, 10) == []
    await port.erase_entity(bob, bob, tick())
    with pytest.raises(NotFound):
        await port.session_show(bob_session, 10)


async def nothing_of(marker: str, read: Awaitable[Any]) -> Any:
    """`read`'s answer, asserted to hold no word of `marker`'s; None for not_found."""
    try:
        found = await read
    except NotFound:
        return None
    assert marker not in repr(found)
    return found


async def test_from_the_mark_on_no_read_returns_anything_of_theirs(port: LedgerPort) -> None:
    """Between the mark and the last step (paused in `marked`), every read already
    treats the person as gone; everyone else reads what they read before."""
    marker = f"zqx{new_id().lower()}"
    alice, a_turn, alice_ent = await say(port, inbound("a1", "alice", f"my secret {marker}"))
    assert alice_ent is not None
    fork = await port.fork(a_turn, None, tick())
    bob, _, _ = await say(port, inbound("b1", "bob", "bob talks about herons"), answer="herons!")
    group, g_turn, _ = await say(port, group_message("g1", "alice", f"group {marker}"), GROUP)
    _, b_turn, _ = await say(port, group_message("g2", "bob", "bob in the group"), GROUP)
    before_bob = await port.session_show(bob, 100)
    assert marker in repr(await port.session_show(alice, 100))  # the reads below see it
    assert marker in repr(await port.export_session(group, tick()))
    checked: list[str] = []

    async def paused(sessions: list[str]) -> None:
        assert set(sessions) == {alice, fork}
        for label in (alice, fork):
            for read in (
                port.session_show(label, 100),
                port.console_session(label, 100),
                port.export_session(label, tick()),
                port.file_at(label, "notes.txt", None),
                port.library_call("get", {"session": label}, tick()),
                port.library_call("items", {"session": label}, tick()),
                port.library_call("export", {"session": label}, tick()),
            ):
                assert await nothing_of(marker, read) is None
            for listing in (
                port.file_list(label),
                port.events_query(kind=None, session=label, turn=None, text=None, limit=100),
                port.list_threads(label),
                port.list_timers(label),
                port.workers_list(label, None),
                port.scratchpad_get(label),
            ):
                assert not await nothing_of(marker, listing)
        assert await nothing_of(marker, port.console_turn(alice, a_turn)) is None
        assert await nothing_of(marker, port.entity_show(alice_ent)) is None
        assert await nothing_of(marker, port.contact_show("chat", "alice")) is None
        assert await port.recall_search(marker, None, 10) == []
        assert await port.recall_hint_terms(group, (marker,), ()) == []
        for lists in (
            port.sessions_list(None, 100),
            port.console_sessions(100, 0),
            port.library_call("list", {}, tick()),
        ):
            assert alice not in repr(await nothing_of(marker, lists))
        shown = await nothing_of(marker, port.session_show(group, 100))
        assert [t["title"] for t in shown["turns"]] == [None, "bob in the group"]
        said = str(
            await nothing_of(
                marker,
                port.recall(Request("range", group, 10, around_turn=g_turn, context_turns=2)),
            )
        )
        assert "[erased]" in said and "bob in the group" in said
        exported = repr(await nothing_of(marker, port.export_session(group, tick())))
        assert "[erased]" in exported and "bob in the group" in exported
        items = await nothing_of(marker, port.library_call("items", {"session": group}, tick()))
        assert "[erased]" in repr(items)
        await nothing_of(marker, port.console_turn(group, g_turn))
        await nothing_of(marker, port.session_state(group))
        await nothing_of(marker, port.state_record(b_turn))
        assert await port.session_show(bob, 100) == before_bob
        # Writes that would answer with their data, or put some in a session of theirs.
        for call, args in (
            ("pop", {"session": alice}),
            ("clear", {"session": alice}),
            ("append", {"session": alice, "items": ["more"]}),
            ("set_title", {"session": alice, "title": "t"}),
        ):
            with pytest.raises(NotFound):
                await port.library_call(call, args, tick())
        with pytest.raises(NotFound):
            await port.fork(a_turn, None, tick())
        checked.append("paused")

    await port.erase_entity(alice_ent, alice_ent, tick(), paused)
    assert checked == ["paused"]
    assert await port.session_show(bob, 100) == before_bob
    shown = await port.session_show(group, 100)
    assert [t["title"] for t in shown["turns"]] == [None, "bob in the group"]


async def test_from_the_mark_on_no_write_lands_in_what_it_covers(port: LedgerPort) -> None:
    """Between the mark and the last step, a write that names one of the person's
    sessions, or the person, is refused (`NotFound`, naming it) and changes nothing;
    the erasure then leaves none of their rows, and others are served meanwhile."""
    alice, _, alice_ent = await say(port, inbound("a1", "alice", "alice says hi"))
    bob, _, bob_ent = await say(port, inbound("b1", "bob", "bob says hi"))
    assert alice_ent is not None and bob_ent is not None
    limits = Limits(max_depth=2, max_children=8, timeout_ms=60_000)
    checked: list[str] = []

    async def paused(sessions: list[str]) -> None:
        for name, write in (
            ("timer.add", port.add_timer(alice, TimerSpec("ping", tick() + 60_000, None), tick())),
            ("scratchpad.merge", port.scratchpad_merge(alice, {"k": "v"}, tick())),
            ("route.bind", port.route_bind(Conversation("chat", "dm", "bob", None), alice, tick())),
            ("agent_send", port.dispatch(
                parent=None, parent_turn=None, tool_call=None,
                target={"kind": "session", "session": alice}, task="t", persona=None,
                limits=limits, now=tick())),
            ("agent_send parent", port.dispatch(
                parent=alice, parent_turn=None, tool_call=None,
                target={"kind": "session", "session": bob}, task="t", persona=None,
                limits=limits, now=tick())),
            ("entity.alias", port.add_alias("alice-alias", alice, tick())),
            ("entity.name", port.name_entity(alice_ent, "Alice", None, tick())),
            ("entity.merge into", port.merge_entities(bob_ent, alice_ent, tick())),
            ("entity.merge from", port.merge_entities(alice_ent, bob_ent, tick())),
        ):  # fmt: skip
            with pytest.raises(NotFound) as refused:
                await write
            assert alice in str(refused.value) or alice_ent in str(refused.value), name
            checked.append(name)
        assert await port.scratchpad_get(bob) is not None  # the others are served
        assert await port.list_timers(None) == []

    await port.erase_entity(alice_ent, alice_ent, tick(), paused)
    assert len(checked) == 9
    assert await port.list_timers(None) == []
    assert await port.route_list(None) == []
    assert (await port.entity_show(bob_ent))["entity"] == bob_ent  # bob was not merged
