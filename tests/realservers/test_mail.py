"""adapters.mail against a real Postfix + Dovecot on loopback, with the real broker (echo engine).

Ann sends with a real SMTP client (smtplib) and reads her mailbox with a real
IMAP client (imaplib); the echo engine's reply must arrive in her mailbox,
threaded on her message.
"""

from __future__ import annotations

import imaplib
import os
import signal
import smtplib
import time
from collections.abc import Iterator
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from email.utils import make_msgid
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from adapters.mail_imap import ImapSession
from tests.conftest import DaemonFactory
from tests.integration.wire import query, uniq, wait_db
from tests.realservers.mailservers import BUSY, DOMAIN, MailServer, start_mail
from tests.realservers.processes import START_WITHIN_S, AdapterProcess, expect_login_refused
from tests.realservers.servers import free_port

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]

CHANNEL = "mail"
BOT = f"bot@{DOMAIN}"
ANN = f"ann@{DOMAIN}"
LIST = f"help@{DOMAIN}"  # the list's posting address: a mailbox the test reads
ACCOUNTS = {"bot": "bot-secret", "ann": "ann-secret", "help": "help-secret"}
INBOUND = "SELECT msg_id, peer_kind, peer_id, thread_id, sender_id, sender_name, meta FROM inbound"


@pytest.fixture(scope="module")
def mailserver() -> Iterator[MailServer]:
    with start_mail(ACCOUNTS) as server:
        yield server


def mail_config(socket: Path, server: MailServer, workdir: Path, **mail: Any) -> dict[str, Any]:
    secret = workdir / "mail-password"
    secret.write_text(server.accounts[BOT] + "\n")
    return {
        "broker": {"socket": str(socket), "channel": CHANNEL},
        "adapter": {
            "give_up_s": 30,
            "retry_initial_s": 0.05,
            "retry_max_s": 0.5,
            "log_level": "DEBUG",
        },
        "mail": {
            "address": BOT,
            "name": "Agent",
            "password_file": str(secret),
            "imap_host": server.host,
            "imap_port": server.imap_port,
            "imap_tls": False,
            "smtp_host": server.host,
            "smtp_port": server.smtp_port,
            "smtp_tls": "none",
            "smtp_auth": False,
            **mail,
        },
    }


def start_adapter(
    started: list[AdapterProcess], workdir: Path, config: dict[str, Any]
) -> AdapterProcess:
    proc = AdapterProcess("mail", workdir, config).start()
    started.append(proc)
    proc.wait_connected()
    return proc


def send(server: MailServer, text: str, **headers: str) -> str:
    """Ann sends a plain mail to the bot; its Message-ID."""
    msg = EmailMessage()
    msg["From"] = f"Ann Example <{ANN}>"
    msg["To"] = headers.pop("To", BOT)
    msg["Subject"] = headers.pop("Subject", "a question")
    msg["Message-ID"] = headers.pop("Message_ID", make_msgid(domain=DOMAIN))
    for name, value in headers.items():
        msg[name.replace("_", "-")] = value
    msg.set_content(text)
    send_raw(server, msg.as_bytes(), [BOT])
    return str(msg["Message-ID"])


def send_raw(server: MailServer, raw: bytes, to: list[str]) -> None:
    with smtplib.SMTP(server.host, server.smtp_port, timeout=10) as client:
        client.sendmail(ANN, to, raw)


class Mailbox:
    """A person's INBOX read over IMAP."""

    def __init__(self, server: MailServer, address: str) -> None:
        self.server = server
        self.address = address

    def messages(self) -> list[EmailMessage]:
        client = imaplib.IMAP4(self.server.host, self.server.imap_port, timeout=10)
        try:
            client.login(self.address, self.server.accounts[self.address])
            client.select("INBOX", readonly=True)
            _, data = client.uid("FETCH", "1:*", "(BODY.PEEK[])")
        finally:
            client.logout()
        parser = BytesParser(policy=policy.default)
        return [parser.parsebytes(item[1]) for item in data if isinstance(item, tuple)]

    def replies_to(self, message_id: str) -> list[EmailMessage]:
        return [m for m in self.messages() if m["In-Reply-To"] == message_id]

    def wait_reply(self, message_id: str, within: float = 15.0) -> EmailMessage:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            found = self.replies_to(message_id)
            if found:
                return found[0]
            time.sleep(0.05)
        seen = [(str(m["Subject"]), str(m["In-Reply-To"])) for m in self.messages()]
        raise AssertionError(f"no reply to {message_id} in {self.address} within {within}s: {seen}")


async def wait_reply(box: Mailbox, message_id: str) -> EmailMessage:
    return await anyio.to_thread.run_sync(box.wait_reply, message_id)


def body(msg: EmailMessage) -> str:
    part = msg.get_body(("plain",))
    assert part is not None
    return str(part.get_content()).replace("\r\n", "\n").strip()


async def test_a_mail_is_answered_by_mail_threaded_on_it(
    mailserver: MailServer,
    make_daemon: DaemonFactory,
    adapters: list[AdapterProcess],
    short_tmp: Path,
) -> None:
    d = make_daemon()
    start_adapter(adapters, short_tmp, mail_config(d.socket, mailserver, short_tmp))
    ann = Mailbox(mailserver, ANN)
    text = uniq("hello bot ")
    first = send(mailserver, text, Subject="a question")
    reply = await wait_reply(ann, first)
    assert body(reply) == text
    assert str(reply["Subject"]) == "Re: a question"
    assert str(reply["References"]) == first
    assert str(reply["From"]) == f"Agent <{BOT}>" and str(reply["To"]) == ANN
    assert str(reply["Auto-Submitted"]) == "auto-replied"

    # Ann answers the reply: the same thread, the whole chain in References.
    second = send(
        mailserver,
        "and a follow-up",
        Subject="Re: a question",
        In_Reply_To=str(reply["Message-ID"]),
        References=f"{first} {reply['Message-ID']}",
    )
    again = await wait_reply(ann, second)
    assert str(again["References"]).split() == [first, str(reply["Message-ID"]), second]
    rows = query(d, INBOUND)
    assert [r[:6] for r in rows] == [
        (first[1:-1], "dm", ANN, first[1:-1], ANN, "Ann Example"),
        (second[1:-1], "dm", ANN, first[1:-1], ANN, "Ann Example"),
    ]
    assert orjson.loads(rows[0][6])["subject"] == "a question"
    await wait_db(d, "SELECT count(*) FROM outbox WHERE status = 'delivered'", (), 2)


async def test_a_list_mail_is_a_group_message_answered_to_the_list(
    mailserver: MailServer,
    make_daemon: DaemonFactory,
    adapters: list[AdapterProcess],
    short_tmp: Path,
) -> None:
    d = make_daemon()
    start_adapter(adapters, short_tmp, mail_config(d.socket, mailserver, short_tmp))
    root = make_msgid(domain=DOMAIN)
    text = uniq("list question ")
    sent = send(
        mailserver,
        text,
        To=LIST,
        Cc=BOT,
        Subject="[help] printing",
        List_Id="Help list <help.example.test>",
        List_Post=f"<mailto:{LIST}>",
        In_Reply_To=root,
        References=root,
    )
    reply = await wait_reply(Mailbox(mailserver, LIST), sent)
    assert body(reply) == text and str(reply["Subject"]) == "Re: [help] printing"
    assert str(reply["References"]).split() == [root, sent]
    [row] = query(d, INBOUND)
    assert row[1:5] == ("group", "help.example.test", root[1:-1], ANN)
    meta = orjson.loads(row[6])
    assert meta["mentioned"] is True


async def test_html_mail_and_attachments_are_text_and_metadata(
    mailserver: MailServer,
    make_daemon: DaemonFactory,
    adapters: list[AdapterProcess],
    short_tmp: Path,
) -> None:
    d = make_daemon()
    start_adapter(adapters, short_tmp, mail_config(d.socket, mailserver, short_tmp))
    msg = EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = ANN, BOT, "a report"
    msg["Message-ID"] = make_msgid(domain=DOMAIN)
    msg.set_content("<html><body><p>See the <b>report</b>.</p></body></html>", subtype="html")
    msg.add_attachment(b"%PDF-1.4 fake", maintype="application", subtype="pdf", filename="r.pdf")
    send_raw(mailserver, msg.as_bytes(), [BOT])
    reply = await wait_reply(Mailbox(mailserver, ANN), str(msg["Message-ID"]))
    assert body(reply) == "See the\nreport\n."
    [row] = query(d, INBOUND)
    attachments = orjson.loads(row[6])["attachments"]
    assert attachments == [{"name": "r.pdf", "type": "application/pdf", "size": 13, "url": None}]


async def test_malformed_mime_is_logged_and_skipped(
    mailserver: MailServer,
    make_daemon: DaemonFactory,
    adapters: list[AdapterProcess],
    short_tmp: Path,
) -> None:
    d = make_daemon()
    proc = start_adapter(adapters, short_tmp, mail_config(d.socket, mailserver, short_tmp))
    broken = make_msgid(domain=DOMAIN)
    raw = (
        f"From: {ANN}\r\nTo: {BOT}\r\nSubject: broken\r\nMessage-ID: {broken}\r\n"
        'MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary="nowhere"\r\n\r\n'
        "no boundary ever comes\r\n"
    ).encode()
    send_raw(mailserver, raw, [BOT])
    sentinel = send(mailserver, "after the broken one")
    await wait_reply(Mailbox(mailserver, ANN), sentinel)
    # Postfix may deliver the sentinel first: the broken mail is read after it then.
    await anyio.to_thread.run_sync(proc.wait_log, f"malformed mail {broken}")
    assert [r[0] for r in query(d, INBOUND)] == [sentinel[1:-1]]
    assert proc.proc is not None and proc.proc.poll() is None


@pytest.mark.slow
async def test_adapter_killed_before_the_ack_reads_the_mail_again_once(
    mailserver: MailServer,
    make_daemon: DaemonFactory,
    adapters: list[AdapterProcess],
    short_tmp: Path,
) -> None:
    d = make_daemon()
    cfg = mail_config(d.socket, mailserver, short_tmp)
    first = start_adapter(adapters, short_tmp, cfg)
    assert d.proc is not None
    os.kill(d.proc.pid, signal.SIGSTOP)  # the broker cannot ack now
    try:
        message_id = send(mailserver, uniq("only once "))
        await anyio.to_thread.run_sync(first.wait_log, "to the broker")
        first.kill()
    finally:
        os.kill(d.proc.pid, signal.SIGCONT)
    start_adapter(adapters, short_tmp, cfg)
    ann = Mailbox(mailserver, ANN)
    await wait_reply(ann, message_id)
    sentinel = send(mailserver, "sentinel")
    await wait_reply(ann, sentinel)
    assert len(ann.replies_to(message_id)) == 1 and len(ann.replies_to(sentinel)) == 1
    assert len(query(d, "SELECT 1 FROM inbound WHERE channel = ?", CHANNEL)) == 2
    assert query(d, "SELECT count(*) FROM turns") == [(2,)]


@pytest.mark.slow
async def test_a_broker_restart_loses_nothing_and_repeats_nothing(
    mailserver: MailServer,
    make_daemon: DaemonFactory,
    adapters: list[AdapterProcess],
    short_tmp: Path,
) -> None:
    d = make_daemon()
    start_adapter(adapters, short_tmp, mail_config(d.socket, mailserver, short_tmp))
    ann = Mailbox(mailserver, ANN)
    before = send(mailserver, "before")
    await wait_reply(ann, before)
    await anyio.to_thread.run_sync(d.kill)
    during = send(mailserver, "while down")
    await anyio.sleep(0.2)
    await anyio.to_thread.run_sync(d.start)
    await wait_reply(ann, during)
    after = send(mailserver, "after")
    await wait_reply(ann, after)
    for message_id in (before, during, after):
        assert len(ann.replies_to(message_id)) == 1
    assert len(query(d, "SELECT 1 FROM inbound WHERE channel = ?", CHANNEL)) == 3


async def test_a_refused_login_is_logged_and_ends_with_exit_75(
    mailserver: MailServer, adapters: list[AdapterProcess], short_tmp: Path
) -> None:
    cfg = mail_config(short_tmp / "no-broker.sock", mailserver, short_tmp)
    await expect_login_refused("mail", short_tmp, cfg, adapters)


async def test_smtp_5xx_is_undeliverable_and_4xx_is_retried_unconfirmed(
    mailserver: MailServer,
    make_daemon: DaemonFactory,
    adapters: list[AdapterProcess],
    short_tmp: Path,
) -> None:
    d = make_daemon()
    proc = start_adapter(adapters, short_tmp, mail_config(d.socket, mailserver, short_tmp))
    unknown = send(mailserver, "answer nobody", Reply_To=f"nobody@{DOMAIN}")
    await wait_db(d, "SELECT count(*) FROM outbox WHERE status = 'delivered'", (), 1)
    assert f"to nobody@{DOMAIN} refused" in proc.log() and "undeliverable" in proc.log()
    assert unknown[1:-1] in [r[0] for r in query(d, INBOUND)]

    send(mailserver, "answer busy", Reply_To=BUSY)
    await anyio.to_thread.run_sync(lambda: proc.wait_log("retried in", within=10))
    assert query(d, "SELECT count(*) FROM outbox WHERE status = 'delivered'") == [(1,)]


async def test_an_smtp_server_that_stays_down_ends_with_exit_75(
    mailserver: MailServer,
    make_daemon: DaemonFactory,
    adapters: list[AdapterProcess],
    short_tmp: Path,
) -> None:
    d = make_daemon()
    cfg = mail_config(d.socket, mailserver, short_tmp, smtp_port=free_port())
    cfg["adapter"]["give_up_s"] = 1.0
    proc = start_adapter(adapters, short_tmp, cfg)
    send(mailserver, "no way out")
    assert await anyio.to_thread.run_sync(proc.wait_exit, START_WITHIN_S) == 75
    assert "SMTP server" in proc.log() and "giving up" in proc.log()


async def test_a_burst_of_mail_is_read_in_one_fetch_by_uid(mailserver: MailServer) -> None:
    session = ImapSession(mailserver.host, mailserver.imap_port, False, 10)
    try:
        box = await session.open(ANN, mailserver.accounts[ANN], "INBOX")
        texts = [uniq("burst ") for _ in range(3)]
        for text in texts:
            msg = EmailMessage()
            msg["From"], msg["To"], msg["Subject"] = BOT, ANN, text
            msg.set_content(text)
            send_raw(mailserver, msg.as_bytes(), [ANN])
        uids: list[int] = []
        with anyio.fail_after(15):
            while len(uids) < len(texts):
                uids += await session.wait_new(uids[-1] if uids else box.uidnext - 1, 1.0)
        gone = uids[-1] + 1000  # a UID the mailbox does not hold: missing, not an error
        mails = await session.fetch_many([*uids, gone])
        alone = {uid: await session.fetch(uid) for uid in uids}
    finally:
        await session.close()
    assert sorted(mails) == uids
    # Which mail a UID holds is what a fetch of that UID alone says: Postfix
    # delivers a burst in parallel, so not always in the order it was sent.
    assert mails == alone
    parser = BytesParser(policy=policy.default)
    subjects = [str(parser.parsebytes(mails[uid])["Subject"]) for uid in uids]
    assert sorted(s for s in subjects if s in texts) == sorted(texts)
