"""A turn written as the daemon commits one, for tests of the library face on a
ledger that both write (a served ledger mixes the two), and the thread as the
daemon's context load reads it, to hold the library's reads to."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from ledger.api import SyncStore
from ledger.port.records import Thread, TurnRecord
from ledger.reads import load_thread
from ledger.turns import commit_turn
from plumbing.ids import new_id
from tests import ledger_db


def load(path: Path, session: str) -> Thread:
    """The session's thread as the daemon's context load reads it."""
    with contextlib.closing(ledger_db.connect(path)) as conn:
        head = conn.execute(
            "SELECT head_turn_id FROM sessions WHERE label = ?", (session,)
        ).fetchone()[0]
        return load_thread(conn, head)


def daemon_view(thread: Thread) -> list[Any]:
    """That thread as library items: the summary (a compaction turn's one message
    reads so), then every message it shows."""
    summary = [] if thread.summary is None else [{"role": "assistant", "content": thread.summary}]
    return summary + [
        {"role": role, "content": content}
        for turn in thread.turns
        for role, content, _ in turn.messages
    ]


def check_reads(store: SyncStore, session: str, want: list[Any]) -> None:
    """Every read of the library shows `want`: items, each last(n), each range, turns."""
    assert store.items(session) == want
    for n in range(1, len(want) + 2):
        assert store.last(session, n) == want[-n:], n
    for start in range(-len(want) - 1, len(want) + 1):
        assert store.items(session, start) == want[start:], start
    assert [i for t in store.turns(session) for i in t.items] == want


def daemon_turn(path: Path, session: str, texts: list[str], now: int) -> str:
    """A turn as the daemon commits one (ledger/turns.py commit_turn): its engine's
    own, plain-text messages, the session's count and time moved with its head."""
    rows = [(("user", "assistant")[seq % 2], text) for seq, text in enumerate(texts)]
    return _write_turn(path, session, ("turn", "completed", None, "echo"), rows, now)


def daemon_compaction(
    path: Path, session: str, summary: str, first_kept: str | None, now: int
) -> str:
    """A compaction turn as the daemon's compactor commits one (broker/mailbox/
    compactor.py, through ledger/turns.py commit_turn): on the head, its summary the
    turn's one assistant message and its `compactions` row, the turns from
    `first_kept` to the head kept verbatim (None: none kept)."""
    with ledger_db.connect(path, isolation_level=None) as conn:
        conn.execute("BEGIN IMMEDIATE")
        head = conn.execute(
            "SELECT head_turn_id FROM sessions WHERE label = ?", (session,)
        ).fetchone()[0]
        through = head
        if first_kept is not None:
            through = conn.execute(
                "SELECT parent_id FROM turns WHERE id = ?", (first_kept,)
            ).fetchone()[0]
        turn = new_id()
        rec = TurnRecord(
            turn_id=turn,
            session=session,
            parent_id=head,
            type="compaction",
            status="completed",
            reason="proactive",
            error=None,
            output=summary,
            engine="echo",
            model=None,
            started_at=now,
            completed_at=now,
            prompt_tokens=None,
            completion_tokens=None,
            inputs=[],
            item_status="done",
            output_tokens=len(summary.split()),
            compaction={
                "summary": summary,
                "summarized_through_turn_id": through,
                "first_kept_turn_id": first_kept,
                "turns_summarized": 1,
                "trigger": "proactive",
                "instructions": None,
                "model": None,
                "fallback": 1,
                "tokens_before": 100,
                "tokens_after": 50,
                "summary_tokens": len(summary.split()),
                "summarization_input_tokens": None,
                "summarization_output_tokens": None,
                "duration_ms": 0,
            },
        )
        commit_turn(conn, rec)
        conn.execute("COMMIT")
    conn.close()
    return turn


def daemon_aborted_turn(path: Path, session: str, inputs: list[str], output: str, now: int) -> str:
    """An interrupted turn as the daemon commits one (ledger/turns.py _write_turn with
    status 'aborted', as `recover_crashed` or an interrupt leaves it): its inputs as
    user messages, then its partial reply, if it had begun one."""
    kind = "turn" if len(inputs) == 1 else "queue_batch"
    rows = [("user", text) for text in inputs] + ([("assistant", output)] if output else [])
    return _write_turn(path, session, (kind, "aborted", "crash", ""), rows, now)


def _write_turn(
    path: Path,
    session: str,
    turn_row: tuple[str, str, str | None, str],
    rows: list[tuple[str, str]],
    now: int,
) -> str:
    """A turn of `turn_row` (type, status, reason, engine) holding `rows` (role,
    content) on the session's head, in one transaction as the daemon's writer does."""
    with ledger_db.connect(path, isolation_level=None) as conn:
        conn.execute("BEGIN IMMEDIATE")
        head = conn.execute(
            "SELECT head_turn_id FROM sessions WHERE label = ?", (session,)
        ).fetchone()[0]
        turn = new_id()
        conn.execute(
            "INSERT INTO turns (id, session_label, parent_id, type, status, reason, engine,"
            " started_at, completed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (turn, session, head, *turn_row, now, now),
        )
        conn.executemany(
            "INSERT INTO messages (turn_id, seq, role, content, created_at) VALUES (?, ?, ?, ?, ?)",
            [(turn, seq, role, text, now) for seq, (role, text) in enumerate(rows)],
        )
        conn.execute(
            "UPDATE sessions SET head_turn_id = ?, turns = turns + 1, updated_at = ?"
            " WHERE label = ?",
            (turn, now, session),
        )
        conn.execute("COMMIT")
    conn.close()
    return turn
