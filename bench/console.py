"""The web console's pages on a large ledger: p50 / p99 of each page, served by the daemon.

    .venv/bin/python -m bench.console [--sessions 10000] [--turns 50] [--repeat 50]
                                      [--path /tmp/agent-broker-bench/console.db] [--rebuild]

The ledger is built once and cached at `--path`: `--sessions` people, each with
a contact on `sms`, a DM session of `--turns` turns (a chain, its head the
last), each turn one user and one assistant message, so 10,000 sessions of 50
turns hold 1,000,000 messages. Rows go in with executemany in one transaction,
then the full-text index is built in one statement, as bench.recall does.

A daemon is started on a copy-free path to it with the console on, and each
page is fetched `--repeat` times over one keep-alive connection: the first
page of sessions, the tenth page, a session's page (its 50 turns as a tree), a
turn's page, and the operations page. Target: every page under 200 ms at p99.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from core.ids import UlidSequence
from ledger.db import connect, migrate
from ledger.fts import index_new_messages
from tests.harness import DaemonProcess
from tests.integration.observe_servers import free_port

VERSION = "2"  # the ledger it builds: a new one when its schema changes
START_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z
TOKEN = "bench-console-token-0123456789"
WORDS = "the turn asks for a summary of the build log and the failing test".split()  # noqa: SIM905


def build(path: Path, sessions: int, turns: int) -> None:
    tmp = path.with_name(path.name + ".building")
    for p in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
        p.unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = connect(tmp, "NORMAL")
    migrate(conn)
    rng = random.Random(7)
    ids = UlidSequence()
    msg_id = 0
    conn.execute("BEGIN")
    conn.execute("CREATE TABLE bench_meta (key TEXT PRIMARY KEY, value TEXT)")
    for first in range(0, sessions, 500):
        people: list[tuple[object, ...]] = []
        contacts: list[tuple[object, ...]] = []
        rows: list[tuple[object, ...]] = []
        turn_rows: list[tuple[object, ...]] = []
        msg_rows: list[tuple[object, ...]] = []
        for n in range(first, min(sessions, first + 500)):
            entity = f"ent_bench{n:06d}"
            label = f"dm:{entity}"
            at = START_MS + n * 1000
            people.append((entity, f"Person {n}", at))
            contacts.append((f"+{n}", entity, f"Person {n}", at))
            parent: str | None = None
            for t in range(turns):
                turn = ids.next(at + t * 60_000, lambda: rng.getrandbits(80))
                began = at + t * 60_000
                text = " ".join(rng.choice(WORDS) for _ in range(12))
                turn_rows.append((turn, label, parent, began, began + 900, text[:60], text))
                msg_rows.append((msg_id + 1, turn, 0, "user", text, began))
                msg_rows.append((msg_id + 2, turn, 1, "assistant", text, began + 900))
                msg_id += 2
                parent = turn
            rows.append((label, entity, parent, turns, at, at + turns * 60_000))
        conn.executemany(
            "INSERT INTO entities (id, kind, name, created_at) VALUES (?, 'contact', ?, ?)",
            people,
        )
        conn.executemany(
            "INSERT INTO contacts (channel, sender_id, entity_id, display_name, created_at)"
            " VALUES ('sms', ?, ?, ?, ?)",
            contacts,
        )
        conn.executemany(
            "INSERT INTO turns (id, session_label, parent_id, type, status, engine, started_at,"
            " completed_at, prompt_tokens, completion_tokens, title, output)"
            " VALUES (?1, ?2, ?3, 'turn', 'completed', 'bench', ?4, ?5, 40, 20, ?6, ?7)",
            turn_rows,
        )
        conn.executemany(
            "INSERT INTO messages (id, turn_id, seq, role, content, created_at)"
            " VALUES (?,?,?,?,?,?)",
            msg_rows,
        )
        conn.executemany(
            "INSERT INTO sessions (label, kind, entity_id, head_turn_id, origin, turns,"
            " created_at, updated_at, updated_block)"
            " VALUES (?1, 'dm', ?2, ?3, 'inbound', ?4, ?5, ?6, ?6 >> 20)",
            rows,
        )
    index_new_messages(conn)
    conn.execute(
        "INSERT INTO bench_meta VALUES ('version', ?), ('sessions', ?), ('turns', ?)",
        (VERSION, sessions, turns),
    )
    conn.execute("COMMIT")
    conn.execute("ANALYZE")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    tmp.replace(path)


def cached(path: Path, sessions: int, turns: int, rebuild: bool) -> bool:
    if rebuild or not path.exists():
        return False
    with contextlib.closing(sqlite3.connect(path)) as conn:
        try:
            meta = dict(conn.execute("SELECT key, value FROM bench_meta").fetchall())
        except sqlite3.Error:
            return False
    return meta == {"version": VERSION, "sessions": str(sessions), "turns": str(turns)}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--turns", type=int, default=50, help="per session (2 messages each)")
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--path", type=Path, default=Path("/tmp/agent-broker-bench/console.db"))
    parser.add_argument("--rebuild", action="store_true")
    args = parser.parse_args()
    if not cached(args.path, args.sessions, args.turns, args.rebuild):
        began = time.monotonic()
        build(args.path, args.sessions, args.turns)
        print(f"built {args.path} in {time.monotonic() - began:.0f} s")
    messages = args.sessions * args.turns * 2
    print(f"ledger: {args.sessions} sessions, {messages} messages, {args.path}")
    with tempfile.TemporaryDirectory(prefix="bc-", dir="/tmp") as tmp:
        tokens = Path(tmp) / "tokens"
        tokens.write_text(f"read {TOKEN}\n")
        tokens.chmod(0o600)
        port = free_port()
        config = {
            "log_level": "warning",
            "ledger": {"path": str(args.path)},
            "console": {"address": f"127.0.0.1:{port}", "token_file": str(tokens)},
        }
        with (
            DaemonProcess(Path(tmp), config),
            contextlib.closing(sqlite3.connect(f"file:{args.path}?mode=ro", uri=True)) as db,
        ):
            label, head = db.execute(
                "SELECT label, head_turn_id FROM sessions ORDER BY label LIMIT 1 OFFSET ?",
                (args.sessions // 2,),
            ).fetchone()
            pages = {
                "sessions, first page": "/",
                "sessions, tenth page": "/?page=9",
                f"a session ({args.turns} turns)": f"/session?s={label}",
                "a turn": f"/turn?s={label}&t={head}",
                "operations": "/ops",
            }
            headers = {"authorization": f"Bearer {TOKEN}"}
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers) as http:
                for name, path in pages.items():
                    assert http.get(path).status_code == 200, path  # warm
                    took = []
                    for _ in range(args.repeat):
                        began = time.perf_counter()
                        answer = http.get(path)
                        took.append((time.perf_counter() - began) * 1000)
                        assert answer.status_code == 200
                    print(
                        f"    {name:<28} p50 {statistics.median(took):7.1f} ms"
                        f"   p99 {pct(took, 0.99):7.1f} ms"
                    )


if __name__ == "__main__":
    main()
