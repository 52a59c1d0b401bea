"""The library face's append, in process, counted by callgrind: instructions a turn
of `Store.append`, sequential or 200 tasks at once, per thread.

    .venv/bin/python -m bench.library_appends [--mode seq|once] [--sessions 200]

`bench.peers` times the same workload, but on a shared VM its turns/s move by 3x
between runs and its CPU µs by 20%, and it builds each turn's items inside the
timed loop. This builds a few turns' items before and reuses them, and runs the
appends (200 sessions, 5 turns each and then 20) under `valgrind --tool=callgrind
--separate-threads=yes`; the difference of the counts over the 3,000 turns
between, per thread, is what an append costs. Threads in the order they start:
1 the event loop's (the append, its transaction and commit: engine.py Rule 6),
2 the worker that opened the file (nothing a turn), 3 the WAL checkpointer's,
4 the writer thread's (idle unless a batch is handed to it). The checkpointer's
count moves by 20-30% between runs (how its passes fall); the loop's repeats to
about 1%. Compare two trees by running this in each (`PYTHONPATH`, as
`bench.instructions` says).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import anyio

from bench.peers import items_of

SHORT, LONG = 5, 20
TOTAL = "summary:"


async def appends(folder: Path, mode: str, sessions: int, turns: int) -> None:
    from ledger.api import Store

    pool = [items_of(s, t) for s in range(7) for t in range(3)]
    store = await Store.open(folder / "ledger.db")
    try:
        if mode == "seq":
            for turn in range(turns):
                for session in range(sessions):
                    await store.append(f"s{session}", pool[(session * 3 + turn) % len(pool)])
            return

        async def caller(session: int) -> None:
            for turn in range(turns):
                await store.append(f"s{session}", pool[(session * 3 + turn) % len(pool)])

        async with anyio.create_task_group() as tg:
            for session in range(sessions):
                tg.start_soon(caller, session)
    finally:
        await store.aclose()


def per_thread(mode: str, sessions: int, turns: int) -> dict[str, int]:
    """Instructions by thread (callgrind's numbering: 1 is the main thread)."""
    with tempfile.TemporaryDirectory(prefix="bla-", dir="/tmp") as tmp:
        out = Path(tmp) / "cg.out"
        command = [
            "valgrind", "--tool=callgrind", "--separate-threads=yes",
            f"--callgrind-out-file={out}", sys.executable, "-m", "bench.library_appends",
            "--run", str(turns), "--mode", mode, "--sessions", str(sessions),
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
    parser.add_argument("--mode", choices=("seq", "once"), default="seq")
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--run", type=int, help=argparse.SUPPRESS)  # one run, uncounted
    args = parser.parse_args()
    if args.run is not None:
        with tempfile.TemporaryDirectory(prefix="bla-", dir="/tmp") as folder:
            anyio.run(appends, Path(folder), args.mode, args.sessions, args.run)
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("bench.library_appends needs valgrind (Debian package valgrind)")
    short = per_thread(args.mode, args.sessions, SHORT)
    long = per_thread(args.mode, args.sessions, LONG)
    turns = args.sessions * (LONG - SHORT)
    names = {"01": "event loop", "02": "opening", "03": "checkpointer", "04": "writer"}
    for thread in sorted(set(short) | set(long)):
        diff = (long.get(thread, 0) - short.get(thread, 0)) / turns
        print(f"{args.mode}: thread {thread} ({names.get(thread, '?')}): {diff:,.0f} a turn")
    whole = (sum(long.values()) - sum(short.values())) / turns
    print(f"{args.mode}: whole process: {whole:,.0f} instructions a turn")


if __name__ == "__main__":
    main()
