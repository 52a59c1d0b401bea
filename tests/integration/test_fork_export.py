"""Forks share their ancestors; export and import round-trip a thread."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from tests.ctl import in_process
from tests.harness import DaemonProcess
from wire.client import BrokerClient, BrokerError

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]


async def converse(d: DaemonProcess, texts: list[str], first: int = 0) -> str:
    """Send `texts` one at a time, each after the last one's reply; the session's label."""
    async with await BrokerClient.connect(d.socket, role="adapter", channel="sms") as c:
        session = ""
        for n, text in enumerate(texts, start=first):
            await c.send(
                {
                    "type": "inbound",
                    "req": str(n),
                    "msg_id": f"m{n}",
                    "sender_id": "+1",
                    "peer_kind": "dm",
                    "text": text,
                    "queue_mode": "followup",
                }
            )
            with anyio.fail_after(15):
                while (frame := await c.recv())["type"] != "deliver":
                    session = frame.get("session", session)
            session = frame["session"]
            await c.send({"type": "delivered", "out_id": frame["out_id"]})
    return session


def ctl(d: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return in_process("--config", str(d.config_path), *args)


async def test_fork_shares_ancestors(daemon: DaemonProcess) -> None:
    session = await converse(daemon, ["one", "two", "three"])
    async with await BrokerClient.connect(daemon.socket) as op:
        turns = (await op.op("session.show", session=session))["turns"]
        assert [t["output"] for t in turns] == ["one", "two", "three"]
        fork = (await op.op("session.fork", turn=turns[1]["id"], label="fork:what-if"))["label"]
        shown: dict[str, Any] = await op.op("session.show", session=fork)
        assert fork == "fork:what-if"
        assert shown["head"] == turns[1]["id"] and shown["parent"] == session
        assert shown["parent_turn"] == turns[1]["id"] and shown["origin"] == "fork"
        assert [t["id"] for t in shown["turns"]] == [turns[0]["id"], turns[1]["id"]]
        original = await op.op("session.show", session=session)
        assert original["head"] == turns[2]["id"]  # the original goes on untouched
        with pytest.raises(BrokerError) as taken:
            await op.op("session.fork", turn=turns[0]["id"], label="fork:what-if")
        assert taken.value.code == "invalid" and taken.value.field == "label"
        with pytest.raises(BrokerError) as missing:
            await op.op("session.fork", turn="nope")
        assert missing.value.code == "not_found"


async def test_export_then_import(daemon: DaemonProcess, tmp_path: Path) -> None:
    session = await converse(daemon, ["alpha", "beta"])
    out = tmp_path / "thread.jsonl"
    done = ctl(daemon, "export", session, "-o", str(out))
    assert done.returncode == 0, done.stderr
    lines = [orjson.loads(raw) for raw in out.read_bytes().splitlines()]
    assert lines[0]["type"] == "header" and lines[0]["label"] == session
    assert lines[0]["turns"] == 2
    assert [[m["content"] for m in t["messages"]] for t in lines[1:]] == [
        ["alpha", "alpha"],
        ["beta", "beta"],
    ]
    done = ctl(daemon, "import", str(out), "--label", "import:copy")
    assert done.returncode == 0, done.stderr
    async with await BrokerClient.connect(daemon.socket) as op:
        copy = await op.op("session.show", session="import:copy")
        source = await op.op("session.show", session=session)
    assert [t["output"] for t in copy["turns"]] == [t["output"] for t in source["turns"]]
    assert not {t["id"] for t in copy["turns"]} & {t["id"] for t in source["turns"]}
    assert copy["turns"][1]["parent"] == copy["turns"][0]["id"]
    again = ctl(daemon, "import", str(out), "--label", "import:copy")
    assert again.returncode == 1 and "taken" in again.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(out.read_bytes().replace(b'"format"', b'"fmt"'))
    refused = ctl(daemon, "import", str(bad))
    assert refused.returncode == 1 and "nothing was written" in refused.stderr


async def test_import_goes_through_the_ledger_writer(daemon: DaemonProcess, tmp_path: Path) -> None:
    # The writer indexes the messages of each transaction before COMMIT (ledger/fts.py);
    # an import that went around it left its messages out of the search index
    # until the daemon's next write.
    session = await converse(daemon, ["xylophone"])
    out = tmp_path / "thread.jsonl"
    assert ctl(daemon, "export", session, "-o", str(out)).returncode == 0
    done = ctl(daemon, "import", str(out), "--label", "import:indexed")
    assert done.returncode == 0, done.stderr
    conn = daemon.db()
    try:
        stored = conn.execute("SELECT count(*) FROM messages WHERE content = 'xylophone'")
        indexed = conn.execute(
            "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'xylophone'"
        )
        assert stored.fetchone()[0] == 4  # the user's and the echo, twice
        assert indexed.fetchone()[0] == 4
    finally:
        conn.close()
