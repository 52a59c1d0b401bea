"""An expiry batch stops once its time budget is used and sizes its groups from the
time its turns took (ledger/retention.py), on a clock the test moves."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ledger.api import SyncStore
from ledger.db import connect
from ledger.retention import BATCH_BUDGET_S, expire_batch


def a_session_of(path: Path, turns: int) -> None:
    with SyncStore.open(path) as store:
        store.create("s")
        for n in range(turns):
            store.append("s", [{"role": "user", "content": f"turn {n} words"}])


def ticking(step_s: float) -> tuple[Callable[[], float], list[float]]:
    """A clock that moves `step_s` at each reading, and the readings."""
    seen: list[float] = []

    def clock() -> float:
        seen.append(len(seen) * step_s)
        return seen[-1]

    return clock, seen


def expire_all(path: Path, step_s: float) -> list[int]:
    """Batches until the sweep is through: how many each expired."""
    conn = connect(path)
    try:
        counts, after = [], None
        while True:
            clock, _ = ticking(step_s)
            conn.execute("BEGIN IMMEDIATE")
            count, after = expire_batch(conn, 2**62, after, 1, clock=clock)
            conn.execute("COMMIT")
            counts.append(count)
            if after is None:
                return counts
    finally:
        conn.close()


def test_slow_turns_stop_a_batch_at_its_budget(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    a_session_of(path, 10)  # nine old turns and the head
    # A quarter of the budget a turn: four turns, one at a time, then the budget is used.
    counts = expire_all(path, BATCH_BUDGET_S / 4)
    assert counts == [4, 4, 1]


def test_quick_turns_go_in_growing_groups_within_one_batch(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    a_session_of(path, 40)
    clock, seen = ticking(BATCH_BUDGET_S / 100)
    conn = connect(path)
    try:
        conn.execute("BEGIN IMMEDIATE")
        count, after = expire_batch(conn, 2**62, None, 1, clock=clock)
        conn.execute("COMMIT")
    finally:
        conn.close()
    assert (count, after) == (39, None)  # all but the head
    assert len(seen) < 10  # a reading a group: 1, then ever larger groups
