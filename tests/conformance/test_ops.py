"""Operator reads and writes, recall, transfer and the ledger's own state, through
the port."""

from __future__ import annotations

import orjson
import pytest

from core.identity import SessionSpec
from ledger.port.errors import NotFound
from ledger.port.protocols import LedgerPort, Request
from ledger.port.records import Summary
from tests.conformance.records import inbound, ingest, tick, turn

pytestmark = pytest.mark.anyio


async def _talk(port: LedgerPort, sender: str, said: str, answer: str) -> tuple[str, str]:
    acc = await ingest(port, inbound(f"{sender}-{said}", sender=sender, text=said))
    head = (await port.session_start(acc.session)).start.head
    rec = turn(acc.session, head, await port.open_items(acc.session), answer)
    rec.events = [("intent", {"text": "greet"})]
    await port.submit_turn(rec).result()
    return acc.session, rec.turn_id


async def test_scratchpad_merges_as_rfc_7396(port: LedgerPort) -> None:
    label, _ = await _talk(port, "alice", "hi", "hello")
    assert await port.scratchpad_get(label) in (None, {})
    await port.scratchpad_merge(label, {"a": 1, "b": {"c": 2, "d": 3}}, tick())
    after = await port.scratchpad_merge(label, {"b": {"c": None}, "e": [1]}, tick())
    assert after == {"a": 1, "b": {"d": 3}, "e": [1]}
    assert await port.scratchpad_get(label) == after
    with pytest.raises(NotFound):
        await port.scratchpad_merge("dm:nobody", {"a": 1}, tick())


async def test_recall_searches_ranges_and_summarizes(port: LedgerPort) -> None:
    label, first = await _talk(port, "alice", "tell me about herons", "herons wade")
    _, second = await _talk(port, "alice", "and owls", "owls hunt at night")
    bob, _ = await _talk(port, "bob", "herons?", "grey herons")
    everywhere = await port.recall_search("herons", None, 10)
    assert {h.session for h in everywhere} == {label, bob}
    mine = await port.recall_search("owls", label, 10)
    assert {h.turn for h in mine} == {second}
    found = await port.recall(Request("range", label, 10, around_turn=first, context_turns=1))
    assert isinstance(found, list)
    assert [e.turn for e in found][:2] == [first, first]
    summary = await port.recall(Request("summary", label, 10))
    assert isinstance(summary, Summary) and summary.turns == 2
    with pytest.raises(NotFound):
        await port.recall_search("owls", "dm:nobody", 10)


async def test_events_are_queried_by_type_and_session(port: LedgerPort) -> None:
    label, turn_id = await _talk(port, "alice", "hi", "hello")
    await _talk(port, "bob", "hi", "hello")
    events = await port.events_query(kind="intent", session=label, turn=None, text=None, limit=10)
    assert [(e["turn"], e["type"]) for e in events] == [(turn_id, "intent")]
    everyone = await port.events_query(kind=None, session=None, turn=None, text=None, limit=10)
    assert len(everyone) == 2


async def test_an_export_imports_as_a_new_session_with_the_same_thread(
    port: LedgerPort,
) -> None:
    label, _ = await _talk(port, "alice", "one", "first")
    await _talk(port, "alice", "two", "second")
    lines = await port.export_session(label, tick())
    assert lines[0]["type"] == "header" and lines[0]["turns"] == 2
    made, turns = await port.import_session(
        [orjson.dumps(line) for line in lines], "restored", tick()
    )
    assert (made, turns) == ("restored", 2)
    original = await port.session_show(label, 10)
    restored = await port.session_show(made, 10)
    assert [t["output"] for t in restored["turns"]] == [t["output"] for t in original["turns"]]
    with pytest.raises(ValueError, match="line 1"):
        await port.import_session([b'{"type": "turn"}'], "broken", tick())
    with pytest.raises(NotFound):
        await port.session_show("broken", 10)  # nothing was written


async def test_sessions_list_and_counts(port: LedgerPort) -> None:
    label, _ = await _talk(port, "alice", "hi", "hello")
    waiting = await ingest(port, inbound("later", sender="bob"))
    counted = await port.counts()
    assert (counted["sessions"], counted["queued"], counted["items_queued"]) == (2, 1, 1)
    rows = {r["label"]: r for r in await port.sessions_list(None, 10)}
    assert (rows[label]["turns"], rows[label]["queued"]) == (1, 0)
    assert (rows[waiting.session]["turns"], rows[waiting.session]["queued"]) == (0, 1)
    assert await port.sessions_list("merged", 10) == []


async def test_health_reads_name_the_sessions_with_untouched_items(port: LedgerPort) -> None:
    acc = await ingest(port, inbound("m1"))
    counts, untouched, unreadable = await port.health_reads(tick())
    assert unreadable is None and counts["queued"] == 1
    assert [(label, n) for label, n, _ in untouched] == [(acc.session, 1)]
    _, none_yet, _ = await port.health_reads(0)
    assert none_yet == []


async def test_a_working_ledger_reports_no_problem_and_counts_its_commits(
    port: LedgerPort,
) -> None:
    before = port.writer_stats()
    await ingest(port, inbound("m1"))
    after = port.writer_stats()
    assert port.writer_problems() == [] and port.write_failure is None
    assert port.writer_died is None
    assert after.commits > before.commits and after.jobs > before.jobs
    assert isinstance(port.backend, str) and port.backend


async def test_the_ledger_checks_itself_as_doctor_does(port: LedgerPort) -> None:
    acc = await ingest(port, inbound("m1"))
    await port.submit_mark_running("t1", [acc.item], tick()).result()
    report = await port.check(stuck_before=tick())
    assert report.damage == [] and report.schema == report.latest
    assert [label for label, _ in report.running_since] == [acc.session]
    assert report.unconfirmed == []


async def test_writes_still_commit_after_stop_retrying(port: LedgerPort) -> None:
    # At a shutdown the ledger stops waiting out a refusing storage; a storage
    # that accepts writes is not affected.
    port.stop_retrying()
    acc = await ingest(port, inbound("m1"))
    assert [i.id for i in await port.open_items(acc.session)] == [acc.item]
    assert port.writer_problems() == []


async def test_health_names_the_sessions_with_untouched_items_in_label_order(
    port: LedgerPort,
) -> None:
    """Found by test_port_differential: the sessions came in the order of the engine's
    GROUP BY, sorted on SQLite and a hash table's on PostgreSQL."""
    room = SessionSpec("room:{entity}", None)
    labels = []
    for n in range(8):
        labels.append((await ingest(port, inbound(f"h{n}", sender=f"s{n}"))).session)
        rec = inbound(f"r{n}", sender=f"s{n}")
        labels.append((await port.submit_inbound(rec, room, tick()).result()).session)
    _, untouched, _ = await port.health_reads(tick())
    assert [label for label, _, _ in untouched] == sorted(labels)
