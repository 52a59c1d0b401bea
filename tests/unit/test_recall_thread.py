"""Recall along a thread (ledger/recall/thread.py, ledger/recall/hint.py): a hit's
neighbouring turns, turns by number, the hint's lookup, and how the tool shows them."""

from __future__ import annotations

import sqlite3

import pytest

from broker.engines.base import EngineError
from broker.tools.recall import conversation_recall, parse_arguments
from ledger.fts import index_new_messages
from ledger.port.errors import NotFound
from ledger.port.records import Found, Request
from ledger.recall import hint as recall_hint
from ledger.recall import thread as recall_thread
from ledger.recall.answer import answer

pytestmark = pytest.mark.anyio
T0 = 1_714_557_600_000


def add_turn(
    c: sqlite3.Connection,
    session: str,
    turn: str,
    parent: str | None,
    user: str,
    reply: str,
    *,
    reason: str | None = None,
    msg_id: str | None = None,
) -> None:
    at = T0 + int(c.execute("SELECT count(*) FROM turns").fetchone()[0]) * 60_000
    status = "failed" if reason else "completed"
    c.execute(
        "INSERT INTO turns (id, session_label, parent_id, type, status, reason, output,"
        " started_at, completed_at) VALUES (?, ?, ?, 'turn', ?, ?, ?, ?, ?)",
        (turn, session, parent, status, reason, reply, at, at + 1000),
    )
    c.executemany(
        "INSERT INTO messages (turn_id, seq, role, content, msg_id, created_at)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        [(turn, 0, "user", user, msg_id, at), (turn, 1, "assistant", reply, None, at + 1000)],
    )
    c.execute(
        "UPDATE sessions SET head_turn_id = ?, turns = turns + 1 WHERE label = ?", (turn, session)
    )
    index_new_messages(c)


@pytest.fixture
def thread(conn: sqlite3.Connection) -> sqlite3.Connection:
    """alice: T1 -> T2 -> T3 -> T4, an orphan off T2, a fork F1 off T2."""
    for label, kind, parent in (("alice", "dm", None), ("fork:f", "fork", "alice")):
        conn.execute(
            "INSERT INTO sessions (label, kind, origin, parent_session, created_at, updated_at)"
            " VALUES (?, ?, 'inbound', ?, ?, ?)",
            (label, kind, parent, T0, T0),
        )
    add_turn(conn, "alice", "T1", None, "set up the heron tracker", "Done.")
    add_turn(conn, "alice", "T2", "T1", "the owls need counting", "Counted 12 owls.")
    add_turn(conn, "alice", "X2", "T2", "lost the race", "never shown", reason="head_moved")
    add_turn(conn, "fork:f", "F1", "T2", "on the fork", "forked reply")
    add_turn(conn, "alice", "T3", "T2", "now the finches", "Finches: 4.")
    add_turn(conn, "alice", "T4", "T3", "store it in birds/counts.csv", "Stored.", msg_id="m4")
    conn.execute("UPDATE sessions SET head_turn_id = 'T4' WHERE label = 'alice'")
    return conn


def test_neighbours_follow_the_thread_in_the_hits_session(thread: sqlite3.Connection) -> None:
    around = recall_thread.neighbours(thread, "T2", "alice", 1, 1)
    assert [(n.turn, n.offset, n.said, n.answered) for n in around] == [
        ("T1", -1, "set up the heron tracker", "Done."),
        ("T3", 1, "now the finches", "Finches: 4."),  # not the orphan X2, not the fork's F1
    ]
    assert [n.turn for n in recall_thread.neighbours(thread, "T3", "alice", 2, 2)] == [
        "T2", "T1", "T4",
    ]  # fmt: skip
    assert [n.turn for n in recall_thread.neighbours(thread, "F1", "fork:f", 1, 1)] == ["T2"]
    assert recall_thread.neighbours(thread, "T1", "alice", 0, 0) == []


def test_turns_by_number_within_the_thread(thread: sqlite3.Connection) -> None:
    def turns(start: int | None, end: int | None) -> list[tuple[str, int | None]]:
        entries = recall_thread.by_number(thread, "alice", start, end, 100)
        return sorted({(e.turn, e.number) for e in entries}, key=lambda t: t[1] or 0)

    assert turns(2, 3) == [("T2", 2), ("T3", 3)]
    assert turns(-1, None) == [("T4", 4)]
    assert turns(-2, -1) == [("T3", 3), ("T4", 4)]
    assert turns(None, 1) == [("T1", 1)]
    assert turns(1, None) == [("T1", 1), ("T2", 2), ("T3", 3), ("T4", 4)]  # 10 at most
    assert turns(9, 12) == []
    fork_turns = recall_thread.by_number(thread, "fork:f", 1, 3, 100)
    assert sorted({e.turn for e in fork_turns}) == ["F1", "T1", "T2"]  # its ancestors count
    with pytest.raises(NotFound):
        recall_thread.by_number(thread, "nobody", 1, 2, 10)


def test_the_hints_lookup_finds_terms_of_older_messages_only(thread: sqlite3.Connection) -> None:
    terms = ("owls", "birds/counts.csv", "penguins", "the")
    assert recall_hint.found_terms(thread, "alice", terms, ()) == [
        "owls",
        "birds/counts.csv",
        "the",
    ]
    # The turn's own inputs (re-run after an abort) are not older turns.
    assert recall_hint.found_terms(thread, "alice", ("birds/counts.csv",), ("m4",)) == []
    assert recall_hint.found_terms(thread, "fork:f", ("owls",), ()) == []  # another session


class Reader:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    async def recall(self, req: Request) -> Found:
        return answer(self.conn, req)


def tokens(text: str) -> int:
    return len(text) // 4 + 1


async def test_the_tool_shows_neighbours_and_turn_numbers(thread: sqlite3.Connection) -> None:
    reader = Reader(thread)
    text = await conversation_recall(reader, "alice", {"action": "search", "query": "owls"}, tokens)
    assert "  before T1: user: set up the heron tracker | reply: Done." in text
    assert "  after T3: user: now the finches | reply: Finches: 4." in text
    none = await conversation_recall(
        reader, "alice", {"action": "search", "query": "owls"}, tokens, neighbours=(0, 0)
    )
    assert "before T1" not in none
    ranged = await conversation_recall(
        reader, "alice", {"action": "range", "start_turn": 3, "end_turn": -1}, tokens
    )
    assert "-- turn #3 T3" in ranged and "-- turn #4 T4" in ranged and "#2" not in ranged
    assert "store it in birds/counts.csv" in ranged


@pytest.mark.parametrize("value", [0, True, "2", 1.5])
def test_a_turn_number_must_be_a_nonzero_integer(value: object) -> None:
    with pytest.raises(EngineError, match="start_turn must be a turn number"):
        parse_arguments({"action": "range", "start_turn": value}, "alice", False)
