"""The replies the broker sends one adapter, buffered for `adapters.sdk.Adapter.replies`.

Deltas are best effort: a full buffer drops them. A `deliver` waits for room,
which holds up reading the connection (the SDK's backpressure).

A `deliver` is handed out once per out_id. A repeat of one already confirmed is
confirmed again (the broker never recorded the first `delivered`) and not handed out;
a repeat of one not yet confirmed is dropped, as the consumer still holds it.
"""

from __future__ import annotations

import contextlib
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import orjson

from adapters.types import Deliver, Delta, Reply

log = logging.getLogger("adapters.sdk")  # the SDK's one logger: users configure it by name
_LINK_GONE = (anyio.BrokenResourceError, anyio.ClosedResourceError)


class ReplyBuffer:
    """The bounded buffer of replies and the out_ids seen."""

    def __init__(
        self, size: int, seen_limit: int, post: Callable[[bytes], Awaitable[None]]
    ) -> None:
        self.dropped_deltas = 0  # deltas dropped because the buffer was full
        self.seen_limit = seen_limit
        self._post = post
        self._seen: OrderedDict[str, bool] = OrderedDict()  # out_id -> confirmed
        self.replies_in, self.replies_out = anyio.create_memory_object_stream[Reply](size)

    async def offer(self, frame: dict[str, Any]) -> None:
        kind = frame.get("type")
        if kind == "delta":
            self._offer_delta(frame)
        elif kind == "deliver":
            await self._offer_deliver(frame)
        # Other frame types are ignored: the protocol may grow.

    def _offer_delta(self, frame: dict[str, Any]) -> None:
        try:
            self.replies_in.send_nowait(Delta.from_frame(frame))
        except anyio.WouldBlock:
            self.dropped_deltas += 1
        except (*_LINK_GONE, KeyError, TypeError):
            pass  # closing, or a malformed frame

    async def _offer_deliver(self, frame: dict[str, Any]) -> None:
        out_id = frame.get("out_id")
        if not isinstance(out_id, str):
            return
        confirmed = self._seen.get(out_id)
        if confirmed is not None:
            if confirmed:
                await self._post(orjson.dumps({"type": "delivered", "out_id": out_id}) + b"\n")
            return
        try:
            deliver = Deliver.from_frame(frame)
        except (KeyError, TypeError):
            log.warning("malformed deliver %s skipped", out_id)
            return
        self.remember(out_id, confirmed=False)
        with contextlib.suppress(*_LINK_GONE):
            await self.replies_in.send(deliver)  # backpressure: see `Adapter.replies`

    def remember(self, out_id: str, *, confirmed: bool) -> None:
        self._seen[out_id] = confirmed
        self._seen.move_to_end(out_id)
        while len(self._seen) > self.seen_limit:
            self._seen.popitem(last=False)
