"""The running turn of a session, streamed to the pages that show it (server-sent events).

The hooks report each chunk of a running turn's reply and each turn's end
(broker/observe/hub.py); a session's viewers each have a bounded buffer, and
an event for a viewer whose buffer is full is dropped, never waited for: a
slow browser costs the daemon nothing. A viewer's stream sends a comment now
and then so proxies keep it open, and ends when the console stops.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectSendStream
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from broker.observe.hub import Observer
from ledger.port.records import TurnRecord

VIEWER_BUFFER = 256  # events waiting for one slow viewer; past it they are dropped
HEARTBEAT_S = 15.0
Event = tuple[str, dict[str, Any]]


class LiveTurns(Observer):
    def __init__(self) -> None:
        self.viewers: dict[str, set[MemoryObjectSendStream[Event]]] = {}

    async def stream(self, request: Request) -> Response:
        """GET /stream?s=<label>: the session's running turn as it streams."""
        label = request.query_params.get("s", "")
        send, receive = anyio.create_memory_object_stream[Event](VIEWER_BUFFER)
        self.viewers.setdefault(label, set()).add(send)

        async def events() -> AsyncIterator[bytes]:
            try:
                yield b": listening\n\n"
                async with receive:
                    while True:
                        got: Event | None = None
                        with anyio.move_on_after(HEARTBEAT_S):  # not across a yield
                            try:
                                got = await receive.receive()
                            except anyio.EndOfStream:
                                return  # the console stops
                        if got is None:
                            yield b": still here\n\n"
                            continue
                        yield f"event: {got[0]}\ndata: {json.dumps(got[1])}\n\n".encode()
            finally:
                viewers = self.viewers.get(label)
                if viewers is not None:
                    viewers.discard(send)
                    if not viewers:
                        del self.viewers[label]
                send.close()

        return StreamingResponse(
            events(),
            media_type="text/event-stream",
            headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
        )

    def end_all(self) -> None:
        """End every viewer's stream (the console stops)."""
        for viewers in self.viewers.values():
            for send in viewers:
                send.close()

    def _tell(self, label: str, kind: str, data: dict[str, Any]) -> None:
        for send in tuple(self.viewers.get(label, ())):
            # A slow or gone viewer misses it; the page has the turn once it ends.
            with contextlib.suppress(
                anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError
            ):
                send.send_nowait((kind, data))

    def delta(self, session: str, turn: str, text: str) -> None:
        if session in self.viewers:
            self._tell(session, "delta", {"turn": turn, "text": text})

    def turn(self, rec: TurnRecord, written: str) -> None:
        if rec.session in self.viewers:
            self._tell(
                rec.session,
                "turn",
                {"turn": rec.turn_id, "status": rec.status, "written": written},
            )
