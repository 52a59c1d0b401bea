"""What a session actor needs from the rest of the daemon, as small interfaces.

The actor (actor.py) decides nothing itself (the lifecycle machine does) and reaches
nothing but these ports: it does not hold the registry. `session_ports.py` implements
them over the ledger, the engines and the adapters' connections; a test implements them
with fakes and a clock it steps.

The synchronous ports never block: a write they make is only queued on the ledger's
single writer, which is FIFO, so it commits before any later write of the same actor
(a turn's items are marked running before its commit); the actor calls them only while
`has_room` holds, or after `admit`. The awaited ports end by themselves (a write waits
out a refusing disk inside the writer, and for room at most `ledger.writer_wait_s` at
a time); the actor bounds only the engine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from broker.config import Settings
from broker.context import TokenCounter
from broker.context.session import SessionContext
from broker.engines.base import Engine
from broker.mailbox.commands import Command
from broker.mailbox.session_facts import SessionFacts
from broker.mailbox.turn_commit import Written
from core.queue_machine import QueueMode
from ledger.port.protocols import Committing
from ledger.port.records import ActorStart, Carry, ItemInfo, TurnRecord

if TYPE_CHECKING:
    from broker.mailbox.running_turn import RunningTurn


class CommandTarget(Protocol):
    """The actor as a chat command sees it (chat.py)."""

    @property
    def label(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def facts(self) -> SessionFacts: ...
    @property
    def turn(self) -> RunningTurn | None: ...

    @property
    def backlog(self) -> int: ...

    def apply_command(self, command: Command) -> None: ...


class ActorPorts(Protocol):
    """Everything an actor does outside itself."""

    @property
    def settings(self) -> Settings: ...
    @property
    def counter(self) -> TokenCounter: ...
    @property
    def clock(self) -> Callable[[], float]: ...  # seconds, the event loop's
    @property
    def send_delta(
        self,
    ) -> Callable[[str, str, dict[str, Any]], None]: ...  # channel, session, frame

    # The session's start: recover its crashed turns, wait for an earlier actor's
    # writes, load what it needs.
    async def recover(self, label: str) -> list[ItemInfo]: ...
    async def settled(self) -> None: ...
    async def load(self, label: str) -> tuple[ActorStart, SessionContext]: ...

    # Room in the ledger's queue of writes (ledger/port/protocols.py): `admit` waits for
    # some, at most `ledger.writer_wait_s`, then raises `WriterOverloaded`.
    def has_room(self) -> bool: ...
    async def admit(self) -> None: ...

    # Writes: queued on the FIFO writer, never blocking.
    def mark_running(self, turn_id: str, item_ids: list[str], started_ms: int) -> None: ...
    async def save_progress(self, turn_id: str, label: str, text: str) -> bool:
        """Waits for room first; False: not saved (no room came, or the writer stopped)."""
        ...

    def drop_item(self, label: str, item_id: str, reason: str, item: ItemInfo | None) -> None: ...
    def new_thread(
        self, label: str, previous: str | None, thread: int | None, reason: str, carry: Carry | None
    ) -> None: ...
    async def commit_turn(self, rec: TurnRecord) -> Written: ...
    def write_events(
        self,
        turn_id: str,
        label: str,
        parent: str | None,
        first_seq: int,
        events: list[tuple[str, dict[str, Any]]],
    ) -> Committing[None] | None:
        """Queue a running turn's events (None: the writer has stopped)."""
        ...

    # Engines and their tools, the adapters, chat commands.
    def engine_for(self, persona: str | None) -> Engine: ...
    def default_mode(self, item: ItemInfo) -> QueueMode | None: ...
    async def call_tool(
        self, label: str, turn_id: str, name: str, args: dict[str, Any], call_id: str
    ) -> str: ...
    async def recall_hint(
        self, label: str, terms: tuple[str, ...], own_msg_ids: tuple[str, ...]
    ) -> list[str]: ...  # which terms the session's older messages hold
    def chat_command(self, actor: CommandTarget, item: ItemInfo, overloaded: bool) -> None:
        """Apply a chat command and answer it; `overloaded`: it found no room in time, and
        is answered so instead, changing nothing (chat.py)."""
        ...

    # The registry: a turn ended (a drain may wait for it); the actor retires.
    def turn_ended(self) -> None: ...
    def retire(self, actor: object) -> None: ...
