"""A person on the test Synapse: a matrix-nio client that sends and waits for events.

No background task: `expect` syncs (long-polling, bounded) until an event that
matches arrives, and keeps every event it saw in `seen`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Self

import anyio
from nio import (
    AsyncClient,
    AsyncClientConfig,
    ErrorResponse,
    RoomCreateResponse,
    RoomSendResponse,
    SyncResponse,
)

from tests.realservers.servers import Server

Event = dict[str, Any]


class MatrixPerson:
    def __init__(self, server: Server, name: str) -> None:
        self.user_id = f"@{name}:localhost"
        self.password = server.accounts[name]
        config = AsyncClientConfig(max_limit_exceeded=0, max_timeouts=0, request_timeout=30)
        self.client = AsyncClient(
            f"http://{server.host}:{server.port}", self.user_id, config=config
        )
        self.seen: list[Event] = []  # every room event seen, with its room_id
        self.since: str | None = None

    async def start(self) -> Self:
        answer = await self.client.login(self.password, device_name="test")
        assert not isinstance(answer, ErrorResponse), answer
        first = await self.client.sync(0, {"room": {"timeline": {"limit": 0}}})
        assert isinstance(first, SyncResponse), first
        self.since = first.next_batch
        return self

    async def close(self) -> None:
        await self.client.close()

    async def room(self, invite: list[str], direct: bool = False) -> str:
        answer = await self.client.room_create(is_direct=direct, invite=invite)
        assert isinstance(answer, RoomCreateResponse), answer
        return str(answer.room_id)

    async def join(self, room_id: str) -> None:
        answer = await self.client.join(room_id)
        assert not isinstance(answer, ErrorResponse), answer

    async def say(self, room_id: str, text: str, thread: str | None = None) -> str:
        content: dict[str, Any] = {"msgtype": "m.text", "body": text}
        if thread:
            content["m.relates_to"] = {"rel_type": "m.thread", "event_id": thread}
        return await self.send(room_id, content)

    async def send(
        self, room_id: str, content: dict[str, Any], kind: str = "m.room.message"
    ) -> str:
        answer = await self.client.room_send(room_id, kind, content)
        assert isinstance(answer, RoomSendResponse), answer
        return str(answer.event_id)

    async def expect(self, match: Callable[[Event], bool], within: float = 20.0) -> Event:
        """The first event (seen before or arriving within `within` s) that matches."""
        with anyio.fail_after(within):
            while True:
                for event in self.seen:
                    if match(event):
                        return event
                await self._sync()

    async def _sync(self) -> None:
        # A long timeline: a sync cut short (`limited`) would hide events from `seen`.
        answer = await self.client.sync(2000, {"room": {"timeline": {"limit": 500}}}, self.since)
        assert isinstance(answer, SyncResponse), answer
        self.since = answer.next_batch
        for room_id, info in answer.rooms.join.items():
            for event in info.timeline.events:
                self.seen.append({**event.source, "room_id": room_id})


def text_of(event: Event) -> str | None:
    """What an event shows as text: an edit's new text, else its body."""
    content = event.get("content") or {}
    new = content.get("m.new_content")
    body = (new or content).get("body")
    return body if isinstance(body, str) else None


def from_user(user_id: str, room_id: str, text: str) -> Callable[[Event], bool]:
    return lambda e: (
        e.get("sender") == user_id and e.get("room_id") == room_id and text_of(e) == text
    )


def joined(user_id: str, room_id: str) -> Callable[[Event], bool]:
    return lambda e: (
        e.get("type") == "m.room.member"
        and e.get("state_key") == user_id
        and e.get("room_id") == room_id
        and (e.get("content") or {}).get("membership") == "join"
    )
