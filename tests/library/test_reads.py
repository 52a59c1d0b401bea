"""The last N items (reads.py Rules 2, 2a) against the whole thread, over threads of
every shape: turns of zero to three items, pops, clears, compactions, and turns a
daemon wrote (plain messages; empty turns) between the library's."""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.api import SyncStore
from ledger.ids import new_id

Step = tuple[str, int]
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 3)),
        st.tuples(st.sampled_from(["pop", "clear", "compact"]), st.just(0)),
        st.tuples(st.just("daemon"), st.integers(0, 3)),
    ),
    max_size=40,
)


def daemon_turn(path: Path, session: str, texts: list[str]) -> None:
    """A turn as the daemon writes one: its engine's own, its messages plain text."""
    with sqlite3.connect(path, isolation_level=None) as conn:
        conn.execute("BEGIN IMMEDIATE")
        head = conn.execute(
            "SELECT head_turn_id FROM sessions WHERE label = ?", (session,)
        ).fetchone()[0]
        turn = new_id()
        conn.execute(
            "INSERT INTO turns (id, session_label, parent_id, type, status, engine,"
            " started_at, completed_at) VALUES (?, ?, ?, 'turn', 'completed', 'echo', 1, 1)",
            (turn, session, head),
        )
        for seq, text in enumerate(texts):
            conn.execute(
                "INSERT INTO messages (turn_id, seq, role, content, created_at)"
                " VALUES (?, ?, 'user', ?, 1)",
                (turn, seq, text),
            )
        conn.execute("UPDATE sessions SET head_turn_id = ? WHERE label = ?", (turn, session))
        conn.execute("COMMIT")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=STEPS)
def test_the_last_n_items_are_the_threads_last_n(steps: list[Step]) -> None:
    with tempfile.TemporaryDirectory(prefix="reads-") as folder:
        path = Path(folder) / "ledger.db"
        with SyncStore.open(path) as store:
            store.create("s")
            for number, (op, size) in enumerate(steps):
                if op == "append":
                    store.append("s", [{"n": number, "k": k} for k in range(size)])
                elif op == "pop":
                    store.pop("s")
                elif op == "clear":
                    store.clear("s")
                elif op == "compact":
                    store.compact("s", lambda items: [f"summary of {len(items)}"])
                else:
                    daemon_turn(path, "s", [f"said {number}.{k}" for k in range(size)])
            whole = store.items("s")
            for n in (1, 2, 3, 5, 30):
                assert store.last("s", n) == whole[-n:], n
            assert store.last("s", 0) == []


def test_a_thread_that_ends_in_empty_turns_reads_past_them(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with SyncStore.open(path) as store:
        for n in range(5):
            store.append("s", [n, n])
        for _ in range(4):  # deeper than the first walk's bound for 4 items
            store.append("s", [])
        assert store.last("s", 4) == [3, 3, 4, 4]
        daemon_turn(path, "s", ["plain"])
        assert store.last("s", 3) == [4, 4, {"role": "user", "content": "plain"}]


def test_a_pop_of_a_daemon_turn_keeps_the_rest_of_it_readable(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with SyncStore.open(path) as store:
        store.append("s", ["mine"])
        daemon_turn(path, "s", ["asked", "answered"])
        assert store.pop("s") == {"role": "user", "content": "answered"}
        asked = {"role": "user", "content": "asked"}
        assert store.items("s") == ["mine", asked]
        assert store.last("s", 1) == [asked]
