"""`brokerctl chat`: a terminal chat adapter built on the SDK.

Each line read from stdin is sent as an inbound message (a fresh ULID as its
msg_id); deltas are printed as they stream in and each `deliver` is printed
whole, then confirmed. Lines such as `/status`, `/stop` or `/queue collect` are
chat commands the broker answers itself. With stdout not a terminal the
output is plain: one line per reply (`[aborted] `/`[failed] ` prefixed when
so), no deltas, no colour.

At end of input it waits (at most `--wait` seconds) for the replies to what
it sent, then exits; Ctrl-C or SIGTERM exits at once. Either way what was
received is confirmed before the connection closes.

A terminal speaks for one person, while one channel may have many terminals:
it shows and confirms only the replies to its own person (a DM with its sender,
and the deltas of the sessions its messages went to), and leaves any other in
the ledger for that person's terminal.

stdin is read by a daemon thread with `os.read` (no buffer lock to hold at interpreter
exit), which hands lines to the event loop: a blocking read cannot be cancelled, and a
daemon thread does not keep the process alive.
"""

from __future__ import annotations

import codecs
import os
import signal
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.abc
import anyio.from_thread
import anyio.lowlevel
from anyio.streams.memory import MemoryObjectSendStream
from rich.console import Console
from rich.markup import escape

from adapters.sdk import Adapter, AdapterError, Deliver, Delta, MessageRejected
from core.queue_machine import QueueMode
from plumbing.ids import new_id
from wire.client import BrokerClient, BrokerError

STATUS_TIMEOUT_S = 2.0  # one `session.show` for the status line


@dataclass(frozen=True, slots=True)
class ChatConfig:
    socket: Path
    channel: str = "terminal"
    sender: str = "me"
    name: str | None = None
    mode: QueueMode | None = None
    token: str | None = None
    status: bool = True
    wait: float = 60.0


class ChatOutput:
    """Rendering: rich on a terminal, plain lines otherwise."""

    def __init__(self, console: Console, plain: bool) -> None:
        self.console = console
        self.plain = plain
        self._streamed: dict[str, str] = {}  # out_id -> text printed so far
        self._open: str | None = None  # the out_id whose line is being streamed
        self._broken: set[str] = set()  # out_ids whose streamed line was cut by other output

    def delta(self, delta: Delta) -> None:
        if self.plain:
            return
        self._end_line(unless=delta.out_id)
        self._streamed[delta.out_id] = self._streamed.get(delta.out_id, "") + delta.text
        self.console.print(delta.text, end="", style="cyan", markup=False, highlight=False)
        self._open = delta.out_id

    def deliver(self, reply: Deliver) -> None:
        mark = "" if reply.status == "final" else f"[{reply.status}] "
        if self.plain:
            sys.stdout.write(mark + reply.text + "\n")
            sys.stdout.flush()
            return
        streamed = self._streamed.pop(reply.out_id, None)
        whole = self._open == reply.out_id and reply.out_id not in self._broken
        self._broken.discard(reply.out_id)
        self._end_line()
        if whole and streamed == reply.text and not mark:
            return  # it is on screen already, on one line
        style = "cyan" if not mark else "yellow"
        self.console.print(f"[{style}]{escape(mark + reply.text)}[/{style}]", highlight=False)

    def status(self, text: str) -> None:
        if self.plain:
            sys.stdout.write(f"# {text}\n")
            sys.stdout.flush()
            return
        self._end_line()
        self.console.print(f"[dim]{escape(text)}[/dim]", highlight=False)

    def note(self, text: str) -> None:
        self._end_line()
        print(text, file=sys.stderr, flush=True)

    def _end_line(self, unless: str | None = None) -> None:
        """End a streamed line (unless it is `unless`'s) before printing anything else."""
        if self._open is not None and self._open != unless:
            self.console.print()
            if self._open in self._streamed:
                self._broken.add(self._open)
            self._open = None


@dataclass
class Chat:
    adapter: Adapter
    cfg: ChatConfig
    out: ChatOutput
    waiting: set[str] = field(default_factory=set)  # msg_ids sent, not yet answered
    sessions: set[str] = field(default_factory=set)  # where this person's messages went
    changed: anyio.Event = field(default_factory=anyio.Event)

    async def send_lines(self, lines: anyio.abc.ObjectReceiveStream[str]) -> None:
        async for line in lines:
            text = line.rstrip("\r\n")
            if text.strip():
                await self.send_line(text)

    async def send_line(self, text: str) -> None:
        msg_id = new_id()
        self.waiting.add(msg_id)  # before the send: a reply may beat the ack
        try:
            ack = await self.adapter.send(
                msg_id, self.cfg.sender, text, sender_name=self.cfg.name, queue_mode=self.cfg.mode
            )
            self.sessions.add(ack.session)
        except MessageRejected as exc:
            self.waiting.discard(msg_id)
            self.out.note(f"not sent: {exc}")

    async def show_replies(self) -> None:
        async for reply in self.adapter.replies():
            if isinstance(reply, Delta):
                if reply.session in self.sessions:
                    self.out.delta(reply)
                continue
            if reply.peer_kind != "dm" or reply.peer_id != self.cfg.sender:
                continue  # another person's: left unconfirmed for their terminal
            self.out.deliver(reply)
            await self.adapter.confirm(reply.out_id)
            if self.cfg.status:
                await self.show_status(reply.session)
            self.waiting.difference_update(reply.in_reply_to)
            self.changed.set()
            self.changed = anyio.Event()

    async def show_status(self, session: str) -> None:
        with anyio.move_on_after(STATUS_TIMEOUT_S):
            try:
                async with await BrokerClient.connect(self.cfg.socket) as client:
                    data = await client.op("session.show", session=session, limit=100)
            except (BrokerError, OSError, anyio.EndOfStream, anyio.BrokenResourceError):
                return  # the status line is a nicety; operator access may be refused
            queued = [q for q in data.get("queued", ()) if q.get("status") == "queued"]
            self.out.status(f"{session}: {data.get('state')}, {len(queued)} waiting")

    async def wait_for_answers(self) -> bool:
        """Until every message sent is answered, at most cfg.wait seconds."""
        with anyio.move_on_after(self.cfg.wait):
            while self.waiting:
                await self.changed.wait()
        return not self.waiting


def _read_stdin(send: MemoryObjectSendStream[str], token: anyio.lowlevel.EventLoopToken) -> None:
    """The stdin thread: lines to the loop until EOF; then closes the stream."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pending = ""
    try:
        while chunk := os.read(0, 65536):
            pending += decoder.decode(chunk)
            *lines, pending = pending.split("\n")
            for line in lines:
                anyio.from_thread.run(send.send, line, token=token)
        tail = pending + decoder.decode(b"", final=True)
        if tail:
            anyio.from_thread.run(send.send, tail, token=token)
        anyio.from_thread.run_sync(send.close, token=token)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, RuntimeError, OSError):
        return  # the loop is gone or stopped listening


async def _until_signal(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            scope.cancel()
            return


async def run_chat(cfg: ChatConfig, out: ChatOutput) -> int:
    """The whole session; the exit status."""
    answered = True
    async with Adapter.connect(cfg.socket, cfg.channel, cfg.token) as adapter:
        if not out.plain:
            out.status(f"connected to {adapter.welcome.get('server')} as channel {cfg.channel}")
        chat = Chat(adapter, cfg, out)
        send, receive = anyio.create_memory_object_stream[str](1)
        async with anyio.create_task_group() as tg:
            tg.start_soon(chat.show_replies)
            tg.start_soon(_until_signal, tg.cancel_scope)
            threading.Thread(
                target=_read_stdin,
                args=(send, anyio.lowlevel.current_token()),
                name="stdin",
                daemon=True,
            ).start()
            async with receive:
                await chat.send_lines(receive)
            answered = await chat.wait_for_answers()
            tg.cancel_scope.cancel()
        if not answered:
            out.note(f"gave up waiting for replies to {len(chat.waiting)} messages")
    return 0 if answered else 1


def chat_in_terminal(cfg: ChatConfig) -> int:
    """Run `brokerctl chat` with the process's terminal; the exit status."""
    out = ChatOutput(Console(highlight=False), plain=not sys.stdout.isatty())
    try:
        return anyio.run(run_chat, cfg, out)
    except AdapterError as exc:
        print(f"brokerctl chat: {exc}", file=sys.stderr)
        return 2 if exc.code == "unreachable" else 1
