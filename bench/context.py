"""Context assembly on a long session, and the cost of events and totals per turn.

    .venv/bin/python -m bench.context

(1) `assemble` for a session of 100,000 messages (50,000 turns of 2 messages,
    token counts cached as the actor keeps them), 128k window.
(2) `commit_turn` on a real ledger file, with no events and with 6 typed
    events (which also update the running totals in the same statement).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from core.packing import ContextInput, Msg, TurnBlock, assemble
from ledger.db import connect, migrate
from ledger.port.records import TurnRecord
from ledger.turns import commit_turn
from plumbing.ids import new_id, now_ms


def bench_assembly(turns: int = 50_000) -> list[float]:
    history = tuple(
        TurnBlock(
            f"t{n}",
            (
                Msg("user", "question " * 10, 60, turn_id=f"t{n}"),
                Msg("assistant", "answer " * 25, 140, turn_id=f"t{n}"),
            ),
        )
        for n in range(turns)
    )
    ctx = ContextInput(
        window=128_000,
        reserve_reply=8_000,
        system=Msg("system", "s", 3000),
        state=Msg("system", "state", 300),
        summary=Msg("system", "sum", 200),
        history=history,
        inputs=(Msg("user", "now", 20),),
    )
    times = []
    for _ in range(50):
        t0 = time.perf_counter()
        assemble(ctx)
        times.append((time.perf_counter() - t0) * 1000)
    return times


EVENTS = [
    ("intent", {"text": "fix the bug"}),
    ("file", {"path": "a.py", "op": "edit"}),
    ("error", {"text": "test fails"}),
    ("decision", {"text": "x", "resolves": "test"}),
    ("action", {"tool": "t", "status": "ok"}),
    ("llm", {"model": "m"}),
]


def bench_commits(with_events: bool, turns: int = 3000) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        conn = connect(Path(tmp) / "l.db")
        migrate(conn)
        now = now_ms()
        conn.execute(
            "INSERT INTO sessions (label, kind, origin, created_at, updated_at)"
            " VALUES ('s', 'dm', 'inbound', ?, ?)",
            (now, now),
        )
        head: str | None = None
        t0 = time.perf_counter()
        for _ in range(turns):
            turn = new_id()
            rec = TurnRecord(
                turn_id=turn,
                session="s",
                parent_id=head,
                type="turn",
                status="completed",
                reason=None,
                error=None,
                output="reply text",
                engine="echo",
                model="m",
                started_at=now,
                completed_at=now,
                prompt_tokens=10,
                completion_tokens=5,
                inputs=[],
                item_status="done",
                events=list(EVENTS) if with_events else [],
            )
            conn.execute("BEGIN")
            commit_turn(conn, rec)
            conn.execute("COMMIT")
            head = turn
        per_turn = (time.perf_counter() - t0) / turns * 1e6
        conn.close()
        return per_turn


def main() -> None:
    times = bench_assembly()
    print(
        f"assemble, 100,000 messages: p50 {statistics.median(times):.2f} ms, "
        f"max {max(times):.2f} ms"
    )
    plain, evented = bench_commits(False), bench_commits(True)
    print(
        f"commit_turn: {plain:.0f} us without events, {evented:.0f} us with 6 events "
        f"and totals (+{evented - plain:.0f} us a turn; one commit a turn, no group commit)"
    )


if __name__ == "__main__":
    main()
