"""The writer's side of a turn, in process, counted by callgrind: with and without
the broker's own events (issue 21's `intent` and `llm`).

    .venv/bin/python -m bench.writer_turns [--events both|none] [--text 30] [--off PART]

`bench.instructions` counts the whole daemon and writer; this isolates the ledger
work of one echo turn (ingest, mark running, commit with its state record and
events, four turns a transaction over 100 sessions, the record made as the daemon
makes it, with its summary and on a session's first turn its system prompt, pickled
and unpickled as on its way to the writer process) so a change to the event rows
shows without the batching noise of a live daemon. Each count runs twice under
`valgrind --tool=callgrind`, 200 and 1,000 turns, and prints the difference over
800: instructions per turn. `--text`: characters of each person's message (the
`intent` repeats up to 500 of them). `--off`: the loop without one part of a turn's
work, for its share (docs/performance.md, "The per-turn cost of round 2's features"):
`state` (no state record), `parent-read` (a parent's record not in the writer's
memory taken as empty instead of read: ledger/state_records.py), `activity`
(no note of the person's activity). `--fenced`: each turn's writes fenced by its
session's lease, as a clustered turn's are (ledger/port/fencing.py), for the check's
cost.
"""

from __future__ import annotations

import argparse
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from broker.mailbox.turn_parts import ARCHIVE_LINES
from core import turn_events as te
from core import turn_summary
from core.identity import SessionSpec
from core.session_state import EMPTY
from ledger import ingest as li
from ledger import leases, state_records
from ledger import turns as lt
from ledger.db import connect, migrate
from ledger.ingest import WriterCaches, WriterConnection, ingest
from ledger.port.records import InboundRecord, TurnRecord
from plumbing.ids import new_id

SESSIONS, BATCH = 100, 4
COLLECTED = re.compile(r"Collected : (\d+)")
OFF = ("state", "parent-read", "activity")


def switch_off(part: str | None) -> None:
    """Replace the part's function with one that does nothing (this process only)."""
    if part == "state":
        lt.record_turn_state = lambda conn, rec: EMPTY  # type: ignore[attr-defined]
    elif part == "parent-read":
        state_records.state_at = lambda conn, turn_id: EMPTY
    elif part == "activity":
        li.on_person_message = lambda *args: None  # type: ignore[attr-defined]


def events_of(item: Any, kind: str) -> list[te.Event]:
    if kind == "none":
        return []
    sender = item.sender_name or item.sender_id
    return [
        ("intent", te.intent_payload([(item.msg_id, sender, item.content)])),
        ("llm", te.llm_payload("echo", None, None, 1, "end_turn")),
    ]


def fence(c: Any, tokens: dict[str, int] | None, session: str, now: int) -> tuple[Any, ...]:
    """The leading arguments that fence a job of `session` (none unfenced), its lease
    taken at its first turn."""
    if tokens is None:
        return ()
    if session not in tokens:
        tokens[session] = leases.take(c, session, "bench", now, 1 << 40).token
    return (session, tokens[session])


def run(turns: int, kind: str, text_chars: int, fenced: bool = False) -> None:
    with tempfile.TemporaryDirectory(prefix="wt-", dir="/tmp") as tmp:
        c = connect(Path(tmp) / "ledger.db", factory=WriterConnection)  # with its caches
        assert isinstance(c, WriterCaches)  # on either driver (ledger/port/cipher.py)
        migrate(c)
        cache, heads, now = c.identity, dict[str, str](), 1_000
        tokens: dict[str, int] | None = {} if fenced else None
        mark_running: Any = leases.fenced if fenced else lt.mark_running
        commit_turn: Any = leases.fenced if fenced else lt.commit_turn
        wrapped: tuple[Any, ...] = (lt.mark_running,) if fenced else ()
        committed: tuple[Any, ...] = (lt.commit_turn,) if fenced else ()
        for first in range(0, turns, BATCH):
            c.execute("BEGIN IMMEDIATE")
            accepted = []
            for n in range(first, first + BATCH):
                peer = f"u{n % SESSIONS}"
                text = (f"m{n}: the quick brown fox " * (text_chars // 20 + 1))[:text_chars]
                msg = InboundRecord(
                    "chat", f"m{n}", peer, None, "dm", peer, None, text, None, None, None
                )
                accepted.append(ingest(c, cache, msg, SessionSpec(None, None), now))
            c.execute("COMMIT")
            items = {i.id: i for i in lt.load_open_items(c)}
            ids = [new_id() for _ in accepted]
            c.execute("BEGIN IMMEDIATE")
            for a, turn_id in zip(accepted, ids, strict=True):
                held = fence(c, tokens, a.session, now)
                mark_running(c, *held, *wrapped, turn_id, [a.item], now)
            c.execute("COMMIT")
            records = []
            for a, turn_id in zip(accepted, ids, strict=True):
                item = items[a.item]
                output, events = "echo: " + item.content, events_of(item, kind)
                rec = TurnRecord(
                    turn_id=turn_id, session=a.session, parent_id=heads.get(a.session),
                    type="turn", status="completed", reason=None, error=None,
                    output=output, engine="echo", model=None,
                    started_at=now, completed_at=now + 1, prompt_tokens=None,
                    completion_tokens=None, inputs=[item], item_status="done",
                    outbox=(new_id(), "chat", '{"type":"deliver","text":"x"}'),
                    input_tokens=[10], output_tokens=12, events=events,
                    title="t", title_source="mechanical", outcome="completed",
                    # made on the daemon's side, as broker/mailbox/turn_parts.py does
                    summary=turn_summary.summarize("completed", output, [], events),
                    # and the prompt with a session's first turn, as an actor sends it
                    system_prompt=ARCHIVE_LINES if a.session not in heads else None,
                )  # fmt: skip
                records.append(pickle.loads(pickle.dumps(rec, protocol=5)))
            c.execute("BEGIN IMMEDIATE")
            for rec in records:
                commit_turn(c, *fence(c, tokens, rec.session, now), *committed, rec)
                heads[rec.session] = rec.turn_id
            c.execute("COMMIT")
            now += 10
        c.close()


def counted(turns: int, kind: str, text_chars: int, off: str | None, fenced: bool = False) -> int:
    command = [
        "valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
        "-m", "bench.writer_turns", "--run", str(turns), "--events", kind,
        "--text", str(text_chars), *(["--off", off] if off else []),
        *(["--fenced"] if fenced else []),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    found = COLLECTED.search(done.stderr)
    if found is None:
        raise RuntimeError(f"no callgrind total:\n{done.stderr[-2000:]}")
    return int(found[1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--events", choices=("both", "none"), default="both")
    parser.add_argument("--text", type=int, default=30)
    parser.add_argument("--off", choices=OFF)
    parser.add_argument("--fenced", action="store_true")
    parser.add_argument("--run", type=int, help=argparse.SUPPRESS)  # one run, uncounted
    args = parser.parse_args()
    if args.run is not None:
        switch_off(args.off)
        run(args.run, args.events, args.text, args.fenced)
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("bench.writer_turns needs valgrind (Debian package valgrind)")
    short = counted(200, args.events, args.text, args.off, args.fenced)
    long = counted(1000, args.events, args.text, args.off, args.fenced)
    print(
        f"events {args.events}, text {args.text} chars, off {args.off or '-'},"
        f" fenced {'yes' if args.fenced else 'no'}:"
        f" {(long - short) / 800:,.0f} instructions per turn"
    )


if __name__ == "__main__":
    main()
