"""What a library append returned survives a kill -9 of its process."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from ledger.api import SyncStore


def test_every_returned_append_survives_kill_9(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
                import anyio
                from ledger.api import Store

                async def main():
                    store = await Store.open({str(path)!r})
                    n = 0
                    while True:
                        await store.append("s", [n, {{"n": n}}])
                        print(n, flush=True)
                        n += 1

                anyio.run(main)
            """),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    acked = [int(child.stdout.readline()) for _ in range(300)]
    child.kill()
    child.wait(10)
    child.stdout.close()
    with SyncStore.open(path) as store:
        items = store.items("s")
    assert len(items) >= 2 * len(acked)  # everything acked, maybe a few more
    assert items[: 2 * len(acked)] == [x for n in acked for x in (n, {"n": n})]
