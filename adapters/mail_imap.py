"""The IMAP side of the email adapter, on aioimaplib: log in, select, read by UID, IDLE.

Every command is bounded (the client's own timeout, and the caller's `fail_after`); a
connection the server dropped ends the session (its `lost` event), and the adapter's
loop reconnects. Messages are read by UID, in UID order, with BODY.PEEK[] so reading
never changes a flag: the adapter's position (UIDVALIDITY, UID) is its own, not the
mailbox's \\Seen state.

IDLE starts only after a search found nothing new: a server announces new mail once
(EXISTS), and an announcement that came with a FETCH or SEARCH answer is not repeated
in the IDLE that follows. The mails a search found are read `FETCH_BATCH` at a time,
one UID FETCH each, as servers announce mail in bursts; a message in the answer whose
UID cannot be read fails the batch (ImapError: the connection starts over), and only a
UID the answer does not hold at all (expunged meanwhile) is missing from the result.
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass

import anyio
from aioimaplib import IMAP4, STOP_WAIT_SERVER_PUSH

_UIDVALIDITY = re.compile(rb"\[UIDVALIDITY (\d+)\]")
_UIDNEXT = re.compile(rb"\[UIDNEXT (\d+)\]")
_UID = re.compile(rb"\bUID (\d+)")
FETCH_BATCH = 50  # mails per UID FETCH: a burst in one round trip, memory bounded


class LoginRefused(ConnectionError):
    """The server answered the login with NO or BAD."""


class ImapError(ConnectionError):
    """A command the server did not answer OK: the connection is started over."""


@dataclass(frozen=True, slots=True)
class Mailbox:
    uidvalidity: int
    uidnext: int


class ImapSession:
    """One logged-in IMAP connection with one mailbox selected."""

    def __init__(self, host: str, port: int, tls: bool, timeout: float) -> None:
        self.lost = anyio.Event()
        context = ssl.create_default_context() if tls else None
        self.client = IMAP4(
            host, port, timeout=timeout, conn_lost_cb=self._on_lost, ssl_context=context
        )

    def _on_lost(self, _exc: Exception | None) -> None:
        self.lost.set()

    async def open(self, user: str, password: str, mailbox: str) -> Mailbox:
        await self.client.wait_hello_from_server()
        answer = await self.client.login(user, password)
        if answer.result != "OK":
            raise LoginRefused(_say(answer.lines) or "login refused")
        answer = await self.client.select(mailbox)
        if answer.result != "OK":
            raise ImapError(f"SELECT {mailbox}: {_say(answer.lines)}")
        joined = b" ".join(bytes(line) for line in answer.lines)
        validity, following = _UIDVALIDITY.search(joined), _UIDNEXT.search(joined)
        if validity is None or following is None:
            raise ImapError(f"SELECT {mailbox} gave no UIDVALIDITY/UIDNEXT")
        return Mailbox(int(validity.group(1)), int(following.group(1)))

    async def uids_after(self, uid: int) -> list[int]:
        """The UIDs above `uid`, ascending (`n:*` also names the last message: filtered)."""
        answer = await self.client.uid_search("UID", f"{uid + 1}:*", charset=None)
        if answer.result != "OK":
            raise ImapError(f"UID SEARCH: {_say(answer.lines)}")
        found: set[int] = set()
        for line in answer.lines[:-1]:
            found.update(int(n) for n in bytes(line).split() if n.isdigit())
        return sorted(n for n in found if n > uid)

    async def wait_new(self, uid: int, idle_s: float) -> list[int]:
        """The UIDs above `uid`, waiting in IDLE while there are none."""
        while True:
            found = await self.uids_after(uid)
            if found:
                return found
            await self.idle(idle_s)

    async def fetch(self, uid: int) -> bytes | None:
        """The whole message; None if it is gone (expunged meanwhile)."""
        answer = await self.client.uid("fetch", str(uid), "(BODY.PEEK[])")
        if answer.result != "OK":
            raise ImapError(f"UID FETCH {uid}: {_say(answer.lines)}")
        for line in answer.lines:
            if isinstance(line, bytearray):  # the literal: the message itself
                return bytes(line)
        return None

    async def fetch_many(self, uids: list[int]) -> dict[int, bytes]:
        """The whole messages of `uids` (at most FETCH_BATCH), by UID."""
        answer = await self.client.uid("fetch", ",".join(str(uid) for uid in uids), "(BODY.PEEK[])")
        if answer.result != "OK":
            raise ImapError(f"UID FETCH {uids[0]}..{uids[-1]}: {_say(answer.lines)}")
        found: dict[int, bytes] = {}
        lines = answer.lines
        for i, line in enumerate(lines):
            if not isinstance(line, bytearray):
                continue  # the literal is the message; its UID is said before or after it
            before = _UID.search(bytes(lines[i - 1])) if i > 0 else None
            after = _UID.search(bytes(lines[i + 1])) if i + 1 < len(lines) else None
            said = before or after
            if said is None:
                raise ImapError(f"UID FETCH {uids[0]}..{uids[-1]}: a message without its UID")
            found[int(said.group(1))] = bytes(line)
        return found

    async def idle(self, within: float) -> None:
        """Until the server says the mailbox changed, or `within` seconds passed."""
        idle = await self.client.idle_start(timeout=within)
        try:
            while self.client.has_pending_idle():
                pushed = await self.client.wait_server_push(timeout=within + 5)
                if pushed == STOP_WAIT_SERVER_PUSH or any(
                    bytes(line).endswith((b"EXISTS", b"RECENT")) for line in pushed
                ):
                    break
        finally:
            if self.client.has_pending_idle():
                self.client.idle_done()
        with anyio.fail_after(self.client.timeout):
            await idle

    async def close(self) -> None:
        with anyio.move_on_after(2, shield=True):
            try:
                if not self.lost.is_set() and self.client.get_state() in ("AUTH", "SELECTED"):
                    await self.client.logout()
            except Exception:
                pass
        transport = self.client.protocol.transport if self.client.protocol else None
        if transport is not None:
            transport.close()


def _say(lines: list[bytes | bytearray]) -> str:
    return " ".join(bytes(line).decode(errors="replace") for line in lines)
