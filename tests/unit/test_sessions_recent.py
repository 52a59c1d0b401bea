"""Sessions are listed latest first through the block of time each last changed in
(ledger/recent.py): the block always agrees with `updated_at`, whichever write moved it,
and the order read through the block's index is the order of `updated_at` itself."""

from __future__ import annotations

import ast
import re
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.identity import SessionSpec
from ledger import console, queries, resets
from ledger import turns as lt
from ledger.api import writes
from ledger.closing import close_session
from ledger.db import connect
from ledger.ingest import WriterCaches, WriterConnection, ingest
from ledger.port.records import InboundRecord, TurnRecord
from ledger.recent import BLOCK_BITS, block_of
from plumbing.ids import new_id

BLOCK = 1 << BLOCK_BITS
LEDGER = Path(__file__).resolve().parents[2] / "ledger"


@pytest.fixture
def conn(db_path: Path, ledger_template: Path) -> Iterator[sqlite3.Connection]:
    """A fresh ledger on the writer's connection, with its caches, as ingest needs."""
    shutil.copyfile(ledger_template, db_path)
    c = connect(db_path, factory=WriterConnection)
    yield c
    c.close()


def _agree(conn: sqlite3.Connection) -> None:
    rows = conn.execute("SELECT label, updated_at, updated_block FROM sessions").fetchall()
    assert rows
    assert all(block == block_of(at) for _, at, block in rows), rows


def _person_turn(conn: sqlite3.Connection, peer: str, now: int) -> str:
    """A person's message and its turn's commit at `now`, as the daemon's writer runs them."""
    msg = InboundRecord("chat", new_id(), peer, None, "dm", peer, None, "hi", None, None, None)
    assert isinstance(conn, WriterCaches)
    accepted = ingest(conn, conn.identity, msg, SessionSpec(None, None), now)
    item = next(i for i in lt.load_open_items(conn, accepted.session) if i.id == accepted.item)
    turn_id = new_id()
    lt.mark_running(conn, turn_id, [item.id], now)
    (head,) = conn.execute(
        "SELECT head_turn_id FROM sessions WHERE label = ?", (accepted.session,)
    ).fetchone()
    lt.commit_turn(
        conn,
        TurnRecord(
            turn_id=turn_id, session=accepted.session, parent_id=head, type="turn",
            status="completed", reason=None, error=None, output="hello", engine="echo",
            model=None, started_at=now, completed_at=now, prompt_tokens=None,
            completion_tokens=None, inputs=[item], item_status="done",
        ),
    )  # fmt: skip
    return accepted.session


def test_a_commit_writes_the_block_only_when_it_changes(conn: sqlite3.Connection) -> None:
    label = _person_turn(conn, "ann", 5 * BLOCK + 10)
    _agree(conn)
    seen: list[str] = []
    conn.set_trace_callback(seen.append)
    _person_turn(conn, "ann", 5 * BLOCK + 20)  # the same block: the index is left alone
    _person_turn(conn, "ann", 7 * BLOCK + 1)  # a later one: the block moves with it
    conn.set_trace_callback(None)
    moves = [s for s in seen if s.startswith("UPDATE sessions SET head_turn_id")]
    assert len(moves) == 3
    assert "updated_block = " not in moves[0].split("WHERE")[0]
    assert "updated_block = " in moves[2].split("WHERE")[0]
    _agree(conn)
    assert conn.execute(
        "SELECT turns, updated_block FROM sessions WHERE label = ?", (label,)
    ).fetchone() == (3, 7)


def test_every_write_of_updated_at_keeps_the_block(conn: sqlite3.Connection) -> None:
    at = 3 * BLOCK
    writes.create_session(conn, "lib", None, None, at)
    writes.append_turn(conn, "lib", [("user", '"hi"')], at + BLOCK, create=False)
    writes.append_turn(conn, "new", [("user", '"hi"')], at + 2 * BLOCK, create=True)
    writes.set_title(conn, "lib", "a title", None, at + 4 * BLOCK)
    label = _person_turn(conn, "bob", at + 5 * BLOCK)
    resets.reset(conn, label, "new", at + 6 * BLOCK)
    close_session(conn, "new", None, at + 8 * BLOCK)
    assert conn.execute("SELECT min(updated_block) FROM sessions").fetchone() == (7,)
    _agree(conn)


def test_the_listing_order_is_that_of_updated_at(conn: sqlite3.Connection) -> None:
    # Times that fall in few blocks and many, out of order, with ties.
    times = [9 * BLOCK + 5, 2 * BLOCK, 9 * BLOCK + 7, 9 * BLOCK + 5, 40 * BLOCK, 3, 2 * BLOCK + 1]
    for n, at in enumerate(times):
        writes.create_session(conn, f"s{n}", None, None, at)
    _agree(conn)
    expected = [
        label
        for label, _ in sorted(
            ((f"s{n}", at) for n, at in enumerate(times)), key=lambda x: (-x[1], x[0])
        )
    ]
    for limit, offset in ((3, 0), (3, 2), (10, 0), (2, 5)):
        page = console.sessions_page(conn, limit, offset)
        assert [row["label"] for row in page] == expected[offset : offset + limit]
    assert [s["label"] for s in queries.sessions_list(conn, None, 10)] == expected


def _statements(tree: ast.Module) -> Iterator[str]:
    """The SQL a module spells: its string literals and f-strings, whole, with the
    module-level string constants and the `+` joins of them resolved."""
    names: dict[str, str] = {}

    def text(node: ast.AST) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.JoinedStr):
            parts = [v.value if isinstance(v, ast.Constant) else "{}" for v in node.values]
            return "".join(str(p) for p in parts)
        if isinstance(node, ast.Name):
            return names.get(node.id)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = text(node.left), text(node.right)
            return left + right if left is not None and right is not None else None
        return None

    for stmt in tree.body:
        if not isinstance(stmt, ast.Assign) or not isinstance(stmt.targets[0], ast.Name):
            continue
        if (value := text(stmt.value)) is not None:
            names[stmt.targets[0].id] = value
    parts = {id(c) for n in ast.walk(tree) if isinstance(n, ast.BinOp) for c in (n.left, n.right)}
    for node in ast.walk(tree):
        if id(node) not in parts and (value := text(node)) is not None:
            yield " ".join(value.split())


def test_every_statement_that_writes_updated_at_writes_or_checks_the_block() -> None:
    """The block is `updated_at`'s, kept by every statement that writes `updated_at`
    (ledger/recent.py): a new one that forgets it fails here, not in a console's order."""
    writes_at = re.compile(
        r"UPDATE sessions SET .*\bupdated_at = .* WHERE |INSERT INTO sessions \(.*\bupdated_at\b"
    )
    found, missing = 0, []
    for path in sorted(LEDGER.rglob("*.py")):
        for sql in _statements(ast.parse(path.read_text())):
            if writes_at.search(sql):
                found += 1
                if "updated_block" not in sql:
                    missing.append(f"{path.relative_to(LEDGER.parent)}: {sql[:100]}")
    assert found >= 15, found  # the scan sees the ledger's statements
    assert not missing, missing
