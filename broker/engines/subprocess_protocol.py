"""The subprocess engine's protocol: JSON lines between the broker and the program.

The program is started with the configured command (`engine.command`) for each
turn. Every message is one JSON object on one line (UTF-8, ``\\n``-terminated,
at most 16 MiB). Unknown fields and unknown message types are ignored by both
sides, so the protocol can grow.

Broker → program (on the program's stdin):

``{"type": "turn", ...}``, always the first line::

    {"type": "turn", "session": "s-1", "turn": "t-9",
     "system": "You are ..." | null,
     "history": [{"role": "user" | "assistant" | "system" | "tool",
                  "content": "...", "name": "Ann"?}, ...],      # oldest first
     "inputs":  [{"role": "user", "content": "...", "name": "Ann"?,
                  "msg_id": "m-1"?}, ...],                      # this turn's messages
     "notes":   ["3 older messages were dropped", ...],         # from the broker
     "tools":   [{"name": "...", "description": "...",
                  "parameters": {JSON schema}}, ...],
     "model":   "..." | null}

``{"type": "steer", "content": "...", "msg_id": "m-2", "item": "01J…", "name": "Ann"?}``:
a user
message that arrived while the turn runs (only if the engine is configured to
accept steering). Fold it into the turn if you can. Steered messages may
arrive at any time until you write ``final``, so read stdin concurrently (a
thread or an async reader) if you want them while you stream.

``{"type": "tool_result", "id": "<the call's id>", "content": "...",
"status": "ok" | "error"}``: the answer to a ``tool_call``.

When the broker has read ``final`` it closes the program's stdin.

Program → broker (on the program's stdout):

``{"type": "delta", "text": "..."}``: a piece of the reply, streamed to the user.

``{"type": "tool_call", "id": "c1", "name": "...", "arguments": {...}}``: run a
broker tool; then read lines until the ``tool_result`` with the same id.

``{"type": "event", "event": "decision", "data": {...}}``: a typed event of the
turn (intent, action, file, snapshot, decision, error, llm, feedback), recorded
in order with the turn. Conventions the broker reads: ``intent``/``decision``
``{"text"}``, ``file`` ``{"path", "op": "read"|"write"|"edit"|"create"|"delete"}``,
and ``"resolves": "<what>"`` on any event that resolves an earlier error.

``{"type": "steer_taken", "msg_ids": ["m-2"]}`` (or ``"items": [...]``): which
steered messages you folded into this turn. Only these count as part of the
turn; any other steered message runs again as the next turn, so nothing is
lost when a steer line reaches you after you have finished.

``{"type": "final", "text": "..." | null, "usage": {"prompt_tokens": 12,
"completion_tokens": 5}, "model": "..."}``: the turn is done. Without ``text``
the reply is the concatenated deltas. Then exit with status 0; a program
still running `grace_s` (1 s) later is stopped, and its reply stands.

``{"type": "error", "message": "...", "code": "context_overflow"?}``: the turn
failed; the message is shown to people. Then exit. With the code
``context_overflow`` the broker compacts the session and runs the turn once more.

A minimal program (Python, no steering, no tools)::

    import json, sys
    turn = json.loads(sys.stdin.readline())
    reply = " ".join(m["content"] for m in turn["inputs"])
    print(json.dumps({"type": "delta", "text": reply}), flush=True)
    print(json.dumps({"type": "final"}), flush=True)

`examples/engine_echo.py` streams word by word and takes steering.

The rules the broker keeps while it runs a program are broker/engines/subprocess_engine.py's.
"""

from __future__ import annotations

from typing import Any

import anyio
import orjson
from anyio.abc import ByteReceiveStream

from broker.engines.base import EngineError
from core.engine_types import ChatMessage, HistoryMessage, TurnRequest

MAX_LINE_BYTES = 16 << 20

Message = dict[str, Any]


def turn_message(request: TurnRequest) -> Message:
    """The first line the program reads."""
    return {
        "type": "turn",
        "session": request.session,
        "turn": request.turn_id,
        "system": request.system_prompt,
        "history": [_chat(m) for m in request.history],
        "inputs": [_input(m) for m in request.inputs],
        "notes": list(request.notes),
        "tools": [
            {"name": t.name, "description": t.description, "parameters": t.parameters}
            for t in request.tools
        ],
        "model": request.model,
    }


def _chat(message: HistoryMessage) -> Message:
    out: Message = {"role": message.role, "content": message.content}
    if message.name is not None:
        out["name"] = message.name
    return out


def _input(message: ChatMessage) -> Message:
    out = _chat(message)
    if message.msg_id is not None:
        out["msg_id"] = message.msg_id
    return out


def steer_message(message: ChatMessage) -> Message:
    out: Message = {
        "type": "steer",
        "content": message.content,
        "msg_id": message.msg_id,
        "item": message.item_id,
    }
    if message.name is not None:
        out["name"] = message.name
    return out


def parse_line(line: bytes) -> Message:
    """One program line as a JSON object, or an EngineError saying what is wrong."""
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        value = None
    if not isinstance(value, dict):
        shown = line[:80].decode("utf-8", "replace")
        more = "…" if len(line) > 80 else ""
        raise EngineError(
            f"The engine program wrote a line that is not a JSON object: {shown!r}{more}."
        )
    return value


class LineReader:
    """Newline-delimited lines from a byte stream, each at most `limit` bytes."""

    def __init__(self, stream: ByteReceiveStream, limit: int = MAX_LINE_BYTES) -> None:
        self.stream = stream
        self.limit = limit
        self.buffer = bytearray()
        self.scanned = 0

    async def readline(self) -> bytes | None:
        """The next line without its newline; None at end of stream."""
        while True:
            index = self.buffer.find(b"\n", self.scanned)
            if index >= 0:
                line = bytes(self.buffer[:index])
                del self.buffer[: index + 1]
                self.scanned = 0
                return line
            self.scanned = len(self.buffer)
            if self.scanned > self.limit:
                raise EngineError(
                    f"The engine program wrote a line longer than {self.limit >> 20} MiB."
                )
            try:
                self.buffer += await self.stream.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                return self._rest()

    def _rest(self) -> bytes | None:
        if not self.buffer:
            return None
        line = bytes(self.buffer)
        self.buffer.clear()
        self.scanned = 0
        return line
