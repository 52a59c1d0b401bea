"""bench.schema_floor measures the statements a Store append runs: the file it writes
holds what the same appends through a Store hold."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio

from bench.peers import items_of
from bench.schema_floor import floor
from ledger.api import Store

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
    with sqlite3.connect(path) as conn:
        return conn.execute(
            "SELECT s.label, s.turns, count(DISTINCT t.id), count(m.id) FROM sessions s"
            " JOIN turns t ON t.session_label = s.label JOIN messages m ON m.turn_id = t.id"
            " GROUP BY s.label ORDER BY s.label"
        ).fetchall()


def test_the_floor_writes_what_the_store_writes(tmp_path: Path) -> None:
    bare, stored = tmp_path / "floor.db", tmp_path / "store.db"
    rate, cpu_us = floor(bare, SESSIONS, TURNS, per_txn=2, full_text=True)
    anyio.run(through_store, stored)

    assert rate > 0 and cpu_us > 0
    assert anyio.run(threads, bare) == anyio.run(threads, stored)
    assert (
        rows(bare) == rows(stored) == [(f"s{s}", TURNS, TURNS, 2 * TURNS) for s in range(SESSIONS)]
    )
