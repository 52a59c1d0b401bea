"""The library face's append, in process, counted by callgrind: instructions a turn
of `Store.append` (or `LedgerSession.add_items`), sequential or 200 tasks at once,
per thread; or of a read of the last 30 items.

    .venv/bin/python -m bench.library_appends [--mode seq|once|read] [--sessions 200]
                                              [--face store|ledgersession]

`bench.peers` times the same workload, but on a shared VM its turns/s move by 3x
between runs and its CPU µs by 20%, and it builds each turn's items inside the
timed loop. This builds a few turns' items before and reuses them, and runs the
appends (200 sessions, 5 turns each and then 20) under `valgrind --tool=callgrind
--separate-threads=yes`; the difference of the counts over the 3,000 turns
between, per thread, is what an append costs. Threads in the order they start:
1 the event loop's (the append, its transaction and commit: engine.py),
2 the worker that opened the file (nothing a turn), 3 the WAL checkpointer's,
4 the writer thread's (idle unless a batch is handed to it). The checkpointer's
count moves by 20-30% between runs (how its passes fall); the loop's repeats to
about 1%. Compare two trees by running this in each (`PYTHONPATH`, as
`bench.instructions` says). `--mode read` appends 20 sessions x 50 turns
sequentially (each session's 100 items, as in bench.peers), then reads the last
30 items of a session 1,000 and then 4,000 times; the difference over the
3,000 reads.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Protocol

import anyio

from bench.peers import items_of

SHORT, LONG = 5, 20
READS_PER_TURN = 200  # --mode read: SHORT and LONG times this many reads,
READ_SESSIONS, READ_TURNS = 20, 50  # of sessions this long
TOTAL = "summary:"


class Face(Protocol):
    async def append(self, session: int, items: list[Any]) -> None: ...

    async def last30(self, session: int) -> list[Any]: ...

    async def aclose(self) -> None: ...


class StoreFace:
    def __init__(self, store: Any) -> None:
        self.store = store

    async def append(self, session: int, items: list[Any]) -> None:
        await self.store.append(f"s{session}", items)

    async def last30(self, session: int) -> list[Any]:
        return list(await self.store.last(f"s{session}", 30))

    async def aclose(self) -> None:
        await self.store.aclose()


class LedgerSessionFace:
    def __init__(self, path: Path, sessions: int) -> None:
        from ledger.integrations.openai_agents import LedgerSession

        self.sessions = [LedgerSession(f"s{n}", path=path) for n in range(sessions)]

    async def append(self, session: int, items: list[Any]) -> None:
        await self.sessions[session].add_items(items)

    async def last30(self, session: int) -> list[Any]:
        return list(await self.sessions[session].get_items(30))

    async def aclose(self) -> None:
        for session in self.sessions:
            session.close()


async def open_face(face: str, path: Path, sessions: int) -> Face:
    if face == "ledgersession":
        return LedgerSessionFace(path, sessions)
    from ledger.api import Store

    return StoreFace(await Store.open(path))


async def appends(folder: Path, mode: str, sessions: int, turns: int, face: str) -> None:
    pool = [items_of(s, t) for s in range(7) for t in range(3)]
    reads = 0
    if mode == "read":
        sessions, reads, turns = READ_SESSIONS, turns * READS_PER_TURN, READ_TURNS
    store = await open_face(face, folder / "ledger.db", sessions)
    try:
        if mode in ("seq", "read"):
            for turn in range(turns):
                for session in range(sessions):
                    await store.append(session, pool[(session * 3 + turn) % len(pool)])
            for n in range(reads):
                await store.last30(n % sessions)
            return

        async def caller(session: int) -> None:
            for turn in range(turns):
                await store.append(session, pool[(session * 3 + turn) % len(pool)])

        async with anyio.create_task_group() as tg:
            for session in range(sessions):
                tg.start_soon(caller, session)
    finally:
        await store.aclose()


def per_thread(mode: str, sessions: int, turns: int, face: str) -> dict[str, int]:
    """Instructions by thread (callgrind's numbering: 1 is the main thread)."""
    with tempfile.TemporaryDirectory(prefix="bla-", dir="/tmp") as tmp:
        out = Path(tmp) / "cg.out"
        command = [
            "valgrind", "--tool=callgrind", "--separate-threads=yes",
            f"--callgrind-out-file={out}", sys.executable, "-m", "bench.library_appends",
            "--run", str(turns), "--mode", mode, "--sessions", str(sessions), "--face", face,
        ]  # fmt: skip
        subprocess.run(command, capture_output=True, text=True, check=True)
        counts = {}
        for part in sorted(Path(tmp).glob("cg.out-*")):
            for line in part.read_text().splitlines():
                if line.startswith(TOTAL):
                    counts[part.name.rsplit("-", 1)[1]] = int(line.split()[1])
        if not counts:
            raise RuntimeError("callgrind wrote no per-thread totals")
        return counts


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--mode", choices=("seq", "once", "read"), default="seq")
    parser.add_argument("--face", choices=("store", "ledgersession"), default="store")
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--run", type=int, help=argparse.SUPPRESS)  # one run, uncounted
    args = parser.parse_args()
    if args.run is not None:
        with tempfile.TemporaryDirectory(prefix="bla-", dir="/tmp") as folder:
            anyio.run(appends, Path(folder), args.mode, args.sessions, args.run, args.face)
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("bench.library_appends needs valgrind (Debian package valgrind)")
    short = per_thread(args.mode, args.sessions, SHORT, args.face)
    long = per_thread(args.mode, args.sessions, LONG, args.face)
    turns = (READS_PER_TURN if args.mode == "read" else args.sessions) * (LONG - SHORT)
    what, unit = f"{args.face} {args.mode}", "a read" if args.mode == "read" else "a turn"
    names = {"01": "event loop", "02": "opening", "03": "checkpointer", "04": "writer"}
    for thread in sorted(set(short) | set(long)):
        diff = (long.get(thread, 0) - short.get(thread, 0)) / turns
        print(f"{what}: thread {thread} ({names.get(thread, '?')}): {diff:,.0f} {unit}")
    whole = (sum(long.values()) - sum(short.values())) / turns
    print(f"{what}: whole process: {whole:,.0f} instructions {unit}")


if __name__ == "__main__":
    main()
