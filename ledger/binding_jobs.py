"""Writer jobs that bind conversations to sessions: `route.bind`, `route.unbind`, and the
chat commands `/fork` and `/switch`.

Each is one transaction. For a chat command that is the fork (if any), the binding,
the command item marked done and its reply's outbox row: a crash leaves all of them
or none, so a command recovered at the next start runs once, never forks twice. A
refusal changes nothing but the command item and its reply; an op that is refused
raises (`NotFound`, `Conflict`) and writes nothing. A closed session is bound to by
neither (ledger/closing.py).
"""

from __future__ import annotations

import sqlite3

import orjson

from core import bindings as rules
from core.bindings import Conversation, Owner
from core.identity import Route, build_session_key, resolve_label
from ledger import bindings, sessions
from ledger.closing import refuse_closed
from ledger.erased import refuse_erased
from ledger.port.errors import Conflict, NotFound
from ledger.port.records import BindCommand
from ledger.turns import command_done

NOT_HEARD = "no message has come from this conversation yet, so its person is unknown"


def resolve(conn: sqlite3.Connection, name: str) -> str | None:
    """The label `name` (a label or an alias) leads to, following merges."""
    resolved = resolve_label(
        name,
        lambda s: bindings.session_ref(conn, s),
        lambda a: _alias(conn, a),
    )
    return resolved.label


def _alias(conn: sqlite3.Connection, alias: str) -> str | None:
    row = conn.execute(
        "SELECT session_label FROM session_aliases WHERE alias = ?", (alias,)
    ).fetchone()
    return None if row is None else str(row[0])


def conversation_owner(conn: sqlite3.Connection, conversation: Conversation) -> Owner | None:
    """Whose conversation this is: the owner of the session it talks to now (a bound
    one, or the one its route leads to with the default key), else of its DM contact."""
    current = bindings.bound_session(conn, conversation)
    if current is not None:
        return bindings.session_owner(conn, current)
    c = conversation
    if c.peer_kind == "dm":
        return bindings.contact_owner(conn, c.channel, c.peer_id)
    key = build_session_key(Route(c.channel, "group", c.peer_id, c.thread_id, "", ""))
    home = resolve(conn, key)
    return None if home is None else bindings.session_owner(conn, home)


def route_bind(conn: sqlite3.Connection, conversation: Conversation, name: str, now: int) -> str:
    """The operator's `route.bind`: the label the conversation now talks to."""
    target = resolve(conn, name)
    if target is None:
        raise NotFound(f"no session {name!r}", field="session")
    refuse_erased(conn, target, "session")
    owner = conversation_owner(conn, conversation)
    if owner is None:
        raise NotFound(NOT_HEARD, field="peer_id")
    refused = rules.refusal(owner, target, bindings.session_owner(conn, target))
    if refused is not None:
        raise Conflict(f"{refused} It belongs to another person.", field="session")
    refuse_closed(conn, target, "session")
    bindings.store(conn, conversation, target, "operator", now)
    return target


def route_unbind(conn: sqlite3.Connection, conversation: Conversation) -> str:
    """The operator's `route.unbind`: the label the conversation was bound to."""
    was = bindings.delete(conn, conversation)
    if was is None:
        raise NotFound("this conversation is not bound to a session", field="peer_id")
    return was


def chat_bind(conn: sqlite3.Connection, cmd: BindCommand, now: int) -> str:
    """Apply the command; the reply's frame as sent."""
    text, reason = _apply(conn, cmd, now)
    frame = orjson.loads(cmd.frame)
    frame["text"] = text
    frame_json = orjson.dumps(frame).decode()
    reply = (cmd.out_id, cmd.session, cmd.conversation.channel, frame_json)
    command_done(conn, cmd.item_id, reason, reply, False, now)
    return frame_json


def _apply(conn: sqlite3.Connection, cmd: BindCommand, now: int) -> tuple[str, str]:
    if cmd.verb == "fork":
        row = conn.execute(
            "SELECT head_turn_id FROM sessions WHERE label = ?", (cmd.session,)
        ).fetchone()
        if row is None or row[0] is None:
            return rules.NOTHING_TO_FORK, "command:refused"
        fork = sessions.fork(conn, str(row[0]), None, now)
        bindings.store(conn, cmd.conversation, fork, "fork", now)
        return rules.forked_reply(cmd.session, fork), "command:fork"
    if not cmd.target:
        return rules.SWITCH_USAGE, "command:invalid"
    target = resolve(conn, cmd.target)
    target_owner = None if target is None else bindings.session_owner(conn, target)
    refused = rules.refusal(bindings.session_owner(conn, cmd.session), cmd.target, target_owner)
    if refused is not None or target is None:
        return refused or rules.SWITCH_USAGE, "command:refused"
    try:
        refuse_closed(conn, target, "session")
    except Conflict as exc:
        return f"{exc}.", "command:refused"
    bindings.store(conn, cmd.conversation, target, "switch", now)
    return rules.switched_reply(target, cmd.session), "command:switch"
