"""Email adapter: a mailbox (IMAP IDLE in) and a mail server (SMTP out) ⇄ the broker.

    python -m adapters.mail --config /etc/agent-broker/adapters/mail.toml

(`mail`, not `email`: a module named `email` would shadow the standard library's.)

    [mail]
    address = "agent@example.org"   # the bot's address: From of replies, To of mail to it
    imap_host = "imap.example.org"
    smtp_host = "smtp.example.org"
    password_file = "..."           # else $CREDENTIALS_DIRECTORY/mail-password

Runs on asyncio only: aioimaplib and aiosmtplib are asyncio libraries.

On each (re)connect the adapter reads the mailbox from the UID after its stored
position, then IDLEs and reads what arrives. The position (UIDVALIDITY, UID) is stored
only once the broker acked every message up to it (position.py); a changed UIDVALIDITY
means the UIDs were renumbered, so the whole mailbox is read again and the broker
answers `duplicate` for what it had. The first start ever begins at the mailbox's
UIDNEXT of that moment.

A reply is confirmed only after the SMTP server's 250 for its DATA. A 4xx answer or a
lost connection is retried with backoff, and the adapter exits 75 when the server
stays unusable past `give_up_s`; a 5xx answer can never succeed, so it is logged and
the reply confirmed as undeliverable. Mail that is automatic (Auto-Submitted, a
bounce) or from the bot's own address is never passed on: two robots must not answer
each other.
"""

from __future__ import annotations

import logging
import random
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import aiosmtplib
import anyio
from aioimaplib import AioImapException
from anyio.streams.memory import MemoryObjectSendStream
from pydantic import Field

from adapters.bridge import Incoming, Target, main
from adapters.mail_book import ReplyBook
from adapters.mail_imap import FETCH_BATCH, ImapSession, LoginRefused
from adapters.mail_message import Malformed, ReplyContext, build_reply, parse
from adapters.position import PositionStore
from adapters.retry import RetryClock, ServerUnavailable, single_error
from adapters.sdk import Backoff, Deliver, Delta
from adapters.settings import AdapterSection, Strict, read_secret, section

log = logging.getLogger("adapters.mail")

POSITION_FLUSH_S = 0.25  # positions acked are written this often (position.py)
POSITION = "imap"


class MailSection(Strict):
    address: str = Field(pattern=r"^[^@\s]+@[^@\s]+$")
    name: str | None = None  # the display name on replies
    username: str | None = None  # the login (IMAP and SMTP), default the address
    password_file: Path | None = None
    imap_host: str
    imap_port: int = Field(default=993, gt=0, lt=65536)
    imap_tls: bool = True  # False: plaintext IMAP (a loopback test server only)
    mailbox: str = "INBOX"
    smtp_host: str
    smtp_port: int = Field(default=587, gt=0, lt=65536)
    smtp_tls: Literal["starttls", "tls", "none"] = "starttls"
    smtp_auth: bool = True  # log in to the SMTP server with the same credentials
    idle_s: float = Field(default=300.0, gt=0)  # IDLE this long, then start it over
    connect_timeout_s: float = Field(default=15.0, gt=0)
    command_timeout_s: float = Field(default=30.0, gt=0)
    send_timeout_s: float = Field(default=60.0, gt=0)


class MailChannel:
    """The email side of the bridge (see the module's rules)."""

    def __init__(self, cfg: MailSection, common: AdapterSection, password: str) -> None:
        self.cfg = cfg
        self.password = password
        self.address = cfg.address.lower()
        self.positions = PositionStore(common.state_dir / "positions.json")
        self.book = ReplyBook(common.state_dir / "replies.jsonl")
        backoff = Backoff(common.retry_initial_s, 2.0, common.retry_max_s, 0.5)
        self.imap_retry = RetryClock(common.give_up_s, backoff)
        self.smtp_retry = RetryClock(common.give_up_s, backoff)
        self._smtp: aiosmtplib.SMTP | None = None
        self._smtp_gave_up = anyio.Event()
        self._smtp_error = ""

    # -- in --------------------------------------------------------------------------

    async def run(self, inbox: MemoryObjectSendStream[Incoming]) -> None:
        try:
            with single_error():
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._read_forever, inbox)
                    tg.start_soon(self._flush_positions)
                    await self._smtp_gave_up.wait()
                    raise ServerUnavailable(self._smtp_error)
        finally:
            self.book.close()

    async def _flush_positions(self) -> None:
        try:
            while True:
                await anyio.sleep(POSITION_FLUSH_S)
                self.positions.flush()
        finally:
            self.positions.flush()

    async def _read_forever(self, inbox: MemoryObjectSendStream[Incoming]) -> None:
        where = f"IMAP server {self.cfg.imap_host}:{self.cfg.imap_port}"
        while True:
            session = ImapSession(
                self.cfg.imap_host,
                self.cfg.imap_port,
                self.cfg.imap_tls,
                self.cfg.command_timeout_s,
            )
            try:
                with anyio.fail_after(self.cfg.connect_timeout_s):
                    box = await session.open(
                        self.cfg.username or self.cfg.address, self.password, self.cfg.mailbox
                    )
                self.imap_retry.succeeded()
                log.info("connected to %s as %s", where, self.cfg.username or self.cfg.address)
                await self._serve(session, box.uidvalidity, box.uidnext, inbox)
                error = "the connection ended"
            except LoginRefused as exc:
                error = f"login refused: {exc}"
            except (OSError, TimeoutError, ConnectionError, AioImapException) as exc:
                error = str(exc) or type(exc).__name__
            finally:
                await session.close()
            delay = self.imap_retry.failed(anyio.current_time(), random.random())
            if delay is None:
                raise ServerUnavailable(f"{where}: {error}")
            log.warning("%s: %s; retrying in %.1fs", where, error, delay)
            await anyio.sleep(delay)

    def _start_uid(self, uidvalidity: int, uidnext: int) -> int:
        """The UID after which to read."""
        stored = self.positions.get(POSITION)
        if not isinstance(stored, dict):
            self._store(uidvalidity, uidnext - 1)
            self.positions.flush()  # at once: mail from now on must be read after a crash
            return uidnext - 1
        if stored.get("uidvalidity") != uidvalidity:
            log.warning(
                "the mailbox's UIDVALIDITY changed (%s -> %s): reading it all again",
                stored.get("uidvalidity"),
                uidvalidity,
            )
            return 0
        return int(stored.get("uid", 0))

    def _store(self, uidvalidity: int, uid: int) -> None:
        self.positions.put(POSITION, {"uidvalidity": uidvalidity, "uid": uid})

    async def _serve(
        self,
        session: ImapSession,
        uidvalidity: int,
        uidnext: int,
        inbox: MemoryObjectSendStream[Incoming],
    ) -> None:
        last = self._start_uid(uidvalidity, uidnext)
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                await session.lost.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(watch)
            while True:
                new = await session.wait_new(last, self.cfg.idle_s)
                for start in range(0, len(new), FETCH_BATCH):
                    batch = new[start : start + FETCH_BATCH]
                    mails = await session.fetch_many(batch)
                    for uid in batch:
                        raw = mails.get(uid)
                        if raw is not None:  # else expunged meanwhile
                            await self._pass_on(raw, uid, uidvalidity, inbox)
                        last = uid

    async def _pass_on(
        self, raw: bytes, uid: int, uidvalidity: int, inbox: MemoryObjectSendStream[Incoming]
    ) -> None:
        try:
            mail = parse(raw, self.address, f"uid {uidvalidity}/{uid}")
        except Malformed as exc:
            log.warning("malformed mail %s (uid %d) skipped: %s", exc.mail_id, uid, exc.reason)
            return  # its position moves with the next message acked
        if mail.automatic or mail.sender_id == self.address:
            log.info("mail %s from %s is automatic or our own: not passed on", mail.msg_id, uid)
            return
        self.book.put(mail.msg_id, mail.context)
        store = self._store
        await inbox.send(
            Incoming(
                msg_id=mail.msg_id,
                sender_id=mail.sender_id,
                text=mail.text,
                peer_kind=mail.peer_kind,
                peer_id=mail.peer_id,
                thread_id=mail.thread_id,
                sender_name=mail.sender_name,
                meta=mail.meta,
                ts=mail.ts,
                on_ack=lambda: store(uidvalidity, uid),
            )
        )

    # -- out -------------------------------------------------------------------------

    async def delta(self, delta: Delta, target: Target) -> None:
        """Mail cannot be edited: only the final text is sent."""

    def _context(self, reply: Deliver) -> ReplyContext | None:
        for msg_id in reversed(reply.in_reply_to):
            context = self.book.get(msg_id)
            if context is not None:
                return context
        if reply.peer_kind == "dm" and reply.peer_id and "@" in reply.peer_id:
            # Its context is gone (an old reply): to the sender, on the thread's root.
            root = f"<{reply.thread_id}>" if reply.thread_id else ""
            return ReplyContext(root, reply.peer_id, "")
        return None

    async def deliver(self, reply: Deliver) -> None:
        """Send the reply; confirmed after the 250 for its DATA, or as undeliverable."""
        if reply.status == "aborted":
            log.info("reply %s was cut off (aborted): not sent", reply.out_id)
            return
        context = self._context(reply)
        if context is None:
            log.warning(
                "reply %s: no address known for %s; undeliverable", reply.out_id, reply.peer_id
            )
            return
        message = build_reply(
            context, self.cfg.address, self.cfg.name, reply.text, reply.out_id, datetime.now(UTC)
        )
        while True:
            error = await self._send_once(message, context.reply_to, reply.out_id)
            if error is None:
                self.smtp_retry.succeeded()
                return
            delay = self.smtp_retry.failed(anyio.current_time(), random.random())
            where = f"SMTP server {self.cfg.smtp_host}:{self.cfg.smtp_port}"
            if delay is None:
                self._smtp_error = f"{where}: {error}"
                self._smtp_gave_up.set()
                await anyio.sleep_forever()
                return  # the run loop ends the adapter: exit 75
            log.warning("%s: %s; reply %s retried in %.1fs", where, error, reply.out_id, delay)
            await anyio.sleep(delay)

    async def _send_once(self, message: Any, to: str, out_id: str) -> str | None:
        """None once the server answered 250 (or refused for good); else what went wrong."""
        try:
            with anyio.fail_after(self.cfg.send_timeout_s):
                client = await self._connected()
                try:
                    await client.send_message(message, sender=self.cfg.address, recipients=[to])
                except aiosmtplib.SMTPServerDisconnected:
                    # An idle connection the server closed: one fresh attempt at once.
                    self._smtp = None
                    client = await self._connected()
                    await client.send_message(message, sender=self.cfg.address, recipients=[to])
        except aiosmtplib.SMTPRecipientsRefused as exc:
            codes = [r.code for r in exc.recipients]
            if all(500 <= c < 600 for c in codes):
                log.error("reply %s to %s refused: %s; undeliverable", out_id, to, exc)
                return None
            return f"recipient refused for now: {exc}"
        except aiosmtplib.SMTPResponseException as exc:
            if 500 <= exc.code < 600 and not isinstance(exc, aiosmtplib.SMTPAuthenticationError):
                log.error(
                    "reply %s to %s refused: %d %s; undeliverable",
                    out_id,
                    to,
                    exc.code,
                    exc.message,
                )
                return None
            self._smtp = None
            return f"{exc.code} {exc.message}"
        except (aiosmtplib.SMTPException, OSError, TimeoutError) as exc:
            self._smtp = None
            return str(exc) or type(exc).__name__
        log.debug("reply %s to %s accepted (250)", out_id, to)
        return None

    async def _connected(self) -> aiosmtplib.SMTP:
        if self._smtp is not None and self._smtp.is_connected:
            return self._smtp
        client = aiosmtplib.SMTP(
            hostname=self.cfg.smtp_host,
            port=self.cfg.smtp_port,
            use_tls=self.cfg.smtp_tls == "tls",
            start_tls=self.cfg.smtp_tls == "starttls",
            timeout=self.cfg.command_timeout_s,
        )
        await client.connect()
        if self.cfg.smtp_auth:
            await client.login(self.cfg.username or self.cfg.address, self.password)
        self._smtp = client
        return client


def make_channel(raw: dict[str, Any], common: AdapterSection) -> MailChannel:
    cfg = section(raw, "mail", MailSection)
    password = read_secret("mail-password", cfg.password_file)
    assert password is not None  # required=True raises instead
    return MailChannel(cfg, common, password)


if __name__ == "__main__":
    sys.exit(main(None, "mail", make_channel))
