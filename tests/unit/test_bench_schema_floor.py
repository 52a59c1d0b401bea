"""bench.schema_floor measures the statements a Store append runs: the file it writes
holds what the same appends through a Store hold, a turn at a time or batched."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from bench.peers import items_of
from bench.schema_floor import floor
from ledger.api import Store
from tests import ledger_db

SESSIONS, TURNS = 3, 5


async def through_store(path: Path) -> None:
    async with await Store.open(path) as store:
        for s in range(SESSIONS):
            await store.create(f"s{s}")
        for t in range(TURNS):
            for s in range(SESSIONS):
                await store.append(f"s{s}", items_of(s, t))


async def threads(path: Path) -> list[list[object]]:
    async with await Store.open(path) as store:
        return [await store.items(f"s{s}") for s in range(SESSIONS)]


def rows(path: Path) -> list[tuple[object, ...]]:
    with ledger_db.connect(path) as conn:
        return conn.execute(
            "SELECT s.label, s.turns, count(DISTINCT t.id), count(m.id) FROM sessions s"
            " JOIN turns t ON t.session_label = s.label JOIN messages m ON m.turn_id = t.id"
            " GROUP BY s.label ORDER BY s.label"
        ).fetchall()


Chain = tuple[str, int, int, list[tuple[object, ...]], list[str]]


def chains(path: Path) -> list[Chain]:
    """Each session's turns from its head back along their parents, without the ids
    and times that differ between two runs, but with how the times agree; and the
    turns no head reaches (none)."""
    with ledger_db.connect(path) as conn:
        shown: list[Chain] = []
        for label, head, count, updated in conn.execute(
            "SELECT label, head_turn_id, turns, updated_at FROM sessions ORDER BY label"
        ).fetchall():
            turn, reached = head, set()
            chain: list[tuple[object, ...]] = []
            while turn is not None:
                reached.add(turn)
                *fields, parent, started = conn.execute(
                    "SELECT session_label, type, status, engine, prompt_tokens,"
                    " completion_tokens, started_at = completed_at, parent_id, started_at"
                    " FROM turns WHERE id = ?",
                    (turn,),
                ).fetchone()
                messages = conn.execute(
                    "SELECT seq, role, content, created_at = ? FROM messages WHERE turn_id = ?"
                    " ORDER BY seq",
                    (started, turn),
                ).fetchall()
                chain.append((*fields, messages))
                turn = parent
            at_head = conn.execute(
                "SELECT completed_at = ? FROM turns WHERE id = ?", (updated, head)
            ).fetchone()
            all_turns = conn.execute(
                "SELECT id FROM turns WHERE session_label = ?", (label,)
            ).fetchall()
            unreached = {t for (t,) in all_turns} - reached
            shown.append((label, count, at_head, chain, sorted(unreached)))
        return shown


@pytest.mark.parametrize(
    ("batched", "per_txn"),
    # 7 turns a transaction over 3 sessions: a session's later turns in one batch
    # take the one before them as their parent, not the head (schema_floor).
    [(False, 2), (True, 2), (True, 7)],
)
def test_the_floor_writes_what_the_store_writes(
    tmp_path: Path, batched: bool, per_txn: int
) -> None:
    bare, stored = tmp_path / "floor.db", tmp_path / "store.db"
    rate, cpu_us = floor(bare, SESSIONS, TURNS, per_txn, full_text=True, batched=batched)
    anyio.run(through_store, stored)

    assert rate > 0 and cpu_us > 0
    assert anyio.run(threads, bare) == anyio.run(threads, stored)
    assert (
        rows(bare) == rows(stored) == [(f"s{s}", TURNS, TURNS, 2 * TURNS) for s in range(SESSIONS)]
    )
    assert chains(bare) == chains(stored)
    assert all(len(chain) == TURNS and not left for *_, chain, left in chains(bare))
