"""Operator roles on the real daemon (issue 39): a peer uid of role `read` (this test's
child process, which drops to that uid) is refused `entity.merge` with `forbidden`
before anything is read, keeps its connection, may read, and each refusal is audited;
`brokerctl` says which role it has. The library's `store.call` is treated the same."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.conftest import DaemonFactory
from tests.harness import DaemonProcess
from wire.client import BrokerClient

READER, OPERATOR = 65534, 65533  # nobody, and another uid with no account
pytestmark = pytest.mark.skipif(os.getuid() != 0, reason="needs root to drop to another uid")


def as_uid(uid: int, path: Path, frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Send `frames` after a hello from a child that runs as `uid`; the answers."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only system calls and the standard library from here
        code = 1
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(20)
                sock.connect(str(path))
                stream = sock.makefile("rwb")
                got = []
                for frame in [{"type": "hello", "v": 1, "role": "operator"}, *frames]:
                    stream.write(json.dumps(frame).encode() + b"\n")
                    stream.flush()
                    got.append(json.loads(stream.readline()))
            os.write(write_end, json.dumps(got).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        out = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, out
    answers: list[dict[str, Any]] = json.loads(out)
    assert answers[0]["type"] == "welcome", answers
    return answers[1:]


def reachable_daemon(make_daemon: DaemonFactory, short_tmp: Path) -> DaemonProcess:
    config = {
        "socket_mode": 0o666,
        "auth": {"allowed_uids": [0, READER, OPERATOR]},
        "operators": {"default_role": "read"},
        "operators.uids": [{"uid": OPERATOR, "role": "operate"}],  # [[operators.uids]]
    }
    d = make_daemon(config)
    for part in [short_tmp, *d.socket.relative_to(short_tmp).parents]:
        where = short_tmp / part if part != short_tmp else short_tmp
        os.chmod(where, os.stat(where).st_mode | 0o011)  # others may pass through
    return d


def op(name: str, req: str, **args: Any) -> dict[str, Any]:
    return {"type": "op", "op": name, "req": req, "args": args}


def test_a_read_uid_is_refused_a_merge_and_may_read(
    make_daemon: DaemonFactory, short_tmp: Path
) -> None:
    d = reachable_daemon(make_daemon, short_tmp)
    refused, health, stored, wrote = as_uid(
        READER,
        d.socket,
        [
            op("entity.merge", "r1", **{"from": "ent_a", "into": "ent_b"}),
            op("health", "r2"),
            op("store.call", "r3", call="list", args={}),
            op("store.call", "r4", call="create", args={"session": "lib:x"}),
        ],
    )
    assert refused["type"] == "error" and refused["code"] == "forbidden", refused
    assert refused["req"] == "r1" and "'read'" in refused["message"]
    assert "'operate'" in refused["message"] and str(READER) in refused["message"]
    assert health["type"] == "result" and health["req"] == "r2"  # the connection stayed open
    assert stored["type"] == "result" and stored["req"] == "r3", stored
    assert wrote["type"] == "error" and wrote["code"] == "forbidden", wrote
    with d.db() as db:
        rows = db.execute("SELECT uid, role, op, target, outcome FROM audit ORDER BY id").fetchall()
        assert db.execute("SELECT count(*) FROM sessions").fetchone()[0] == 0
    assert rows == [
        (READER, "read", "entity.merge", "ent_a", "refused"),
        (READER, "read", "store.call", "lib:x", "refused"),
    ]


def test_an_operate_uid_changes_sessions_and_each_change_is_audited(
    make_daemon: DaemonFactory, short_tmp: Path
) -> None:
    d = reachable_daemon(make_daemon, short_tmp)
    made, gc = as_uid(
        OPERATOR,
        d.socket,
        [
            op("store.call", "o1", call="create", args={"session": "lib:y"}),
            op("snapshots.gc", "o2"),
        ],
    )
    assert made["type"] == "result", made
    assert gc["code"] == "forbidden" and "'admin'" in gc["message"]
    with d.db() as db:
        rows = db.execute("SELECT uid, role, op, target, outcome FROM audit ORDER BY id").fetchall()
    assert rows == [
        (OPERATOR, "operate", "store.call", "lib:y", "ok"),
        (OPERATOR, "operate", "snapshots.gc", None, "refused"),
    ]


def test_brokerctl_says_which_role_it_has(make_daemon: DaemonFactory, short_tmp: Path) -> None:
    from brokerctl.main import main  # imported before the child drops its rights

    d = reachable_daemon(make_daemon, short_tmp)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.dup2(write_end, 2)
            sys.stderr = os.fdopen(2, "w", closefd=False)
            os.setgroups([])
            os.setgid(READER)
            os.setuid(READER)
            sys.argv = ["brokerctl", "--socket", str(d.socket), "merge", "ent_a", "ent_b"]
            try:
                main()
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            sys.stderr.flush()
        except BaseException:
            traceback.print_exc()
            sys.stderr.flush()
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        said = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 77, said
    assert "forbidden" in said and "'read'" in said and "[operators]" in said, said


def test_brokerctl_audit_lists_the_rows(make_daemon: DaemonFactory) -> None:
    d = make_daemon()

    async def made() -> None:
        async with await BrokerClient.connect(d.socket) as client:
            await client.op("store.call", call="create", args={"session": "lib:z"})
            await client.op("store.call", call="get", args={"session": "lib:z"})  # a read

    anyio.run(made)
    ctl = [sys.executable, "-c", "from brokerctl.main import main; main()"]
    done = subprocess.run(
        [*ctl, "--socket", str(d.socket), "--json", "audit", "--since", "1h", "--op", "store.call"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert [(r["uid"], r["role"], r["op"], r["target"], r["outcome"]) for r in rows] == [
        (os.getuid(), "admin", "store.call", "lib:z", "ok")
    ]
    table = subprocess.run(
        [*ctl, "--socket", str(d.socket), "audit", "--since", "yesterday"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert table.returncode == 64 and "usage" in table.stderr
