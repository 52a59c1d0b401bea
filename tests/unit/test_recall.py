"""Conversation recall: the FTS5 query language, search, ranges, tool calls and
summaries over a temporary ledger, and the `conversation_recall` tool's text."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from broker.engines.base import EngineError
from broker.ops.table import Ops
from broker.tools.recall import RECALL_TOOL, conversation_recall, fit, parse_arguments
from ledger.fts import index_new_messages
from ledger.port.errors import NotFound, NotReachable
from ledger.port.records import Found, Hit, Request
from ledger.recall import answer as recall_answer
from ledger.recall import reads as recall_reads
from ledger.recall import search as recall
from ledger.sqlite.store import Ledger
from wire.framing import ProtocolError

pytestmark = pytest.mark.anyio

T0 = 1_714_557_600_000  # 2024-05-01T10:00:00Z
MINUTE = 60_000
Call = tuple[str, str, str]  # (name, arguments, result)


def tokens(text: str) -> int:
    """A stand-in tokenizer: about four characters a token."""
    return len(text) // 4 + 1


def add_session(c: sqlite3.Connection, label: str) -> None:
    c.execute(
        "INSERT INTO sessions (label, kind, origin, created_at, updated_at)"
        " VALUES (?, 'dm', 'inbound', ?, ?)",
        (label, T0, T0),
    )


def add_turn(
    c: sqlite3.Connection,
    session: str,
    turn: str,
    minute: int,
    user: str,
    reply: str,
    calls: tuple[Call, ...] = (),
    status: str = "completed",
) -> None:
    at = T0 + minute * MINUTE
    c.execute(
        "INSERT INTO turns (id, session_label, type, status, started_at, completed_at)"
        " VALUES (?, ?, 'turn', ?, ?, ?)",
        (turn, session, status, at, at + 1000),
    )
    c.executemany(
        "INSERT INTO messages (turn_id, seq, role, content, created_at) VALUES (?, ?, ?, ?, ?)",
        [(turn, 0, "user", user, at), (turn, 1, "assistant", reply, at + 1000)],
    )
    c.executemany(
        "INSERT INTO tool_calls (id, turn_id, seq, name, arguments, result, status, created_at)"
        " VALUES (?, ?, ?, ?, ?, ?, 'ok', ?)",
        [(f"{turn}-c{n}", turn, n, *call, at + 500) for n, call in enumerate(calls)],
    )
    c.execute("UPDATE sessions SET turns = turns + 1 WHERE label = ?", (session,))
    index_new_messages(c)  # as the writer does at the end of each transaction


@pytest.fixture
def archive(conn: sqlite3.Connection) -> sqlite3.Connection:
    """Two sessions: `alice` talks about auth tokens, `bob` about the database."""
    add_session(conn, "alice")
    add_session(conn, "bob")
    add_turn(
        conn, "alice", "A1", 0, "Can you add JWT refresh token support?", "Sure, reading auth."
    )
    add_turn(
        conn,
        "alice",
        "A2",
        1,
        "Use token rotation for the refresh token.",
        "Refresh token rotation is in place; token token token.",
        calls=(("read_file", '{"path": "src/auth.py"}', "def login(): ..."),),
    )
    add_turn(
        conn,
        "alice",
        "A3",
        2,
        "Never use an ORM, raw SQL only.",
        "Noted: raw SQL only, the token code stays as it is and nothing else changes here.",
        calls=(("run_tests", "{}", "3 passed"), ("read_file", '{"path": "x.py"}', "x = 1")),
    )
    add_turn(conn, "bob", "B1", 3, "The database migration failed.", "Token expired in the DB.")
    add_turn(conn, "bob", "B2", 4, "Retry the migration please.", "Migration done.")
    return conn


def turns_of(hits: list[Hit]) -> list[str]:
    return [h.turn for h in hits]


# -- the query language ------------------------------------------------------------


def fts_query(text: str, match: recall.Match = "all") -> str:
    """The FTS5 query `recall.search` runs for `text`."""
    return recall.joined(recall.terms(text), match)


def test_terms_are_quoted_phrases_and_prefixes() -> None:
    assert fts_query("auth token") == '"auth" "token"'
    assert fts_query('"refresh token" rot*') == '"refresh token" "rot"*'
    assert fts_query('"refresh tok"*') == '"refresh tok"*'
    assert fts_query("auth token", "any") == '"auth" OR "token"'
    assert fts_query("foo-bar") == '"foo bar"'  # as the tokenizer splits it


def test_stopwords_go_unless_nothing_else_is_left() -> None:
    assert fts_query("what did we decide about the auth") == '"decide" "auth"'
    assert fts_query('the "the" auth') == '"the" "auth"'  # a quoted word stays
    assert fts_query("the and") == '"the" "and"'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('"', "no words"),
        ("*", "no words"),
        ("( ) : ^ -", "no words"),
        ("ab*", "at least 3 letters"),
        (" ".join(f"w{n}" for n in range(40)), "more than 32"),
    ],
)
def test_queries_without_words_are_refused(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        fts_query(text)


HOSTILE = [
    '"',
    '""',
    '"unbalanced phrase',
    "AND OR NOT",
    "token AND",
    "OR token",
    "NOT token",
    "*",
    "**",
    "tok**",
    "(",
    "(token",
    "token)",
    "NEAR(",
    "NEAR(token rotation, 2)",
    "content:token",
    "content: token",
    "{content}: token",
    "-content:token",
    "^token",
    "token^",
    "+token",
    "col:",
    "' OR 1=1 --",
    "messages_fts MATCH 'x'",
    "\x00token",
    "token\nrotation",
    "🙂 token",
    "日本語",
    "a" * 400,
]


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_queries_never_reach_sqlite_as_syntax(
    archive: sqlite3.Connection, text: str
) -> None:
    for session in (None, "alice"):
        try:
            hits = recall.search(archive, text, session, 10)
        except ValueError:
            continue
        assert all(isinstance(h, Hit) for h in hits)


# -- search ----------------------------------------------------------------------------


def test_search_ranks_by_bm25_and_marks_the_words(conn: sqlite3.Connection) -> None:
    add_session(conn, "s")
    add_turn(conn, "s", "T1", 0, "kiwi once in a much longer message about other fruit", "no")
    add_turn(conn, "s", "T2", 1, "kiwi kiwi kiwi", "no")
    add_turn(conn, "s", "T3", 2, "a kiwi here", "no")
    for n in range(10):
        add_turn(conn, "s", f"F{n}", 3 + n, "apples and pears", "no")
    hits = recall.search(conn, "kiwi", None, 10)
    assert turns_of(hits) == ["T2", "T3", "T1"]
    assert hits[0].score > hits[1].score > hits[2].score > 0
    assert hits[0].snippet == "**kiwi** **kiwi** **kiwi**"
    assert (hits[0].session, hits[0].role, hits[0].at) == ("s", "user", T0 + MINUTE)


def test_search_across_sessions(archive: sqlite3.Connection) -> None:
    hits = recall.search(archive, "token", None, 10)
    assert {h.session for h in hits} == {"alice", "bob"}
    # A2's reply says token four times in a short message: it ranks first.
    assert (hits[0].turn, hits[0].role) == ("A2", "assistant")


def test_search_in_one_session(archive: sqlite3.Connection) -> None:
    assert {h.session for h in recall.search(archive, "token", "bob", 10)} == {"bob"}
    assert {h.session for h in recall.search(archive, "token", "alice", 10)} == {"alice"}
    assert recall.search(archive, "migration", "alice", 10) == []
    with pytest.raises(NotFound):
        recall.search(archive, "token", "nobody", 10)


def test_phrases_and_prefixes(archive: sqlite3.Connection) -> None:
    assert set(turns_of(recall.search(archive, '"refresh token"', None, 10))) == {"A1", "A2"}
    assert turns_of(recall.search(archive, '"token refresh"', None, 10)) == []
    assert set(turns_of(recall.search(archive, "migra*", None, 10))) == {"B1", "B2"}
    hit = recall.search(archive, "rotat*", None, 10)[0]
    assert "**rotation**" in hit.snippet


def test_all_words_or_any(archive: sqlite3.Connection) -> None:
    assert recall.search(archive, "orm migration", None, 10) == []
    assert set(turns_of(recall.search(archive, "orm migration", None, 10, match="any"))) == {
        "A3",
        "B1",
        "B2",
    }


def test_time_and_role_filters(archive: sqlite3.Connection) -> None:
    before = recall.search(archive, "token", None, 10, before_ms=T0 + 2 * MINUTE)
    assert set(turns_of(before)) == {"A1", "A2"}
    after = recall.search(archive, "token", None, 10, after_ms=T0 + 2 * MINUTE)
    assert set(turns_of(after)) == {"A3", "B1"}
    users = recall.search(archive, "token", "alice", 10, roles=["user"])
    assert {h.role for h in users} == {"user"} and len(users) == 2
    with pytest.raises(ValueError, match="unknown role"):
        recall.search(archive, "token", None, 10, roles=["robot"])


def test_limit_keeps_the_best(archive: sqlite3.Connection) -> None:
    everything = recall.search(archive, "token", None, 10)
    assert recall.search(archive, "token", None, 2) == everything[:2]


@pytest.mark.parametrize("small", [True, False])
def test_filtered_search_past_the_probe(
    conn: sqlite3.Connection, monkeypatch: pytest.MonkeyPatch, small: bool
) -> None:
    """More matches than the probe looks at: the session's ids are listed (a small
    session) or the matches are walked through the filter; both find the same."""
    monkeypatch.setattr(recall, "PROBE", 3)
    monkeypatch.setattr(recall, "_small", lambda *_: small)
    add_session(conn, "mine")
    add_session(conn, "noise")
    add_turn(conn, "mine", "M0", 0, "the needle is here", "needle needle")
    for n in range(1, 30):
        add_turn(conn, "noise", f"N{n:02d}", n, "needle in the noise", "more hay")
    add_turn(conn, "mine", "M1", 40, "a needle again", "ok")
    hits = recall.search(conn, "needle", "mine", 10)
    assert [(h.turn, h.role) for h in hits] == [("M0", "assistant"), ("M1", "user"), ("M0", "user")]
    assert len(recall.search(conn, "needle", None, 100)) == 32


def test_filtered_search_ranks_the_newest_candidates(
    conn: sqlite3.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The older messages rank better, but only the newest FILTERED are ranked."""
    monkeypatch.setattr(recall, "PROBE", 2)
    monkeypatch.setattr(recall, "FILTERED", 4)
    add_session(conn, "s")
    for n in range(10):
        add_turn(conn, "s", f"T{n}", n, "word word word" if n < 6 else f"word number {n}", "-")
    assert turns_of(recall.search(conn, "word", "s", 3)) == ["T9", "T8", "T7"]
    assert turns_of(recall.search(conn, "word", None, 3)) == ["T5", "T4", "T3"]


# -- range, tool calls, summary ------------------------------------------------------


def test_range_around_a_turn(archive: sqlite3.Connection) -> None:
    entries = recall_reads.range(archive, "alice", around_turn="A2", context_turns=0)
    assert [(e.turn, e.role, e.tool) for e in entries] == [
        ("A2", "user", None),
        ("A2", "tool", "read_file"),
        ("A2", "assistant", None),
    ]
    assert entries[1].arguments == '{"path": "src/auth.py"}' and entries[1].status == "ok"
    wide = recall_reads.range(archive, "alice", around_turn="A2", context_turns=1)
    assert [e.turn for e in wide] == ["A1", "A1", "A2", "A2", "A2", "A3", "A3", "A3", "A3"]
    assert [e.tool for e in wide if e.turn == "A3"] == [None, "run_tests", "read_file", None]


def test_range_trims_away_from_the_turn(archive: sqlite3.Connection) -> None:
    entries = recall_reads.range(archive, "alice", around_turn="A1", limit=4, context_turns=2)
    assert [e.turn for e in entries] == ["A1", "A1", "A2", "A2"]
    entries = recall_reads.range(archive, "alice", around_turn="A3", limit=4, context_turns=2)
    assert [e.turn for e in entries] == ["A3"] * 4


def test_range_by_time(archive: sqlite3.Connection) -> None:
    first = recall_reads.range(archive, "alice", from_ms=T0 + MINUTE, limit=50)
    assert [e.turn for e in first][:1] == ["A2"] and first[-1].turn == "A3"
    latest = recall_reads.range(archive, "alice", to_ms=T0 + MINUTE, limit=2)
    assert [(e.turn, e.role) for e in latest] == [("A2", "tool"), ("A2", "assistant")]
    assert recall_reads.range(archive, "alice", from_ms=T0 + 99 * MINUTE) == []


def test_range_lookups_that_miss(archive: sqlite3.Connection) -> None:
    with pytest.raises(NotFound):
        recall_reads.range(archive, "alice", around_turn="B1")  # bob's turn
    with pytest.raises(NotFound):
        recall_reads.range(archive, "nobody", around_turn="A1")


def test_tool_calls_newest_first(archive: sqlite3.Connection) -> None:
    calls = recall_reads.tool_calls(archive, "alice")
    assert [(c.turn, c.tool) for c in calls] == [
        ("A3", "read_file"),
        ("A3", "run_tests"),
        ("A2", "read_file"),
    ]
    reads = recall_reads.tool_calls(archive, "alice", "read_file", limit=1)
    assert [(c.turn, c.content) for c in reads] == [("A3", "x = 1")]
    assert recall_reads.tool_calls(archive, "bob") == []


def test_summary(archive: sqlite3.Connection) -> None:
    archive.execute(
        "UPDATE sessions SET total_prompt_tokens = 1200, total_tool_calls = 3 WHERE label = ?",
        ("alice",),
    )
    archive.execute(
        "INSERT INTO compactions (turn_id, session_label, summary, turns_summarized, trigger,"
        " created_at) VALUES ('A2', 'alice', 'JWT refresh with rotation.', 2, 'manual', ?)",
        (T0 + 5 * MINUTE,),
    )
    archive.execute(
        "INSERT INTO scratchpad VALUES ('alice', '{\"focus\": \"auth\"}', ?)", (T0 + MINUTE,)
    )
    s = recall_reads.summary(archive, "alice")
    assert (s.turns, s.messages, s.tool_calls) == (3, 6, 3)
    assert (s.first_at, s.last_at) == (T0, T0 + 2 * MINUTE + 1000)
    assert s.totals["prompt_tokens"] == 1200 and s.totals["tool_calls"] == 3
    assert s.compaction is not None and s.compaction.summary == "JWT refresh with rotation."
    assert s.scratchpad == '{"focus": "auth"}'
    empty = recall_reads.summary(archive, "bob")
    assert empty.compaction is None and empty.scratchpad is None
    with pytest.raises(NotFound):
        recall_reads.summary(archive, "nobody")


# -- the tool -------------------------------------------------------------------------


class SyncLedger:
    """`Ledger.recall` without threads, for the tool's formatting tests."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    async def recall(self, req: Request) -> Found:
        return recall_answer.answer(self.conn, req)


async def recall_text(c: sqlite3.Connection, budget: int = 8000, **args: Any) -> str:
    """The tool's answer for a call from session alice."""
    return await conversation_recall(SyncLedger(c), "alice", args, tokens, budget)


def test_the_tool_spec_names_every_argument() -> None:
    props = RECALL_TOOL.parameters["properties"]
    assert props["action"]["enum"] == ["search", "range", "tool_calls", "summary"]
    assert {"query", "session", "limit", "around_turn", "since", "until"} <= set(props)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({}, "action must be one of"),
        ({"action": "find"}, "action must be one of"),
        ({"action": "search"}, "search needs a query"),
        ({"action": "search", "query": ""}, "query must be a non-empty string"),
        ({"action": "search", "query": 7}, "query must be a non-empty string"),
        ({"action": "search", "query": "x", "limit": 0}, "limit must be an integer from 1"),
        ({"action": "search", "query": "x", "limit": True}, "limit must be an integer"),
        ({"action": "search", "query": "x", "colour": "red"}, "unknown argument 'colour'"),
        ({"action": "search", "query": "x", "roles": ["robot"]}, "roles must be a list"),
        ({"action": "search", "query": "x", "since": "yesterday"}, "since must be an ISO"),
        ({"action": "range"}, "range needs around_turn"),
        ({"action": "range", "session": "*", "around_turn": "A1"}, "for search only"),
        ({"action": "summary", "context_turns": 11}, "context_turns must be"),
    ],
)
def test_bad_arguments_are_engine_errors(args: dict[str, Any], message: str) -> None:
    with pytest.raises(EngineError, match=message):
        parse_arguments(args, "alice", cross_session=True)


def test_other_sessions_only_when_allowed() -> None:
    assert parse_arguments({"action": "summary"}, "alice", False).session == "alice"
    assert parse_arguments({"action": "summary", "session": "alice"}, "alice", False)
    for other in ("*", "bob"):  # refused as past the turn's reach (core/reach.py)
        with pytest.raises(NotReachable):
            parse_arguments({"action": "search", "query": "x", "session": other}, "alice", False)
    req = parse_arguments({"action": "search", "query": "x", "session": "*"}, "alice", True)
    assert req.session is None
    req = parse_arguments({"action": "search", "query": "x", "since": "2024-05-01"}, "a", True)
    assert req.since_ms == 1_714_521_600_000


async def test_tool_search_lines(archive: sqlite3.Connection) -> None:
    text = await recall_text(archive, action="search", query="rotation")
    lines = text.splitlines()
    assert lines[0].startswith("2 messages in session alice match 'rotation', best first.")
    assert lines[1].startswith("2024-05-01 10:01 A2 ")
    assert "**rotation**" in lines[1] and "**rotation**" in lines[2]
    assert "bob" not in text
    everywhere = await recall_text(archive, action="search", query="token", session="*")
    assert "2024-05-01 10:03 bob B1 assistant:" in everywhere


async def test_tool_search_falls_back_to_any_word(archive: sqlite3.Connection) -> None:
    text = await recall_text(archive, action="search", query="orm rotation")
    assert "No message has all the words" in text and "**ORM**" in text
    none = await recall_text(archive, action="search", query="kubernetes")
    assert none == "No messages in session alice match 'kubernetes'."


async def test_tool_search_errors_are_sentences(archive: sqlite3.Connection) -> None:
    with pytest.raises(EngineError, match="no words to search for"):
        await recall_text(archive, action="search", query="(*)")
    with pytest.raises(EngineError, match="no session 'carol'"):
        await recall_text(archive, action="search", query="x", session="carol")
    with pytest.raises(EngineError, match="no turn 'B1' in session 'alice'"):
        await recall_text(archive, action="range", around_turn="B1")


async def test_tool_range_text(archive: sqlite3.Connection) -> None:
    text = await recall_text(archive, action="range", around_turn="A2", context_turns=0)
    assert text == (
        "Session alice, 3 entries, oldest first (times UTC):\n"
        "-- turn A2 2024-05-01 10:01\n"
        "user:\nUse token rotation for the refresh token.\n"
        'tool read_file {"path": "src/auth.py"} -> ok:\ndef login(): ...\n'
        "assistant:\nRefresh token rotation is in place; token token token."
    )


async def test_tool_calls_and_summary_text(archive: sqlite3.Connection) -> None:
    text = await recall_text(archive, action="tool_calls", tool_name="read_file")
    assert text.splitlines()[:2] == [
        "The latest 2 calls of read_file in session alice, newest first:",
        '2024-05-01 10:02 A3 read_file {"path": "x.py"} -> ok:',
    ]
    summary = await recall_text(archive, action="summary")
    assert "3 turns, 6 messages, 3 tool calls" in summary


async def test_a_huge_tool_result_is_cut_first(archive: sqlite3.Connection) -> None:
    add_turn(
        archive,
        "alice",
        "A4",
        10,
        "Show me the log.",
        "Here is what the log says about the crash.",
        calls=(("read_file", '{"path": "big.log"}', "log line\n" * 50_000),),
    )
    text = await recall_text(archive, budget=600, action="range", around_turn="A4")
    assert tokens(text) <= 600
    assert "Here is what the log says about the crash." in text  # the reply is whole
    assert "characters cut ..." in text
    assert "[Cut to fit 600 tokens: 1 entries shortened, the oldest 0 left out." in text


async def test_then_the_oldest_entries_go(archive: sqlite3.Connection) -> None:
    for n in range(20):
        add_turn(archive, "alice", f"Z{n:02d}", 20 + n, f"question {n} " * 40, f"answer {n}")
    text = await recall_text(archive, budget=500, action="range", since="2024-05-01T10:20Z")
    assert tokens(text) <= 500
    assert "answer 19" in text and "answer 0\n" not in text
    assert "left out" in text


async def test_search_drops_the_lowest_ranked(archive: sqlite3.Connection) -> None:
    full = await recall_text(archive, action="search", query="token")
    small = await recall_text(archive, budget=tokens(full) - 10, action="search", query="token")
    assert tokens(small) < tokens(full)
    kept = [line for line in small.splitlines() if line.startswith("2024")]
    every = [line for line in full.splitlines() if line.startswith("2024")]
    assert kept == every[: len(kept)] and len(kept) < len(every)


def test_fit_with_a_tiny_budget() -> None:
    from broker.tools.recall import Answer, Block

    answer = Answer("a header " * 20, [Block("x", "y" * 100)])
    assert tokens(fit(answer, tokens, 10)) <= 10


def _alice_and_a_turn(c: sqlite3.Connection) -> None:  # a writer job: module level
    add_session(c, "alice")
    add_turn(c, "alice", "A1", 0, "The deploy key is in the vault.", "Noted.")


async def test_through_the_ledger_readers(tmp_path: Path) -> None:
    async with Ledger.open(tmp_path / "ledger.db") as ledger:
        await ledger.writer.call(_alice_and_a_turn)
        text = await conversation_recall(
            ledger, "alice", {"action": "search", "query": "vault"}, tokens
        )
        assert "A1 user: The deploy key is in the **vault**." in text
        ops = Ops(ledger, lambda label: "idle")
        data = await ops.recall_search(None, {"query": "deploy key"}, "r1")  # type: ignore[arg-type]
        assert [(d["session"], d["turn"], d["role"]) for d in data] == [("alice", "A1", "user")]
        assert set(data[0]) == {"session", "turn", "role", "at", "snippet", "score", "neighbours"}
        assert data[0]["neighbours"] == []  # A1 has no turn before or after it
        with pytest.raises(ProtocolError) as info:
            await ops.recall_search(None, {"query": "*"}, "r2")  # type: ignore[arg-type]
        assert (info.value.code, info.value.field) == ("invalid", "query")
        with pytest.raises(NotFound):
            await ops.recall_search(None, {"query": "x", "session": "carol"}, "r3")  # type: ignore[arg-type]
