"""Matrix adapter: DMs, rooms and threads on a Matrix homeserver ⇄ the broker.

    python -m adapters.matrix --config /etc/agent-broker/adapters/matrix.toml

    [matrix]
    homeserver = "https://matrix.example.org"
    user_id = "@agent:example.org"
    password_file = "..."        # else $CREDENTIALS_DIRECTORY/matrix-password
    rooms = ["#help:example.org"]  # joined at start; invites are accepted too

Runs on asyncio only: matrix-nio is an asyncio (aiohttp) library. Rooms are
unencrypted: the adapter has no end-to-end encryption, and an encrypted event
is logged with its id and skipped.

Messages come from the sync stream. The `since` token of a sync is stored only once
the broker acked every message of that sync and of the ones before it
(adapters/matrix_position.py); a restart syncs from it, and a room whose timeline the
server cut short (`limited`) is filled in from /messages back to that token. The first
start ever passes on only the messages sent after its process began.

A reply is confirmed only after the server returned its event id. It is sent with the
reply's out_id as the transaction id, from the same device across restarts
(matrix_session.py), so sending it again is the same event. M_LIMIT_EXCEEDED waits
`retry_after_ms` and sends again; a refusal no retry can fix (not in the room) is
logged and the reply confirmed unsent, so it holds up nothing behind it. A reply still
streaming `edit_interval_s` after its first delta is shown as a message, then edited
(`m.replace`) at most once per interval, the final text being the last edit; a reply
done sooner goes out as one message. Deltas are best effort.
"""

from __future__ import annotations

import logging
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import anyio
from anyio.streams.memory import MemoryObjectSendStream
from nio import (
    AsyncClient,
    ErrorResponse,
    MessageDirection,
    RoomMessagesResponse,
    RoomSendResponse,
    SyncResponse,
)
from pydantic import Field

from adapters.bridge import Incoming, Target, main
from adapters.matrix_events import (
    Bot,
    MalformedEvent,
    Room,
    edit_content,
    since_arrival,
    text_content,
    to_incoming,
)
from adapters.matrix_position import AckedTokens
from adapters.matrix_session import StoredLogin, log_in, new_client
from adapters.position import PositionStore
from adapters.retry import RetryClock, ServerUnavailable, single_error
from adapters.sdk import Backoff, Deliver, Delta
from adapters.settings import AdapterSection, Strict, read_secret, section

log = logging.getLogger("adapters.matrix")

POSITION_FLUSH_S = 0.25  # positions acked are written this often (position.py)
BACKFILL_MAX = 1000  # events fetched per cut-short room timeline
PERMANENT = frozenset({"M_FORBIDDEN", "M_NOT_FOUND", "M_BAD_JSON", "M_NOT_JSON", "M_TOO_LARGE"})


class MatrixSection(Strict):
    homeserver: str = Field(min_length=8)
    user_id: str = Field(pattern=r"^@[^:]+:.+$")
    password_file: Path | None = None
    rooms: list[str] = Field(default_factory=list)
    accept_invites: bool = True
    device_name: str = "agent-broker"
    edit_interval_s: float = Field(default=1.0, ge=0)
    sync_timeout_s: float = Field(default=30.0, gt=0)
    request_timeout_s: float = Field(default=30.0, gt=0)
    timeline_limit: int = Field(default=50, gt=0)


@dataclass
class _Stream:
    """A reply being streamed: its text so far, when it began, its shown event."""

    began: float
    text: str = ""
    shown_at: float | None = None
    event_id: str | None = None


class MatrixChannel:
    """The Matrix side of the bridge (see the module's rules)."""

    def __init__(self, cfg: MatrixSection, common: AdapterSection, password: str) -> None:
        self.cfg = cfg
        self.password = password
        self.bot = Bot(cfg.user_id)
        self.positions = PositionStore(common.state_dir / "positions.json")
        self.login = StoredLogin(common.state_dir)
        self.retry = RetryClock(
            common.give_up_s, Backoff(common.retry_initial_s, 2.0, common.retry_max_s, 0.5)
        )
        self.client: AsyncClient | None = None
        self._up = anyio.Event()
        self._streams: dict[str, _Stream] = {}
        self._began_ms = int(time.time() * 1000)  # a first start passes on what comes after
        self._direct: set[str] = set(self.positions.get("direct") or [])
        self._tokens = AckedTokens()

    # -- in --------------------------------------------------------------------------

    async def run(self, inbox: MemoryObjectSendStream[Incoming]) -> None:
        while True:
            client = new_client(self.cfg.homeserver, self.cfg.user_id, self.cfg.request_timeout_s)
            try:
                with anyio.fail_after(self.cfg.request_timeout_s * 2):
                    await log_in(client, self.password, self.login, self.cfg.device_name)
                    for room in self.cfg.rooms:
                        joined = await client.join(room)
                        if isinstance(joined, ErrorResponse):
                            log.warning("cannot join %s: %s", room, joined)
                    profile = await client.get_displayname()
                    named = getattr(profile, "displayname", None)
                    self.bot = Bot(self.cfg.user_id, named if isinstance(named, str) else None)
                self.retry.succeeded()
                log.info("connected to %s as %s", self.cfg.homeserver, client.user_id)
                with single_error():  # a ConnectionError from inside its task group
                    await self._serve(client, inbox)
                error = "the sync ended"
            except (OSError, TimeoutError, ConnectionError, aiohttp.ClientError) as exc:
                error = str(exc) or type(exc).__name__
            finally:
                self.client = None
                self._up = anyio.Event()
                self.positions.flush()
                with anyio.CancelScope(shield=True), anyio.move_on_after(2):
                    await client.close()  # shielded: a SIGTERM still closes the HTTP session
            delay = self.retry.failed(anyio.current_time(), random.random())
            if delay is None:
                raise ServerUnavailable(f"Matrix server {self.cfg.homeserver}: {error}")
            log.warning(
                "Matrix server %s: %s; retrying in %.1fs", self.cfg.homeserver, error, delay
            )
            await anyio.sleep(delay)

    async def _serve(self, client: AsyncClient, inbox: MemoryObjectSendStream[Incoming]) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._flush_positions)
            since = self.positions.get("since")
            full_state = True  # the rooms' members, for DMs and names (nio keeps no store)
            sync_filter = {
                "room": {"timeline": {"limit": self.cfg.timeline_limit}},
                "presence": {"types": []},
            }
            while True:
                timeout_ms = 0 if full_state else int(self.cfg.sync_timeout_s * 1000)
                answer = await client.sync(timeout_ms, sync_filter, since, full_state)
                if isinstance(answer, ErrorResponse):
                    await self._sync_failed(answer)
                    continue
                assert isinstance(answer, SyncResponse)
                await self._accept_invites(client, answer)
                await self._pass_on(client, answer, since, inbox)
                since, full_state = answer.next_batch, False
                if self.client is None:
                    self.client = client
                    self._up.set()

    async def _sync_failed(self, answer: ErrorResponse) -> None:
        if answer.status_code == "M_LIMIT_EXCEEDED":
            wait = (answer.retry_after_ms or 1000) / 1000
            log.warning("sync rate-limited by the server; again in %.1fs", wait)
            await anyio.sleep(wait)
            return
        if answer.status_code == "M_UNKNOWN_TOKEN":
            self.login.forget()
        raise ConnectionError(f"sync: {answer.status_code} {answer.message}")

    async def _accept_invites(self, client: AsyncClient, answer: SyncResponse) -> None:
        for room_id, invite in answer.rooms.invite.items():
            for event in invite.invite_state:
                source = getattr(event, "source", {}) or {}
                content = source.get("content") or {}
                if source.get("state_key") == self.bot.user_id and content.get("is_direct"):
                    self._direct.add(room_id)
                    self.positions.put("direct", sorted(self._direct))
            if not self.cfg.accept_invites:
                continue
            joined = await client.join(room_id)
            log.info(
                "invited to %s: %s",
                room_id,
                "joined" if not isinstance(joined, ErrorResponse) else joined,
            )

    async def _pass_on(
        self,
        client: AsyncClient,
        answer: SyncResponse,
        since: str | None,
        inbox: MemoryObjectSendStream[Incoming],
    ) -> None:
        """Each room's new events to the broker, then the token once all are acked."""
        self._tokens.open()
        for room_id, info in answer.rooms.join.items():
            events = [getattr(e, "source", None) or {} for e in info.timeline.events]
            if info.timeline.limited and since is not None:
                events = (
                    await self._backfill(client, room_id, info.timeline.prev_batch, since) + events
                )
            room = self._room(client, room_id)
            for event in since_arrival(events, self.bot):
                if since is None and int(event.get("origin_server_ts") or 0) < self._began_ms:
                    continue  # history from before the first start
                incoming = self._convert(event, room)
                if incoming is not None:
                    self._tokens.sent()
                    incoming.on_ack = self._acked
                    await inbox.send(incoming)
        safe = self._tokens.close(answer.next_batch)
        if safe is not None:
            self.positions.put("since", safe)
            if since is None:
                self.positions.flush()  # at once: messages from now on must be caught up

    def _acked(self) -> None:
        safe = self._tokens.acked()
        if safe is not None:
            self.positions.put("since", safe)

    async def _backfill(
        self, client: AsyncClient, room_id: str, start: str | None, until: str
    ) -> list[dict[str, Any]]:
        """The events of a cut-short timeline between the stored token and the sync's."""
        found: list[dict[str, Any]] = []
        while start and len(found) < BACKFILL_MAX:
            page = await client.room_messages(
                room_id, start=start, end=until, direction=MessageDirection.back, limit=100
            )
            if not isinstance(page, RoomMessagesResponse):
                raise ConnectionError(f"catching up {room_id}: {page}")
            found.extend(getattr(e, "source", None) or {} for e in page.chunk)
            if not page.chunk or page.end == start:
                break
            start = page.end
        log.info("caught up %d events of %s from /messages", len(found), room_id)
        return found[::-1]

    def _room(self, client: AsyncClient, room_id: str) -> Room:
        known = client.rooms.get(room_id)
        if known is None:
            return Room(room_id, room_id in self._direct)
        names = {u: user.display_name for u, user in known.users.items() if user.display_name}
        people = set(known.users) | set(getattr(known, "invited_users", {}) or {})
        return Room(room_id, room_id in self._direct or len(people) == 2, names)

    def _convert(self, event: dict[str, Any], room: Room) -> Incoming | None:
        if event.get("type") == "m.room.encrypted":
            log.warning(
                "encrypted event %s in %s skipped (no E2EE)", event.get("event_id"), room.room_id
            )
            return None
        try:
            return to_incoming(event, room, self.bot)
        except (MalformedEvent, KeyError, TypeError, ValueError) as exc:
            log.warning(
                "malformed event %s in %s skipped: %s", event.get("event_id"), room.room_id, exc
            )
            return None

    async def _flush_positions(self) -> None:
        while True:
            await anyio.sleep(POSITION_FLUSH_S)
            self.positions.flush()

    # -- out -------------------------------------------------------------------------

    async def delta(self, delta: Delta, target: Target) -> None:
        """A reply still streaming after the interval is shown, then edited."""
        now = anyio.current_time()
        stream = self._streams.setdefault(delta.out_id, _Stream(began=now))
        stream.text += delta.text
        client = self.client
        if client is None or now - (stream.shown_at or stream.began) < self.cfg.edit_interval_s:
            return
        stream.shown_at = now
        if stream.event_id is None:  # not the out_id: deliver's own txn must stay unused
            content, txn = text_content(stream.text, target.thread_id, None), f"{delta.out_id}.0"
        else:
            content, txn = edit_content(stream.event_id, stream.text), None
        answer = await self._send(client, target.peer_id, content, txn)
        if isinstance(answer, RoomSendResponse):
            stream.event_id = stream.event_id or answer.event_id
        else:
            log.debug("delta of %s not shown: %s", delta.out_id, answer)

    async def deliver(self, reply: Deliver) -> None:
        stream = self._streams.pop(reply.out_id, None)
        room_id = reply.peer_id or ""
        if not room_id:
            log.warning("reply %s has no room to send to; confirmed unsent", reply.out_id)
            return
        if stream is not None and stream.event_id is not None:
            content, txn = edit_content(stream.event_id, reply.text), f"{reply.out_id}.final"
        else:
            last = reply.in_reply_to[-1] if reply.in_reply_to else None
            content, txn = text_content(reply.text, reply.thread_id, last), reply.out_id
        attempt = 0
        while True:
            await self._up.wait()  # the run loop gives up (exit 75) if it never comes
            client = self.client
            if client is not None:
                answer = await self._send(client, room_id, content, txn)
                if isinstance(answer, RoomSendResponse) or answer.status_code in PERMANENT:
                    if isinstance(answer, ErrorResponse):
                        log.error(
                            "reply %s refused by %s, confirmed unsent: %s",
                            reply.out_id,
                            room_id,
                            answer,
                        )
                    return
                if answer.status_code == "M_LIMIT_EXCEEDED":
                    wait = (answer.retry_after_ms or 1000) / 1000
                    log.warning("reply %s rate-limited; sending again in %.2fs", reply.out_id, wait)
                    await anyio.sleep(wait)
                    continue
                log.warning("reply %s to %s not accepted yet: %s", reply.out_id, room_id, answer)
            await anyio.sleep(Backoff(initial=0.2, maximum=5.0).delay(attempt, random.random()))
            attempt += 1

    async def _send(
        self, client: AsyncClient, room_id: str, content: dict[str, Any], txn: str | None
    ) -> RoomSendResponse | ErrorResponse:
        """The server's answer: its event id, or an error (a lost connection too)."""
        try:
            answer = await client.room_send(room_id, "m.room.message", content, txn)
        except (OSError, TimeoutError, aiohttp.ClientError) as exc:
            return ErrorResponse(str(exc) or type(exc).__name__, "M_CONNECTION")
        if isinstance(answer, RoomSendResponse) and answer.event_id:
            return answer
        return answer if isinstance(answer, ErrorResponse) else ErrorResponse(str(answer))


def make_channel(raw: dict[str, Any], common: AdapterSection) -> MatrixChannel:
    # nio logs every room event at INFO; the adapter's own lines say what matters.
    logging.getLogger("nio").setLevel(max(logging.WARNING, logging.root.level))
    cfg = section(raw, "matrix", MatrixSection)
    password = read_secret("matrix-password", cfg.password_file)
    assert password is not None  # required=True raises instead
    return MatrixChannel(cfg, common, password)


if __name__ == "__main__":
    sys.exit(main(None, "matrix", make_channel))
