"""The subprocess engine: one run of an agent program per turn, JSON lines on stdio.

The lines and what they mean, with a minimal program: broker/engines/subprocess_protocol.py.

A line that is not a JSON object, a program that exits or closes stdout before
``final``, or a non-zero exit status fails the turn with an `EngineError` naming the
exit status and the last stderr lines (stderr is free-form logging; only a bounded
tail is kept). The program never outlives `run`: it runs in a new session (its own
process group), and on abort, timeout, error or a program that lingers after
``final`` the group gets SIGTERM, then SIGKILL after `grace_s`, and the program is
reaped; all reader and writer tasks live in one task group inside `run`. One task owns
the program's stdin and everyone else queues lines to it; `io.take_steer()` is polled
after every program line and at a short interval until ``final`` is read, and what it
returns is written to the program.
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

from broker.engines.base import EngineError, TurnIO
from broker.engines.subprocess_protocol import (
    LineReader,
    Message,
    parse_line,
    steer_message,
    turn_message,
)
from core.engine_types import ChatMessage, EngineResult, ToolCall, TurnRequest
from core.session_state import EVENT_TYPES

STDERR_TAIL_BYTES = 8 << 10
STEER_POLL_S = 0.05


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
            content = await self.io.call_tool(name, arguments, call_id)
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
        self.io.event(str(kind), data)  # written as it happens, not at the end

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
