"""File snapshots end to end: an engine program reports files with `file` events, the
daemon stores them with its turns, and the ops and brokerctl read them back."""

from __future__ import annotations

import base64
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from tests.conftest import DaemonFactory
from tests.ctl import in_process
from tests.harness import DaemonProcess, write_config
from tests.integration.test_fork_export import converse
from wire.client import BrokerClient, BrokerError

pytestmark = pytest.mark.anyio
BINARY = bytes([0, 159, 146, 150, 255])

# "write PATH TEXT" (| for a newline), "delete PATH", "bin PATH", "bad": one file event.
ENGINE = textwrap.dedent("""
    import base64, json, sys
    turn = json.loads(sys.stdin.readline())
    def say(obj): print(json.dumps(obj), flush=True)
    text = turn["inputs"][-1]["content"]
    verb, _, rest = text.partition(" ")
    path, _, body = rest.partition(" ")
    data = None
    if verb == "write":
        data = {"path": path, "op": "write", "content": body.replace("|", "\\n")}
    elif verb == "delete":
        data = {"path": path, "op": "delete"}
    elif verb == "bin":
        data = {"path": path, "op": "create",
                "content_b64": base64.b64encode(bytes([0, 159, 146, 150, 255])).decode()}
    elif verb == "bad":
        data = {"path": "/etc/passwd", "op": "write", "content": "secret"}
    if data is not None:
        say({"type": "event", "event": "file", "data": data})
    say({"type": "final", "text": "ok"})
""")


def start(make_daemon: DaemonFactory, tmp_path: Path, backend: str) -> DaemonProcess:
    program = tmp_path / "engine.py"
    program.write_text(ENGINE)
    return make_daemon(
        {"engine": {"kind": "subprocess", "command": [sys.executable, str(program)]}},
        backend=backend,
    )


def ctl(d: DaemonProcess, *args: str) -> subprocess.CompletedProcess[bytes]:
    return in_process("--config", str(d.config_path), *args, text=False)


async def error_of(op: BrokerClient, name: str, **args: Any) -> BrokerError:
    with pytest.raises(BrokerError) as caught:
        await op.op(name, **args)
    return caught.value


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_file_ops_and_commands(
    make_daemon: DaemonFactory, tmp_path: Path, backend: str
) -> None:
    d = start(make_daemon, tmp_path, backend)
    texts = ["write a.txt one|two", "write a.txt one|three", "delete a.txt", "write a.txt four"]
    session = await converse(d, [*texts, "bin b.bin", "bad"])
    async with await BrokerClient.connect(d.socket) as op:
        turns = [t["id"] for t in (await op.op("session.show", session=session))["turns"]]
        history = await op.op("file.history", session=session, path="a.txt")
        assert [(h["turn"], h["op"]) for h in history] == [
            (turns[0], "write"),
            (turns[1], "write"),
            (turns[2], "delete"),
            (turns[3], "write"),
        ]
        assert [h["bytes"] for h in history] == [7, 9, None, 4]
        first = await op.op("file.at", session=session, path="a.txt", turn=turns[0])
        assert first["content"] == "one\ntwo" and first["turn"] == turns[0]
        assert (await op.op("file.at", session=session, path="./a.txt"))["content"] == "four"
        gone = await error_of(op, "file.at", session=session, path="a.txt", turn=turns[2])
        assert gone.code == "not_found" and "deleted" in str(gone.frame["message"])
        binary = await op.op("file.at", session=session, path="b.bin")
        assert "content" not in binary and base64.b64decode(binary["content_b64"]) == BINARY
        for bad_args in ({"session": "nobody", "path": "a.txt"}, {"session": session, "path": "z"}):
            assert (await error_of(op, "file.at", **bad_args)).code == "not_found"
            assert (await error_of(op, "file.history", **bad_args)).code == "not_found"
        refused = await error_of(op, "file.at", session=session, path="../x")
        assert (refused.code, refused.field) == ("invalid", "path")
        bad_event = await op.op("events.query", session=session, turn=turns[5])
        [problem] = [e["payload"] for e in bad_event if e["type"] == "file"]
        assert "absolute" in problem["problem"] and "secret" not in orjson.dumps(problem).decode()
        # The turn that reported it failed, with the reason in a plain sentence.
        shown = await op.op("session.show", session=session)
        failed = next(t for t in shown["turns"] if t["id"] == turns[5])
        assert failed["status"] == "failed"
        [error] = [e["payload"] for e in bad_event if e["type"] == "error"]
        assert "cannot record" in error["text"] and "absolute" in error["text"]
        fork = (await op.op("session.fork", turn=turns[1]))["label"]
        for t in turns[:2]:
            mine = await op.op("file.at", session=fork, path="a.txt", turn=t)
            assert mine == await op.op("file.at", session=session, path="a.txt", turn=t)
        assert (await op.op("file.at", session=fork, path="a.txt"))["content"] == "one\nthree"
        assert await op.op("snapshots.gc") == {"blobs": 0, "bytes": 0}

    listed = ctl(d, "--json", "files", session)
    assert listed.returncode == 0, listed.stderr
    assert [(f["path"], f["op"]) for f in orjson.loads(listed.stdout)] == [
        ("a.txt", "write"),
        ("b.bin", "create"),
    ]
    shown = ctl(d, "file", session, "a.txt", "--turn", turns[1])
    assert (shown.returncode, shown.stdout) == (0, b"one\nthree")
    assert ctl(d, "file", session, "b.bin").stdout == BINARY
    diff = ctl(d, "file", session, "a.txt", "--turn", turns[1], "--diff", turns[0])
    assert diff.returncode == 0, diff.stderr
    assert b"-two\n" in diff.stdout and b"+three\n" in diff.stdout
    created = ctl(d, "file", session, "a.txt", "--diff", turns[2])  # deleted then: all new
    assert b"+four" in created.stdout
    missing = ctl(d, "file", session, "a.txt", "--turn", turns[2])
    assert missing.returncode == 1 and b"not_found" in missing.stderr

    out = tmp_path / "thread.jsonl"
    assert ctl(d, "export", session, "-o", str(out)).returncode == 0
    done = ctl(d, "import", str(out), "--label", "import:copy")
    assert done.returncode == 0, done.stderr
    gc = ctl(d, "gc")
    assert gc.returncode == 0 and b"removed 0 blob(s)" in gc.stdout
    async with await BrokerClient.connect(d.socket) as op:
        copied = await op.op("file.history", session="import:copy", path="a.txt")
        for theirs, mine in zip(history, copied, strict=True):
            if theirs["op"] == "delete":
                continue
            a = await op.op("file.at", session=session, path="a.txt", turn=theirs["turn"])
            b = await op.op("file.at", session="import:copy", path="a.txt", turn=mine["turn"])
            assert (a["content"], a["sha256"]) == (b["content"], b["sha256"])


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_max_bytes_from_config(make_daemon: DaemonFactory, tmp_path: Path) -> None:
    program = tmp_path / "engine.py"
    program.write_text(ENGINE)
    d = make_daemon(
        {
            "engine": {"kind": "subprocess", "command": [sys.executable, str(program)]},
            "snapshots": {"max_bytes": 5},
        }
    )
    session = await converse(d, ["write big.txt 0123456789"])
    async with await BrokerClient.connect(d.socket) as op:
        answer = await op.op("file.at", session=session, path="big.txt")
    assert answer["stored"] is False and answer["bytes"] == 10 and "content" not in answer
    assert "snapshots.max_bytes (5)" in answer["note"]
    shown = ctl(d, "file", session, "big.txt")
    assert shown.returncode == 1 and b"max_bytes" in shown.stderr
    # A reload raises the limit for the turns after it.
    d.config["snapshots"] = {"max_bytes": 100}
    write_config(d.config_path, d.config)
    assert d.proc is not None
    d.proc.send_signal(signal.SIGHUP)
    with anyio.fail_after(10):
        while '"reloaded"' not in d.log():  # noqa: ASYNC110 - another process's log file
            await anyio.sleep(0.05)
    await converse(d, ["write big.txt 0123456789"], first=1)
    async with await BrokerClient.connect(d.socket) as op:
        answer = await op.op("file.at", session=session, path="big.txt")
    assert answer["stored"] is True and answer["content"] == "0123456789"
