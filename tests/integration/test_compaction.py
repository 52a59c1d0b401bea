"""Compaction: proactive before overflow, a hung summarizer, manual, reactive.

Whatever triggers it, a compaction is recorded before the turn it serves
starts: no two turns of a session overlap in the ledger's times (docs/turns.md).
"""

from __future__ import annotations

import contextlib
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from tests import ledger_checks as lc
from tests.conftest import DaemonFactory
from tests.harness import DaemonProcess
from wire.client import BrokerClient, BrokerError

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]
SMALL = {"context_window": 400, "reserve_reply_tokens": 60, "keep_recent_ratio": 0.25}
WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike"


async def chat(d: DaemonProcess, texts: list[str], sender: str = "+1") -> list[dict[str, Any]]:
    replies = []
    async with await BrokerClient.connect(d.socket, role="adapter", channel="sms") as c:
        for n, text in enumerate(texts):
            await c.send(
                {
                    "type": "inbound",
                    "req": str(n),
                    "msg_id": f"{sender}-{n}-{text[:8]}",
                    "sender_id": sender,
                    "peer_kind": "dm",
                    "text": text,
                    "queue_mode": "followup",
                }
            )
            with anyio.fail_after(20):
                while (frame := await c.recv())["type"] != "deliver":
                    pass
            await c.send({"type": "delivered", "out_id": frame["out_id"]})
            replies.append(frame)
    return replies


def rows(d: DaemonProcess, sql: str) -> list[tuple[Any, ...]]:
    with contextlib.closing(d.db()) as db:
        return db.execute(sql).fetchall()


def overlaps(d: DaemonProcess) -> list[str]:
    """Turns of one session that overlap in time, on the thread or off it."""
    with contextlib.closing(d.db()) as db:
        view = lc.load(db)
    return lc.check_no_overlap(view) + lc.check_serial_turns(view)


async def test_proactive_compaction_keeps_a_long_chat_working(make_daemon: DaemonFactory) -> None:
    # A few ms per engine call (the summarizer's too), so an overlap shows in ms.
    d = make_daemon({"engine": {**SMALL, "delay_ms": 5}})
    texts = [f"message {n}: {WORDS}" for n in range(14)]
    replies = await chat(d, texts)
    assert [r["status"] for r in replies] == ["final"] * len(texts)
    assert [r["text"] for r in replies] == texts
    compactions = rows(
        d,
        "SELECT trigger, turns_summarized, tokens_before, tokens_after,"
        " summary_tokens, fallback, first_kept_turn_id FROM compactions",
    )
    assert compactions, "a window of 400 tokens must have forced a compaction"
    for trigger, summarized, before, after, summary_tokens, fallback, _ in compactions:
        assert trigger == "proactive" and summarized >= 1 and after < before
        assert summary_tokens > 0
        assert fallback == 1  # the echo engine's "summary" is the whole prompt: too long
    types = [r[0] for r in rows(d, "SELECT type FROM turns ORDER BY started_at")]
    assert types.count("compaction") == len(compactions)
    assert rows(d, "SELECT count(*) FROM turns WHERE status != 'completed'") == [(0,)]
    # every message's token count was stored when it was written
    with contextlib.closing(d.db()) as db:
        assert db.execute("SELECT count(*) FROM messages WHERE tokens IS NULL").fetchone() == (0,)
    async with await BrokerClient.connect(d.socket) as op:
        shown = await op.op("session.show", session=replies[0]["session"])
    assert "compaction" in [t["type"] for t in shown["turns"]]
    assert overlaps(d) == []


HANGING = textwrap.dedent("""
    import json, sys, time
    turn = json.loads(sys.stdin.readline())
    if "compact a conversation" in (turn["system"] or ""):
        time.sleep(3600)  # a summarizer that hangs
    text = "\\n".join(m["content"] for m in turn["inputs"])
    print(json.dumps({"type": "final", "text": text}), flush=True)
""")


async def test_hung_summarizer_falls_back_in_bounded_time(
    make_daemon: DaemonFactory, tmp_path: Path
) -> None:
    program = tmp_path / "engine.py"
    program.write_text(HANGING)
    d = make_daemon(
        {
            "engine": {
                **SMALL,
                "kind": "subprocess",
                "compaction_timeout_s": 1.0,
                "command": [sys.executable, str(program)],
            }
        }
    )
    replies = await chat(d, [f"message {n}: {WORDS}" for n in range(10)])
    assert [r["status"] for r in replies] == ["final"] * 10
    found = rows(d, "SELECT fallback, duration_ms FROM compactions")
    assert found and all(f == 1 and ms < 5000 for f, ms in found)


async def test_manual_compaction(make_daemon: DaemonFactory) -> None:
    d = make_daemon()
    replies = await chat(d, ["first thing", "second thing", "third thing"])
    session = replies[0]["session"]
    async with await BrokerClient.connect(d.socket) as op:
        done = await op.op("session.compact", session=session, instructions="keep names")
        shown = await op.op("session.show", session=session)
        with pytest.raises(BrokerError) as nothing:  # everything is summarized already
            await op.op("session.compact", session=session)
    assert shown["head"] == done["turn"] and shown["turns"][-1]["type"] == "compaction"
    assert rows(d, "SELECT trigger, instructions, turns_summarized FROM compactions") == [
        ("manual", "keep names", 3)
    ]
    assert nothing.value.code == "invalid" and "no history" in str(nothing.value)
    after = await chat(d, ["/compact"])
    assert after[0]["text"].startswith("Compacting")
    more = await chat(d, ["fourth thing"])
    assert more[0]["text"] == "fourth thing"
    assert overlaps(d) == []


OVERFLOW = textwrap.dedent("""
    import json, sys
    turn = json.loads(sys.stdin.readline())
    if "compact a conversation" in (turn["system"] or ""):
        print(json.dumps({"type": "final", "text": "short summary"}), flush=True)
    elif len(turn["history"]) > 4:
        print(json.dumps({"type": "error", "code": "context_overflow",
                          "message": "maximum context length exceeded"}), flush=True)
    else:
        text = "\\n".join(m["content"] for m in turn["inputs"])
        print(json.dumps({"type": "final", "text": text}), flush=True)
""")


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
async def test_reactive_compaction_retries_once(
    make_daemon: DaemonFactory, tmp_path: Path, backend: str
) -> None:
    """The retry is a second engine call of the same turn, in a scope of its own
    (trio refuses to enter one cancel scope twice)."""
    program = tmp_path / "engine.py"
    program.write_text(OVERFLOW)
    d = make_daemon(
        {
            "engine": {
                "kind": "subprocess",
                "command": [sys.executable, str(program)],
                "context_window": 100_000,
            }
        },
        backend=backend,
    )
    replies = await chat(d, [f"m{n}" for n in range(5)])
    assert [r["text"] for r in replies] == [f"m{n}" for n in range(5)]
    found = rows(d, "SELECT trigger, fallback FROM compactions")
    assert ("reactive", 0) in found
    assert rows(d, "SELECT count(*) FROM turns WHERE status IN ('failed', 'aborted')") == [(0,)]
    assert not any('"actor failed"' in line for line in d.log_lines())
    # The served turn starts after the compaction; the call that overflowed is
    # one of its events, with its own times, before the compaction's start.
    assert overlaps(d) == []
    served = rows(
        d,
        "SELECT e.payload, t.started_at, c.started_at, c.completed_at FROM turns t"
        " JOIN turn_events e ON e.turn_id = t.id AND e.type = 'llm'"
        " JOIN turns c ON c.id = t.parent_id AND c.type = 'compaction'"
        " WHERE e.payload LIKE '%context_overflow%'",
    )
    assert len(served) == found.count(("reactive", 0)), served
    for overflowed, started, compaction_started, compacted in served:
        call = orjson.loads(overflowed)
        assert call["started_at"] <= call["ended_at"] <= compaction_started
        assert started >= compacted
