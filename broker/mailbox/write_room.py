"""Room in the ledger's queue of writes, as a session's actor waits for it.

`has_room` is the ledger's own test and costs no loop turn; `wait` awaits `admit` only
without room, again after each `ledger.writer_wait_s` that brought none (logged each
time), until there is room or the writer stops. A chat command that waited in the
actor's queue for a whole `admit` in vain is noted as `overloaded`, and answered so
when its turn comes (chat.py).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from broker.mailbox.commands import is_chat_command
from broker.mailbox.ports import ActorPorts
from ledger.port.errors import WriterClosed, WriterOverloaded
from ledger.port.records import ItemInfo
from plumbing import logs

log = logs.get("broker.actor")


class WriteRoom:
    def __init__(self, label: str, ports: ActorPorts) -> None:
        self.label = label
        self.has_room = ports.has_room
        self._admit = ports.admit
        self.waiting = False  # a task of the actor awaits room for its queue
        self._overloaded: set[str] = set()

    async def wait(self, queue: Collection[object], *, while_queued: bool = False) -> None:
        """Until there is room; `while_queued`: or until `queue` is empty."""
        while not self.has_room() and (queue or not while_queued):
            commands = [e.id for e in queue if isinstance(e, ItemInfo) and is_chat_command(e)]
            try:
                await self._admit()
            except WriterOverloaded as exc:
                self._overloaded.update(commands)  # answered `overloaded` in their turn
                log.warning(
                    "the session waits for room to write", session=self.label, error=str(exc)
                )
            except WriterClosed:
                return  # the daemon stops: the writes that follow fail, and the actor with them

    def handle_later(
        self, spawn: Callable[..., Any], queue: Collection[object], handle: Callable[[], None]
    ) -> None:
        """Without room: a task (one at a time) waits for it, then calls `handle` if
        `queue` still holds something."""
        if not self.waiting:
            self.waiting = True
            spawn(self._handle_when_room, queue, handle)

    async def _handle_when_room(
        self, queue: Collection[object], handle: Callable[[], None]
    ) -> None:
        try:
            await self.wait(queue, while_queued=True)
        finally:
            self.waiting = False
        if queue:
            handle()

    def overloaded(self, item: ItemInfo) -> bool:
        """Did this chat command find no room in time? Asked once."""
        if item.id not in self._overloaded:
            return False
        self._overloaded.discard(item.id)
        return True
