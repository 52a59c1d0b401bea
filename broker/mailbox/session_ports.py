"""The actor's ports (ports.py) over the ledger, the engines and the adapters.

Writes that nobody waits on are only queued on the ledger's writer (FIFO): a turn's
`mark_running` commits before its commit, a `/new` before the next turn's. A progress
save waits for room first; one that got none in time is skipped, not an error, as the
turn's commit holds its whole output anyway. Engines of personas that name one are
built when first used, once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio

from broker.config import Settings
from broker.context import TokenCounter
from broker.context.session import SessionContext, from_thread
from broker.deliveries import Deliveries
from broker.engines.base import Engine
from broker.engines.factory import build_engine
from broker.mailbox.chat import ChatCommands
from broker.mailbox.ports import CommandTarget
from broker.mailbox.turn_commit import TurnCommits
from broker.mailbox.warm_threads import WarmThreads
from broker.router import Router
from broker.tools import table as tools
from core import queue_machine as m
from core.engine_types import ToolSpec
from ledger.port.errors import WriterClosed, WriterOverloaded
from ledger.port.protocols import Committing, LedgerPort
from ledger.port.records import ActorStart, Carry, ItemInfo
from plumbing import logs
from plumbing.clock import loop_clock
from plumbing.ids import now_ms

log = logs.get("broker.actor")


class SessionPorts:
    def __init__(
        self,
        settings: Settings,
        ledger: LedgerPort,
        engine: Engine,
        router: Router,
        deliveries: Deliveries,
        commits: TurnCommits,
        tool_context: tools.ToolContext,
        retire: Callable[[Any], None],
    ) -> None:
        self.settings = settings  # the registry replaces it on a reload
        self.ledger = ledger
        self.engine = engine
        self.router = router
        self.commits = commits
        self.commit_turn = commits.commit  # bound: no second coroutine a turn
        self.chat = ChatCommands(ledger, router, deliveries)
        self.tool_context = tool_context
        self.retire = retire
        self.counter = TokenCounter(settings.engine.encoding)
        self.engines: dict[str, Engine] = {}  # of personas that name one
        self.deliveries = deliveries
        # anyio's clock (a test's MockClock on trio), bound to the loop it is made in.
        self.clock: Callable[[], float] = loop_clock()
        self.warm: WarmThreads | None = None  # the Temporal runtime's (warm_threads.py)
        # Made only while `drain` waits on it: a turn's end costs nothing otherwise.
        self._turn_ended: anyio.Event | None = None

    @property
    def send_delta(self) -> Callable[[str, str, dict[str, Any]], None]:
        return self.deliveries.delta

    async def recover(self, label: str) -> list[ItemInfo]:
        await self.ledger.recover_crashed(now_ms(), session=label)
        return await self.ledger.open_items(label)

    async def settled(self) -> None:
        await self.ledger.settled()

    async def load(self, label: str) -> tuple[ActorStart, SessionContext]:
        """The session's start and context; a context kept at the session's head
        (warm_threads.py) is used as it is while the ledger's head is still that one."""
        known = self.warm.take(label) if self.warm is not None else None
        read = await self.ledger.session_start(label, known[0] if known else None)
        if read.known and known is not None:
            ctx = known[1]
            ctx.bridges.clear()  # the ledger's pending notes, as a load finds them
            ctx.add_bridges(read.bridges)
            return read.start, ctx
        ctx = from_thread(read.thread, self.counter)
        ctx.add_bridges(read.bridges)
        if read.start.head is None and read.seed is not None:
            ctx.state = read.seed  # a new thread: what a rollover carried over
        return read.start, ctx

    def mark_running(self, turn_id: str, item_ids: list[str], started_ms: int) -> None:
        self.ledger.submit_mark_running(turn_id, item_ids, started_ms)

    def has_room(self) -> bool:
        return self.ledger.has_room()

    async def admit(self) -> None:
        await self.ledger.admit()

    async def save_progress(self, turn_id: str, label: str, text: str) -> bool:
        try:
            await self.ledger.admit()
            self.ledger.submit_progress(turn_id, label, text, now_ms())
        except (WriterOverloaded, WriterClosed) as exc:
            log.warning("partial output not saved", session=label, turn=turn_id, error=str(exc))
            return False
        return True

    def write_events(
        self,
        turn_id: str,
        label: str,
        parent: str | None,
        first_seq: int,
        events: list[tuple[str, dict[str, Any]]],
    ) -> Committing[None] | None:
        try:
            return self.ledger.submit_events(turn_id, label, parent, first_seq, events, now_ms())
        except WriterClosed:
            return None  # they go with the turn's commit, if it can still be made

    def drop_item(self, label: str, item_id: str, reason: str, item: ItemInfo | None) -> None:
        self.ledger.submit_item_status([(item_id, "dropped", reason)], now_ms())
        msg_id = item.msg_id if item else None
        log.info("item dropped", session=label, item=item_id, reason=reason, msg_id=msg_id)

    def new_thread(
        self, label: str, previous: str | None, thread: int | None, reason: str, carry: Carry | None
    ) -> None:
        pending = self.ledger.submit_new_thread(label, now_ms(), thread, reason, carry)
        tg = self.chat.tg  # the registry's group, where waits for commits run
        assert tg is not None, "threads begin only while the registry runs"
        tg.start_soon(self._log_new_thread, pending, label, previous, reason, carry)

    async def _log_new_thread(
        self,
        pending: Committing[int | None],
        label: str,
        previous: str | None,
        reason: str,
        carry: Carry | None,
    ) -> None:
        # Logged once it commits, by a task that awaits it (never in the writer's task).
        try:
            number = await pending.result()
        except Exception as exc:
            log.error("thread not started", session=label, reason=reason, error=str(exc))
            return
        if number is not None:
            log.info(
                "thread started",
                session=label,
                thread=number,
                previous=number - 1,
                reason=reason,
                previous_head=previous,
                carried=carry is not None,
            )

    def engine_for(self, persona: str | None) -> Engine:
        """The engine of `persona`, else the default engine."""
        chosen = self.settings.personas.get(persona or "")
        name = chosen.engine if chosen is not None else None
        if name is None or name not in self.settings.engines:
            return self.engine
        if name not in self.engines:
            self.engines[name] = build_engine(self.settings.engines[name])
        return self.engines[name]

    async def aclose_engines(self) -> None:
        for engine in (self.engine, *self.engines.values()):
            await engine.aclose()

    def default_mode(self, item: ItemInfo) -> m.QueueMode | None:
        """The queue mode of `item` when it names none and the session has no override:
        for a message, the one its route gave it at ingest (broker/router.py)."""
        queue = self.settings.queue
        if item.source == "person":
            # None only for an item filed before the route's mode was stored with it.
            return item.route_mode or queue.person_mode
        if item.source in ("worker", "timer"):
            return queue.worker_mode
        return None

    def tool_specs(self, label: str, kind: str) -> tuple[ToolSpec, ...]:
        return tools.offered(self.tool_context, label, kind)

    async def call_tool(
        self, label: str, turn_id: str, name: str, args: dict[str, Any], call_id: str
    ) -> str:
        return await tools.call(self.tool_context, label, turn_id, name, args, call_id)

    async def recall_hint(
        self, label: str, terms: tuple[str, ...], own_msg_ids: tuple[str, ...]
    ) -> list[str]:
        return await self.ledger.recall_hint_terms(label, terms, own_msg_ids)

    def chat_command(self, actor: CommandTarget, item: ItemInfo, overloaded: bool) -> None:
        self.chat.handle(actor, item, overloaded)

    def turn_ended(self) -> None:
        if self._turn_ended is not None:
            self._turn_ended.set()
            self._turn_ended = None

    async def a_turn_ends(self) -> None:
        if self._turn_ended is None:
            self._turn_ended = anyio.Event()
        await self._turn_ended.wait()
