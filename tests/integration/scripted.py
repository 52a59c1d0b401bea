"""A subprocess engine scripted by its inputs, for the agent-tool and worker tests.

Each line of a turn's inputs that reads `call NAME {json}` makes the program call
that broker tool; `event KIND {json}` reports a typed event; `mark PATH` creates a
file (a test waits for it); `sleeponce PATH S` sleeps S seconds unless PATH exists,
which it creates (a turn run again after a kill does not sleep again). A worker's
result (text from `[worker `) quotes its task: of its lines only `sleeponce` runs.
The reply is the tool results, one a line (`NAME:status:content`), else the inputs.
Every request it gets (a turn's or a summarizer's) is appended to the log file named by
its first argument as one JSON line: session, model, system prompt, history, inputs
and the tools offered.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio

from tests.conftest import DaemonFactory
from tests.harness import DaemonProcess
from wire.client import BrokerClient

PROGRAM = textwrap.dedent("""
    import json, pathlib, sys, time
    turn = json.loads(sys.stdin.readline())
    with open(sys.argv[1], "a") as log:
        log.write(json.dumps({
            "session": turn["session"], "model": turn.get("model"), "system": turn["system"],
            "history": turn["history"], "inputs": [m["content"] for m in turn["inputs"]],
            "tools": [t["name"] for t in turn["tools"]],
        }) + "\\n")
    text = "\\n".join(m["content"] for m in turn["inputs"])
    results = []
    quoted = text.startswith("[worker ")
    for line in text.splitlines():
        if quoted and not line.startswith("sleeponce "):
            continue
        if line.startswith("call "):
            name, _, args = line[5:].partition(" ")
            call = {"type": "tool_call", "id": "c%d" % (len(results) + 1), "name": name,
                    "arguments": json.loads(args or "{}")}
            print(json.dumps(call), flush=True)
            answer = json.loads(sys.stdin.readline())
            results.append("%s:%s:%s" % (name, answer["status"], answer["content"]))
        elif line.startswith("event "):
            kind, _, data = line[6:].partition(" ")
            event = {"type": "event", "event": kind, "data": json.loads(data)}
            print(json.dumps(event), flush=True)
        elif line.startswith("mark "):
            pathlib.Path(line[5:]).touch()
        elif line.startswith("sleeponce "):
            path, _, seconds = line[10:].rpartition(" ")
            if not pathlib.Path(path).exists():
                pathlib.Path(path).touch()
                time.sleep(float(seconds))
    print(json.dumps({"type": "final", "text": "\\n".join(results) or text}), flush=True)
""")


def call(name: str, **args: Any) -> str:
    """A script line that calls the broker tool `name`."""
    return f"call {name} {json.dumps(args)}"


class Scripted:
    """A daemon running the scripted engine, and what its engine was asked."""

    def __init__(
        self,
        make_daemon: DaemonFactory,
        tmp: Path,
        backend: str,
        config: dict[str, Any] | None = None,
    ) -> None:
        program = tmp / "engine.py"
        program.write_text(PROGRAM)
        self.log = tmp / "requests.jsonl"
        config = dict(config or {})
        engine = {"kind": "subprocess", "command": [sys.executable, str(program), str(self.log)]}
        config["engine"] = {**engine, **config.get("engine", {})}
        self.d: DaemonProcess = make_daemon(config, backend=backend)

    def requests(self, session: str | None = None) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        lines = [json.loads(line) for line in self.log.read_text().splitlines()]
        return [r for r in lines if session is None or r["session"] == session]

    def rows(self, sql: str, *args: object) -> list[tuple[Any, ...]]:
        with self.d.db() as db:
            return db.execute(sql, args).fetchall()

    async def until(self, sql: str, *args: object, limit_s: float = 15) -> list[Any]:
        with anyio.fail_after(limit_s):
            while not (found := self.rows(sql, *args)):  # noqa: ASYNC110 - another process
                await anyio.sleep(0.05)
        return found

    async def op(self, name: str, **args: Any) -> Any:
        async with await BrokerClient.connect(self.d.socket) as c:
            return await c.op(name, **args)

    async def say(self, text: str, msg_id: str, sender: str = "+1") -> dict[str, Any]:
        """One message from `sender`; its reply (the `deliver` frame), confirmed. A reply
        to someone else that this connection is offered first (a worker's, in the
        session a tool call reached) is left unconfirmed, for its own adapter."""
        async with await BrokerClient.connect(self.d.socket, role="adapter", channel="sms") as c:
            await c.send(
                {
                    "type": "inbound",
                    "req": msg_id,
                    "msg_id": msg_id,
                    "sender_id": sender,
                    "peer_kind": "dm",
                    "text": text,
                    "queue_mode": "followup",
                }
            )
            with anyio.fail_after(20):
                while (frame := await c.recv())["type"] != "deliver" or (
                    frame["peer_id"] != sender
                ):
                    pass
            await c.send({"type": "delivered", "out_id": frame["out_id"]})
            return frame
