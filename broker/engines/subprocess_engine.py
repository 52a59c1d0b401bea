"""The subprocess engine: one run of an agent program per turn, JSON lines on stdio.

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

Rules the broker keeps:

Rule 1: a line that is not a JSON object, a program that exits or closes
        stdout before ``final``, or a non-zero exit status fails the turn with
        an `EngineError` naming the exit status and the last stderr lines
        (stderr is free-form logging; only a bounded tail is kept).
Rule 2: the program never outlives `run`. It runs in a new session (its own
        process group); on abort, timeout, error or a program that lingers
        after ``final``, the group gets SIGTERM, then SIGKILL after `grace_s`,
        and the program is reaped. All reader and writer tasks live in one
        task group inside `run`.
Rule 3: one task owns the program's stdin; everyone else queues lines to it.
Rule 4: `io.take_steer()` is polled after every program line and every 50 ms,
        until ``final`` is read; what it returns is written to the program.

A minimal program (Python, no steering, no tools)::

    import json, sys
    turn = json.loads(sys.stdin.readline())
    reply = " ".join(m["content"] for m in turn["inputs"])
    print(json.dumps({"type": "delta", "text": reply}), flush=True)
    print(json.dumps({"type": "final"}), flush=True)

`examples/engine_echo.py` streams word by word and takes steering.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Mapping, Sequence
from subprocess import PIPE
from typing import Any, Literal

import anyio
import orjson
from anyio.abc import ByteReceiveStream, ByteSendStream, Process, TaskGroup

from broker.core.engine_types import (
    ChatMessage,
    EngineResult,
    HistoryMessage,
    ToolCall,
    TurnRequest,
)
from broker.core.session_state import EVENT_TYPES

from .base import EngineError, TurnIO

MAX_LINE_BYTES = 16 << 20
STDERR_TAIL_BYTES = 8 << 10
STEER_POLL_S = 0.05

Message = dict[str, Any]


# -- pure helpers -----------------------------------------------------------------


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


def _field(message: Message, key: str, kind: type, default: Any) -> Any:
    """`message[key]` checked against `kind`; `default` when missing or null."""
    value = message.get(key)
    if value is None:
        return default
    if not isinstance(value, kind):
        what = message.get("type")
        raise EngineError(f"The engine program sent a {what!r} line whose {key!r} is malformed.")
    return value


def describe_status(returncode: int | None) -> str:
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"killed by signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


class StderrTail:
    """The last few KiB of the program's stderr."""

    def __init__(self, limit: int = STDERR_TAIL_BYTES) -> None:
        self.limit = limit
        self.data = bytearray()
        self.done = anyio.Event()

    def add(self, chunk: bytes) -> None:
        self.data += chunk
        if len(self.data) > self.limit:
            del self.data[: len(self.data) - self.limit]

    def summary(self, lines: int = 3) -> str:
        text = self.data.decode("utf-8", "replace")
        kept = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
        return " | ".join(kept)[-500:]

    async def collect(self, stream: ByteReceiveStream | None) -> None:
        try:
            if stream is not None:
                with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError, OSError):
                    while True:
                        self.add(await stream.receive())
        finally:
            self.done.set()


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


# -- one turn -----------------------------------------------------------------------


class _Conversation:
    """The broker's side of one run of the program."""

    def __init__(self, process: Process, io: TurnIO, grace_s: float) -> None:
        self.process = process
        self.io = io
        self.grace_s = grace_s
        self.stderr = StderrTail()
        self.deltas: list[str] = []
        self.tool_calls: list[ToolCall] = []
        self.steered: list[ChatMessage] = []  # forwarded to the program
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.steer_used: set[str] = set()  # item ids the program said it used
        self.steer_scope = anyio.CancelScope()
        self.outbox, self.inbox = anyio.create_memory_object_stream[bytes](16)

    def start(self, tg: TaskGroup, first: Message, steering: bool) -> None:
        self.outbox.send_nowait(orjson.dumps(first) + b"\n")
        tg.start_soon(self.stderr.collect, self.process.stderr)
        tg.start_soon(self._write_stdin, self.process.stdin)
        if steering:
            tg.start_soon(self._steer_loop)

    async def _write_stdin(self, stdin: ByteSendStream | None) -> None:
        """The only writer of stdin; a dead pipe is noticed by the stdout reader."""
        async with self.inbox:
            broken = stdin is None
            async for data in self.inbox:
                if broken or stdin is None:
                    continue
                try:
                    await stdin.send(data)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    broken = True
            if stdin is not None:
                with contextlib.suppress(anyio.BrokenResourceError, OSError):
                    await stdin.aclose()

    def close(self) -> None:
        self.outbox.close()
        self.inbox.close()

    async def send(self, message: Message) -> None:
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            await self.outbox.send(orjson.dumps(message) + b"\n")

    async def _steer_loop(self) -> None:
        with self.steer_scope:
            while True:
                await self._forward_steer()
                await anyio.sleep(STEER_POLL_S)

    async def _forward_steer(self) -> None:
        if self.steer_scope.cancel_called:
            return
        for message in self.io.take_steer():
            self.steered.append(message)
            await self.send(steer_message(message))

    async def converse(self, steering: bool) -> EngineResult:
        assert self.process.stdout is not None
        reader = LineReader(self.process.stdout)
        while True:
            line = await reader.readline()
            if line is None:
                raise await self.exit_error("stopped before its final reply")
            if not line.strip():
                continue
            message = parse_line(line)
            if steering:
                await self._forward_steer()
            result = await self._handle(message)
            if result is not None:
                return await self._finish(result)

    async def _handle(self, message: Message) -> EngineResult | None:
        kind = message.get("type")
        if kind == "delta":
            text = _field(message, "text", str, "")
            if text:
                self.deltas.append(text)
                await self.io.delta(text)
        elif kind == "tool_call":
            await self._tool_call(message)
        elif kind == "steer_taken":
            self._steer_taken(message)
        elif kind == "event":
            self._event(message)
        elif kind == "final":
            return self._result(message)
        elif kind == "error":
            text = message.get("message")
            reason = "context_overflow" if message.get("code") == "context_overflow" else "engine"
            raise EngineError(
                str(text) if text else "The engine program reported an error.", reason=reason
            )
        return None

    async def _tool_call(self, message: Message) -> None:
        call_id = str(message.get("id") or f"call-{len(self.tool_calls) + 1}")
        name = _field(message, "name", str, "")
        arguments: dict[str, Any] = _field(message, "arguments", dict, {})
        status: Literal["ok", "error"] = "ok"
        try:
            content = await self.io.call_tool(name, arguments)
        except EngineError as exc:
            content, status = str(exc), "error"
        arguments_json = orjson.dumps(arguments).decode()
        self.tool_calls.append(ToolCall(call_id, name, arguments_json, content, status))
        await self.send(
            {"type": "tool_result", "id": call_id, "content": content, "status": status}
        )

    def _event(self, message: Message) -> None:
        kind = message.get("event")
        data = message.get("data")
        if kind not in EVENT_TYPES or not isinstance(data, dict):
            raise EngineError(
                f"The engine program sent a bad event line (event {kind!r}); "
                f"events are {', '.join(EVENT_TYPES)} with an object 'data'."
            )
        self.events.append((str(kind), data))

    def _steer_taken(self, message: Message) -> None:
        msg_ids = set(_field(message, "msg_ids", list, []))
        items = set(_field(message, "items", list, []))
        for steered in self.steered:
            if steered.msg_id in msg_ids or steered.item_id in items:
                self.steer_used.add(steered.item_id or "")

    def _result(self, message: Message) -> EngineResult:
        text = message.get("text")
        usage = _field(message, "usage", dict, {})
        model = message.get("model")
        return EngineResult(
            text=text if isinstance(text, str) and text else "".join(self.deltas),
            prompt_tokens=_int_or_none(usage.get("prompt_tokens")),
            completion_tokens=_int_or_none(usage.get("completion_tokens")),
            model=model if isinstance(model, str) else None,
            tool_calls=self.tool_calls,
            steer_used=tuple(sorted(self.steer_used)),
            events=self.events,
        )

    async def _finish(self, result: EngineResult) -> EngineResult:
        """After `final`: close stdin and let the program exit on its own, briefly."""
        self.steer_scope.cancel()
        await self.outbox.aclose()
        with anyio.move_on_after(self.grace_s):
            await self.process.wait()
        if self.process.returncode:
            raise await self.exit_error("failed after its final reply")
        return result

    async def exit_error(self, what: str) -> EngineError:
        with anyio.move_on_after(self.grace_s):
            await self.process.wait()
            await self.stderr.done.wait()
        tail = self.stderr.summary()
        status = describe_status(self.process.returncode)
        said = f"; stderr: {tail}" if tail else ""
        return EngineError(f"The engine program {what} ({status}){said}.")


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _signal_group(process: Process, signum: signal.Signals) -> None:
    """Signal the program's process group (it leads one), so its children go too.

    Only while the leader is unreaped: until then its pid, which is the group
    id, cannot be reused by an unrelated process.
    """
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signum)
        with contextlib.suppress(ProcessLookupError):  # if it left its group
            process.send_signal(signum)


async def reap(process: Process, grace_s: float) -> None:
    """SIGTERM, SIGKILL after `grace_s`, wait: the program is gone when this returns."""
    with anyio.CancelScope(shield=True):
        _signal_group(process, signal.SIGTERM)
        with anyio.move_on_after(grace_s):
            await process.wait()
        _signal_group(process, signal.SIGKILL)
        await process.aclose()


class SubprocessEngine:
    name = "subprocess"

    def __init__(
        self,
        command: Sequence[str],
        context_window: int,
        accepts_steering: bool = True,
        env: Mapping[str, str] | None = None,
        *,
        grace_s: float = 1.0,
    ) -> None:
        """`env` is added to the broker's own environment for the program."""
        self.command = list(command)
        self.context_window = context_window
        self.accepts_steering = accepts_steering
        self.env = dict(env) if env is not None else None
        self.grace_s = grace_s

    async def _start(self) -> Process:
        if not self.command:
            raise EngineError("No engine command is configured (engine.command).")
        env = {**os.environ, **self.env} if self.env is not None else None
        try:
            return await anyio.open_process(
                self.command,
                stdin=PIPE,
                stdout=PIPE,
                stderr=PIPE,
                env=env,
                start_new_session=True,  # a process group of its own, see `reap`
            )
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise EngineError(
                f"Cannot start the engine program {self.command[0]!r}: {reason}."
            ) from exc

    async def aclose(self) -> None:
        return None  # nothing outlives a turn: each turn has its own process

    async def run(self, request: TurnRequest, io: TurnIO) -> EngineResult:
        process = await self._start()
        conversation = _Conversation(process, io, self.grace_s)
        try:
            outcome: EngineResult | Exception
            async with anyio.create_task_group() as tg:
                conversation.start(tg, turn_message(request), self.accepts_steering)
                try:
                    outcome = await conversation.converse(self.accepts_steering)
                except Exception as exc:  # raised below, outside the task group
                    outcome = exc
                tg.cancel_scope.cancel()
            if isinstance(outcome, Exception):
                raise outcome
            return outcome
        finally:
            conversation.close()
            await reap(process, self.grace_s)
