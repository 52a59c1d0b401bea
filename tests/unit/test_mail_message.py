"""adapters.mail_message: email ⇄ the broker's fields, without a server."""

from __future__ import annotations

from datetime import UTC, datetime
from email.message import EmailMessage
from pathlib import Path

import pytest

from adapters.mail import MailChannel, MailSection
from adapters.mail_book import ReplyBook
from adapters.mail_message import (
    MAX_MSG_ID,
    Malformed,
    ReplyContext,
    build_reply,
    parse,
    reply_subject,
)
from adapters.position import PositionStore
from adapters.settings import AdapterSection

BOT = "bot@example.test"


def mail(text: str = "hi", **headers: str) -> EmailMessage:
    msg = EmailMessage()
    msg["From"] = headers.pop("From", "Ann <Ann@Example.test>")
    msg["To"] = headers.pop("To", BOT)
    msg["Subject"] = headers.pop("Subject", "q")
    for name, value in headers.items():
        msg[name.replace("_", "-")] = value
    msg.set_content(text)
    return msg


def test_a_direct_mail_is_a_dm_from_the_sender_in_its_own_thread() -> None:
    got = parse(mail(Message_ID="<a1@x>").as_bytes(), BOT, "uid 1")
    assert (got.msg_id, got.peer_kind, got.peer_id, got.thread_id) == (
        "a1@x",
        "dm",
        "ann@example.test",
        "a1@x",
    )
    assert (got.sender_id, got.sender_name, got.text) == ("ann@example.test", "Ann", "hi")
    assert got.context == ReplyContext("<a1@x>", "ann@example.test", "q", ())


def test_the_thread_is_the_root_of_references_else_in_reply_to() -> None:
    refs = parse(
        mail(Message_ID="<c@x>", References="<a@x> <b@x>", In_Reply_To="<b@x>").as_bytes(), BOT, "u"
    )
    assert refs.thread_id == "a@x" and refs.context.references == ("<a@x>", "<b@x>")
    parent = parse(mail(Message_ID="<c@x>", In_Reply_To="<b@x>").as_bytes(), BOT, "u")
    assert parent.thread_id == "b@x"


def test_a_list_mail_is_a_group_of_the_list_answered_to_its_post_address() -> None:
    raw = mail(
        Message_ID="<l@x>",
        To="help@lists.test",
        Cc=f"Bot <{BOT.upper()}>",
        List_Id="Help <help.lists.test>",
        List_Post="<mailto:help@lists.test>",
    ).as_bytes()
    got = parse(raw, BOT, "u")
    assert (got.peer_kind, got.peer_id, got.meta["mentioned"]) == ("group", "help.lists.test", True)
    assert got.context.reply_to == "help@lists.test"
    unnamed = parse(
        mail(Message_ID="<m@x>", To="help@lists.test", List_Id="<h.l>").as_bytes(), BOT, "u"
    )
    assert unnamed.meta["mentioned"] is False and unnamed.context.reply_to == "ann@example.test"


def test_a_mail_without_message_id_gets_a_stable_hash() -> None:
    raw = mail(Date="Tue, 24 Nov 2026 09:00:00 +0000").as_bytes()
    first, again = parse(raw, BOT, "u1"), parse(raw, BOT, "u2")
    assert first.msg_id == again.msg_id and first.msg_id.startswith("mail-")
    other = parse(mail("other", Date="Tue, 24 Nov 2026 09:00:00 +0000").as_bytes(), BOT, "u")
    assert other.msg_id != first.msg_id


def test_a_message_id_over_the_brokers_limit_is_hashed() -> None:
    long_id = f"<{'x' * 200}@x>"
    got = parse(mail(Message_ID=long_id).as_bytes(), BOT, "u")
    assert len(got.msg_id) <= MAX_MSG_ID and got.msg_id.startswith("mail-")
    assert got.context.message_id == long_id


def test_plain_text_is_preferred_and_html_alone_becomes_text() -> None:
    both = mail("plain words", Message_ID="<p@x>")
    both.add_alternative("<p>html words</p>", subtype="html")
    assert parse(both.as_bytes(), BOT, "u").text == "plain words"
    html = EmailMessage()
    html["From"], html["Message-ID"] = "a@x", "<h@x>"
    html.set_content(
        "<html><style>p{}</style><p>One</p><p>Two &amp; three</p></html>", subtype="html"
    )
    assert parse(html.as_bytes(), BOT, "u").text == "One\nTwo & three"


def test_attachments_are_metadata_and_the_text_is_kept() -> None:
    msg = mail("see attached", Message_ID="<att@x>")
    msg.add_attachment(b"12345", maintype="image", subtype="png", filename="a.png")
    got = parse(msg.as_bytes(), BOT, "u")
    assert got.text == "see attached"
    assert got.meta["attachments"] == [
        {"name": "a.png", "type": "image/png", "size": 5, "url": None}
    ]


def test_crlf_text_has_plain_newlines() -> None:
    raw = b"From: a@x\r\nMessage-ID: <n@x>\r\n\r\none\r\ntwo\r\n"
    assert parse(raw, BOT, "u").text == "one\ntwo"


@pytest.mark.parametrize(
    "raw",
    [
        b"From: a@x\r\nMessage-ID: <b@x>\r\n"
        b'Content-Type: multipart/mixed; boundary="z"\r\n\r\nnone\r\n',
        b"From: a@x\r\nMessage-ID: <b@x>\r\nContent-Type: multipart/mixed\r\n\r\nno boundary\r\n",
        b"To: b@x\r\nMessage-ID: <b@x>\r\n\r\nno sender\r\n",
    ],
)
def test_broken_mime_or_no_sender_is_malformed_and_named(raw: bytes) -> None:
    with pytest.raises(Malformed) as caught:
        parse(raw, BOT, "uid 7")
    assert caught.value.mail_id == "<b@x>"


def test_auto_replies_and_bounces_are_marked_automatic() -> None:
    assert parse(
        mail(Message_ID="<a@x>", Auto_Submitted="auto-replied").as_bytes(), BOT, "u"
    ).automatic
    assert parse(mail(Message_ID="<a@x>", Return_Path="<>").as_bytes(), BOT, "u").automatic
    assert not parse(mail(Message_ID="<a@x>", Auto_Submitted="no").as_bytes(), BOT, "u").automatic


def test_a_reply_is_threaded_on_its_message_with_a_stable_id() -> None:
    context = ReplyContext("<c@x>", "ann@x", "q", ("<a@x>", "<b@x>"))
    now = datetime(2026, 11, 24, tzinfo=UTC)
    reply = build_reply(context, BOT, "Agent", "answer", "01OUT", now)
    assert str(reply["To"]) == "ann@x" and str(reply["From"]) == f"Agent <{BOT}>"
    assert str(reply["In-Reply-To"]) == "<c@x>"
    assert str(reply["References"]) == "<a@x> <b@x> <c@x>"
    assert str(reply["Message-ID"]) == "<01OUT@example.test>"
    assert str(reply["Auto-Submitted"]) == "auto-replied"
    assert reply.get_content().strip() == "answer"


def test_a_long_thread_keeps_its_root_and_latest_references() -> None:
    context = ReplyContext("<z@x>", "ann@x", "q", tuple(f"<{n}@x>" for n in range(50)))
    refs = str(build_reply(context, BOT, None, "t", "o", datetime.now(UTC))["References"]).split()
    assert len(refs) == 20 and refs[0] == "<0@x>" and refs[-1] == "<z@x>"


def test_reply_subjects_get_one_re() -> None:
    assert reply_subject("q") == "Re: q"
    assert reply_subject("RE: q") == "RE: q"
    assert reply_subject("") == "Re: your message"


def test_the_reply_book_survives_a_reopen_and_keeps_the_newest(tmp_path: Path) -> None:
    path = tmp_path / "replies.jsonl"
    book = ReplyBook(path, keep=2)
    for n in range(3):
        book.put(f"m{n}", ReplyContext(f"<m{n}@x>", "a@x", "s"))
    book.close()
    with path.open("ab") as journal:
        journal.write(b'{"msg_id": "cut sh')  # a crash mid-line
    reopened = ReplyBook(path, keep=2)
    assert reopened.get("m0") is None
    assert reopened.get("m2") == ReplyContext("<m2@x>", "a@x", "s")
    reopened.close()


def make_channel(state: Path) -> MailChannel:
    cfg = MailSection(address=BOT, imap_host="127.0.0.1", smtp_host="127.0.0.1")
    channel = MailChannel(cfg, AdapterSection(state_dir=state), "secret")
    channel.book.close()  # only its positions are used here
    return channel


def test_the_first_start_reads_from_uidnext_and_stores_it_at_once(tmp_path: Path) -> None:
    channel = make_channel(tmp_path)
    assert channel._start_uid(uidvalidity=7, uidnext=42) == 41
    stored = PositionStore(tmp_path / "positions.json").get("imap")
    assert stored == {"uidvalidity": 7, "uid": 41}
    assert make_channel(tmp_path)._start_uid(uidvalidity=7, uidnext=50) == 41


def test_a_changed_uidvalidity_reads_the_whole_mailbox_again(tmp_path: Path) -> None:
    make_channel(tmp_path)._start_uid(uidvalidity=7, uidnext=42)
    assert make_channel(tmp_path)._start_uid(uidvalidity=8, uidnext=3) == 0
