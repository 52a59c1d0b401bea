"""Email ⇄ the broker's fields: one RFC 5322 message in, one reply out. Pure (no I/O).

The msg_id is the Message-ID without its angle brackets; a message without one (or
with one over the broker's 128 characters) gets `mail-` + a hash of its stable headers
(From, To, Cc, Date, Subject) and its body, so reading it again gives the same id and
the broker answers `duplicate`. A mailing-list message (List-Id) is a `group` whose
peer is the list id; any other is a `dm` whose peer is the sender's address. The
thread is the root of References (else In-Reply-To, else the message itself), so every
mail of a conversation shares one thread_id.

text/plain is preferred; text/html alone is converted to text; attachments become
metadata (adapters/attachments.py: name, type, size; url null, their bytes are not
kept). A message whose MIME structure cannot be read, or that has no sender address,
raises `Malformed`: the adapter logs it with its id and skips it. A reply is one
message from the bot, threaded on the message it answers (In-Reply-To, References,
`Re:` subject), marked `Auto-Submitted: auto-replied` (RFC 3834) so other robots do
not answer it, with a Message-ID made from the reply's out_id: a reply sent again
after a crash carries the same Message-ID.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass, field
from datetime import datetime
from email import errors, policy
from email.headerregistry import Address
from email.message import EmailMessage
from email.parser import BytesParser
from email.utils import format_datetime, getaddresses, parseaddr
from typing import Any

from bs4 import BeautifulSoup

from adapters.attachments import attachment

MAX_MSG_ID = 128  # the broker's limit on msg_id
MAX_THREAD_ID = 256  # and on thread_id / peer_id
MAX_TEXT_BYTES = 200 * 1024  # under the broker's max_text_bytes (256 KiB by default)
MAX_REFERENCES = 20  # a long thread's References keep the root and the latest
_BROKEN = (
    errors.NoBoundaryInMultipartDefect,
    errors.StartBoundaryNotFoundDefect,
    errors.MultipartInvariantViolationDefect,
    errors.MissingHeaderBodySeparatorDefect,
)
_ID = re.compile(r"<([^<>\s]+)>")
_PARSER = BytesParser(policy=policy.default)


class Malformed(ValueError):
    """A message the adapter cannot read; `mail_id` names it in the log."""

    def __init__(self, mail_id: str, reason: str) -> None:
        super().__init__(f"{mail_id}: {reason}")
        self.mail_id = mail_id
        self.reason = reason


@dataclass(frozen=True, slots=True)
class ReplyContext:
    """What a reply to one message needs: where to, and what it threads on."""

    message_id: str  # with its angle brackets
    reply_to: str  # an address
    subject: str
    references: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ReplyContext:
        return cls(
            str(data["message_id"]),
            str(data["reply_to"]),
            str(data["subject"]),
            tuple(str(r) for r in data.get("references") or ()),
        )


@dataclass(slots=True)
class Mail:
    """One inbound mail as the broker's fields, and what a reply to it needs."""

    msg_id: str
    sender_id: str
    sender_name: str | None
    text: str
    peer_kind: str
    peer_id: str
    thread_id: str
    context: ReplyContext
    meta: dict[str, Any] = field(default_factory=dict)
    ts: str | None = None
    automatic: bool = False  # an auto-reply or a bounce: never answered


def message_ids(value: str | None) -> list[str]:
    """The `<id>`s of a Message-ID, In-Reply-To or References header, in order."""
    return [f"<{m}>" for m in _ID.findall(value or "")]


def _short(value: str, limit: int, prefix: str) -> str:
    if len(value) <= limit:
        return value
    return prefix + hashlib.sha256(value.encode()).hexdigest()[:40]


def _bare(message_id: str) -> str:
    return message_id[1:-1] if message_id.startswith("<") else message_id


def parse(raw: bytes, bot_address: str, fallback_id: str) -> Mail:
    """`fallback_id` names the message in errors (its IMAP UID)."""
    try:
        msg = _PARSER.parsebytes(raw)
        own_ids = message_ids(str(msg.get("Message-ID", "")))
    except (errors.MessageError, ValueError, TypeError, IndexError) as exc:
        raise Malformed(fallback_id, f"unreadable headers: {exc!r}") from exc
    mail_id = own_ids[0] if own_ids else fallback_id
    broken = [d for part in msg.walk() for d in part.defects if isinstance(d, _BROKEN)]
    if broken:
        raise Malformed(mail_id, f"broken MIME structure: {type(broken[0]).__name__}")
    try:
        return _to_mail(msg, own_ids, bot_address, raw)
    except (errors.MessageError, ValueError, TypeError, LookupError, IndexError) as exc:
        raise Malformed(mail_id, f"unreadable: {exc!r}") from exc


def _to_mail(msg: EmailMessage, own_ids: list[str], bot: str, raw: bytes) -> Mail:
    name, sender = parseaddr(str(msg.get("From", "")))
    sender = sender.lower()
    if "@" not in sender:
        raise Malformed(own_ids[0] if own_ids else "?", "no sender address in From")
    if own_ids:
        message_id = own_ids[0]
        msg_id = _short(_bare(message_id), MAX_MSG_ID, "mail-")
    else:
        msg_id = "mail-" + _stable_hash(msg, raw)
        message_id = f"<{msg_id}@mail.invalid>"  # something to thread a reply on
    references = message_ids(str(msg.get("References", "")))
    parents = message_ids(str(msg.get("In-Reply-To", "")))
    root = references[0] if references else parents[0] if parents else message_id
    thread_id = _short(_bare(root), MAX_THREAD_ID, "mail-")
    recipients = [a.lower() for _, a in getaddresses(_all(msg, "To") + _all(msg, "Cc"))]
    list_id = _list_id(str(msg.get("List-Id", "")))
    text, attachments = _body(msg)
    meta: dict[str, Any] = {"subject": str(msg.get("Subject", ""))}
    if attachments:
        meta["attachments"] = attachments
    if len(text.encode()) > MAX_TEXT_BYTES:
        text = text.encode()[:MAX_TEXT_BYTES].decode(errors="ignore") + "\n[… truncated]"
        meta["truncated"] = True
    if list_id is not None:
        peer_kind, peer_id = "group", _short(list_id, MAX_THREAD_ID, "list-")
        meta["mentioned"] = bot.lower() in recipients
        reply_to = _list_post(str(msg.get("List-Post", ""))) or _reply_address(msg, sender)
    else:
        peer_kind, peer_id = "dm", sender
        reply_to = _reply_address(msg, sender)
    chain = [*references, *(p for p in parents if p not in references)]
    context = ReplyContext(message_id, reply_to, str(msg.get("Subject", "")), tuple(chain))
    return Mail(
        msg_id=msg_id,
        sender_id=sender,
        sender_name=name or None,
        text=text,
        peer_kind=peer_kind,
        peer_id=peer_id,
        thread_id=thread_id,
        context=context,
        meta=meta,
        ts=_timestamp(msg),
        automatic=_automatic(msg),
    )


def _all(msg: EmailMessage, name: str) -> list[str]:
    return [str(v) for v in msg.get_all(name) or ()]


def _stable_hash(msg: EmailMessage, raw: bytes) -> str:
    digest = hashlib.sha256()
    for name in ("From", "To", "Cc", "Date", "Subject"):
        digest.update(f"{name}:{msg.get(name, '')}\n".encode())
    body = re.split(rb"\r?\n\r?\n", raw, maxsplit=1)
    digest.update(body[1] if len(body) > 1 else b"")
    return digest.hexdigest()[:40]


def _list_id(value: str) -> str | None:
    ids = _ID.findall(value)
    if ids:
        return str(ids[0]).lower()
    value = value.strip()
    return value.lower() or None


def _list_post(value: str) -> str | None:
    for target in _ID.findall(value):
        if target.lower().startswith("mailto:"):
            return str(target[7:].split("?")[0])
    return None


def _reply_address(msg: EmailMessage, sender: str) -> str:
    _, reply_to = parseaddr(str(msg.get("Reply-To", "")))
    return reply_to if "@" in reply_to else sender


def _automatic(msg: EmailMessage) -> bool:
    auto = str(msg.get("Auto-Submitted", "no")).strip().lower()
    return auto != "no" or str(msg.get("Return-Path", "")).strip() == "<>"


def _timestamp(msg: EmailMessage) -> str | None:
    date = msg.get("Date")
    stamp = getattr(date, "datetime", None)
    if not isinstance(stamp, datetime) or stamp.tzinfo is None:
        return None
    return stamp.isoformat()


def _body(msg: EmailMessage) -> tuple[str, list[dict[str, Any]]]:
    """The text, and the attachments as metadata."""
    body = msg.get_body(preferencelist=("plain", "html"))
    attachments: list[dict[str, Any]] = []
    for part in msg.walk():
        if part.is_multipart() or part is body:
            continue
        if part.is_attachment() or part.get_content_maintype() != "text":
            payload = part.get_payload(decode=True)
            size = len(payload) if isinstance(payload, bytes) else None
            attachments.append(attachment(part.get_filename(), part.get_content_type(), size, None))
    if body is None:
        return "", attachments
    content = _text_of(body)
    if body.get_content_subtype() == "html":
        content = html_to_text(content)
    return content.strip(), attachments


def _text_of(part: Any) -> str:
    """The part's text with plain newlines (a message read over IMAP has CRLFs)."""
    try:
        text = str(part.get_content())
    except (LookupError, UnicodeError):  # an unknown or lying charset
        payload = part.get_payload(decode=True) or b""
        text = bytes(payload).decode("utf-8", errors="replace")
    return text.replace("\r\n", "\n")


def html_to_text(html: str) -> str:
    soup = BeautifulSoup(html, "html.parser")
    for hidden in soup(["script", "style", "head"]):
        hidden.decompose()
    lines = (line.strip() for line in soup.get_text("\n").splitlines())
    return "\n".join(line for line in lines if line)


def reply_subject(subject: str) -> str:
    subject = subject.strip()
    if re.match(r"(?i)re\s*:", subject):
        return subject
    return f"Re: {subject}" if subject else "Re: your message"


def build_reply(
    context: ReplyContext, bot: str, bot_name: str | None, text: str, out_id: str, now: datetime
) -> EmailMessage:
    """The reply, threaded on its message, auto-replied, its Message-ID from out_id."""
    reply = EmailMessage(policy=policy.default)  # the SMTP client writes CRLF
    reply["From"] = Address(display_name=bot_name or "", addr_spec=bot)
    reply["To"] = context.reply_to
    reply["Subject"] = reply_subject(context.subject)
    reply["Date"] = format_datetime(now)
    reply["Message-ID"] = f"<{out_id}@{bot.rpartition('@')[2]}>"
    chain = [*context.references, context.message_id] if context.message_id else []
    if len(chain) > MAX_REFERENCES:
        chain = [chain[0], *chain[-(MAX_REFERENCES - 1) :]]
    if chain:
        reply["In-Reply-To"] = context.message_id
        reply["References"] = " ".join(chain)
    reply["Auto-Submitted"] = "auto-replied"
    reply.set_content(text)
    return reply
