"""bench.storage's breakdown: every page of the file is counted once, by its B-tree."""

from __future__ import annotations

from pathlib import Path

import anyio

from bench.storage import breakdown, file_bytes, write_plain, write_store


def test_the_breakdown_adds_up_to_the_file_and_names_the_ledgers_trees(tmp_path: Path) -> None:
    ours, plain = tmp_path / "store.db", tmp_path / "plain.db"
    anyio.run(write_store, ours, 3, 4)
    write_plain(plain, 3, 4)

    on_disk = file_bytes(ours)  # before the breakdown's reader, whose -shm stays behind
    trees = breakdown(ours)
    names = {name for name, _, _ in trees}
    assert {"messages", "turns", "turns_parent", "turns_session", "messages_fts_data"} <= names
    assert sum(size for _, size, _ in trees) == on_disk  # closed: no WAL left
    assert all(0.0 <= fill <= 1.0 for _, _, fill in trees)
    assert [size for _, size, _ in trees] == sorted((size for _, size, _ in trees), reverse=True)
    assert {name for name, _, _ in breakdown(plain)} >= {"items", "items_session"}
