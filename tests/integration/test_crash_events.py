"""Kill -9 mid-turn: every event written before the kill is kept, attached to the turn,
which the restart records as aborted (reason crash) with them (issue 21)."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.conftest import DaemonFactory
from tests.integration.wire import Adapter, operator

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.slow,
    pytest.mark.parametrize("anyio_backend", ["asyncio"]),
]

# The first run reports a decision every 20 ms, then hangs until it is killed with
# the daemon; the run after the restart (the marker file exists) answers at once.
ENGINE = textwrap.dedent("""
    import json, os, sys, time
    turn = json.loads(sys.stdin.readline())
    marker = sys.argv[1]
    def say(obj): print(json.dumps(obj), flush=True)
    if os.path.exists(marker):
        say({"type": "final", "text": "second run"})
        sys.exit(0)
    open(marker, "w").close()
    say({"type": "delta", "text": "thinking "})
    for n in range(1000):
        say({"type": "event", "event": "decision", "data": {"text": f"step {n}"}})
        time.sleep(0.02)
""")


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
async def test_kill_mid_turn_keeps_the_events_written_before_it(
    make_daemon: DaemonFactory, tmp_path: Path, backend: str
) -> None:
    program = tmp_path / "engine.py"
    program.write_text(ENGINE)
    marker = tmp_path / "ran-once"
    config = {
        "engine": {
            "kind": "subprocess",
            "command": [sys.executable, str(program), str(marker)],
            "timeout_s": 60,
        }
    }
    d = make_daemon(config, backend=backend)
    async with await Adapter.connect(d, "sms") as a:
        ack = await a.send_inbound("m1", "work through it", "+1", mode="followup")
    session = ack["session"]
    seen: list[dict[str, Any]] = []
    async with await operator(d) as op:
        with anyio.fail_after(15):
            while len(seen) < 20:  # written: an operator reads them from the ledger
                seen = await op.op("events.query", session=session, limit=1000)
                await anyio.sleep(0.02)
    d.kill()  # SIGKILL while the engine still reports
    d.start()
    async with await Adapter.connect(d, "sms") as a:
        rerun = await a.deliver(msg_id="m1")
        await a.confirm(rerun["out_id"])
    cut_off = seen[0]["turn"]
    assert {e["turn"] for e in seen} == {cut_off}
    async with await operator(d) as op:
        kept = await op.op("events.query", turn=cut_off, limit=1000)
        turns = (await op.op("session.show", session=session))["turns"]
    kept.reverse()
    # Every event read before the kill is there, unchanged, and nothing is missing
    # between them: the sequence runs from 0 without a gap.
    before = {(e["seq"], e["type"], str(e["payload"])) for e in seen}
    assert before <= {(e["seq"], e["type"], str(e["payload"])) for e in kept}
    assert [e["seq"] for e in kept] == list(range(len(kept)))
    assert kept[0]["type"] == "intent" and len(kept) >= len(seen) >= 20
    steps = [e["payload"]["text"] for e in kept if e["type"] == "decision"]
    assert steps == [f"step {n}" for n in range(len(steps))]
    aborted, again = turns
    assert (aborted["id"], aborted["status"], aborted["reason"]) == (cut_off, "aborted", "crash")
    assert aborted["outcome"].startswith("aborted (crash)")
    assert aborted["title"] == "work through it"
    assert (again["id"], again["status"], again["output"]) == (
        rerun["turn"],
        "completed",
        "second run",
    )
    async with await operator(d) as op:
        shown = await op.op("session.show", session=session)
        mine = await op.op("events.query", turn=rerun["turn"])
    # The totals count the aborted turn's events too.
    assert shown["totals"]["events"] == len(kept) + len(mine)
    assert [e["type"] for e in reversed(mine)] == ["intent", "llm"]
