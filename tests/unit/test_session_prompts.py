"""A session's system prompt lives off its session row (the `session_prompts`
migration): the migration moves each kept prompt over, and a prompt goes with its
session."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from ledger.db import connect, load_migrations, migrate
from ledger.port import cipher
from ledger.queries import session_show

MIGRATION = "session_prompts"
PROMPT = "You are brief.\n\nOlder turns of this conversation are kept in its archive."


def _session(conn: sqlite3.Connection, label: str, prompt: str | None = None) -> None:
    columns = "label, kind, origin, status, created_at, updated_at"
    values: tuple[object, ...] = (label, "dm", "inbound", "active", 1, 1)
    if prompt is not None:
        columns, values = f"{columns}, system_prompt", (*values, prompt)
    conn.execute(
        f"INSERT INTO sessions ({columns}) VALUES ({', '.join('?' * len(values))})", values
    )


def _before_the_move(path: Path) -> sqlite3.Connection:
    """A ledger at the schema just before the migration."""
    conn = connect(path)
    for migration in load_migrations():
        if migration.name == MIGRATION:
            break
        conn.executescript(
            f"BEGIN IMMEDIATE;\n{migration.sql}\n"
            f"PRAGMA user_version = {migration.version};\nCOMMIT;"
        )
    else:
        pytest.fail(f"no migration named {MIGRATION}")
    return conn


def test_the_migration_moves_each_kept_prompt_off_the_session_row(tmp_path: Path) -> None:
    conn = _before_the_move(tmp_path / "ledger.db")
    _session(conn, "dm:a", PROMPT)
    _session(conn, "dm:b")
    assert migrate(conn)[0].endswith(MIGRATION)
    columns = [r[1] for r in conn.execute("PRAGMA table_info(sessions)")]
    assert "system_prompt" not in columns and "model" in columns
    assert conn.execute("SELECT session_label, system_prompt FROM session_prompts").fetchall() == [
        ("dm:a", PROMPT)
    ]
    assert session_show(conn, "dm:a", 5)["system_prompt"] == PROMPT
    assert session_show(conn, "dm:b", 5)["system_prompt"] is None


def test_a_prompt_goes_with_its_session(tmp_path: Path) -> None:
    conn = connect(tmp_path / "ledger.db")
    migrate(conn)
    for label in ("dm:a", "dm:b"):
        _session(conn, label)
        conn.execute(
            "INSERT INTO session_prompts (session_label, system_prompt) VALUES (?, ?)",
            (label, PROMPT),
        )
    conn.execute("DELETE FROM sessions WHERE label = 'dm:a'")  # as erasure and delete do
    assert conn.execute("SELECT session_label FROM session_prompts").fetchall() == [("dm:b",)]
    with pytest.raises(cipher.IntegrityError):  # never a prompt of no session
        conn.execute(
            "INSERT INTO session_prompts (session_label, system_prompt) VALUES ('dm:z', 'x')"
        )
