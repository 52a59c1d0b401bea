"""The library face through a running daemon: what `Store.connect` asks for, one
call at a time (the `store.call` op, broker/ops/store.py), answered on the daemon's
own ledger by the same jobs and reads as the in-process Store.

A call is a name and JSON arguments, checked here: a missing or mistyped argument
raises `Invalid` naming it, and nothing runs. Writes go through the daemon's one
writer (its group commit, its storage retries), reads to its reader threads, so a
daemon's sessions and a library's share one serial order per session. Answers are
JSON: sessions and turns as dicts of their fields, items as they were stored.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, Literal

import orjson

import ledger.api.reads as reads_
import ledger.api.writes as writes_
from ledger.api import adk_rows
from ledger.api.records import decode_item, encode_items, encode_metadata, row_of_text
from ledger.port.errors import Invalid
from ledger.port.records import LibraryCall
from ledger.sessions import export_snapshot, import_lines
from ledger.writer.jobs import JobSpec
from plumbing.ids import new_id


def _arg(args: dict[str, Any], name: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
    value = args.get(name, default)
    if value is ...:
        raise Invalid(f"{name} is required", field=name)
    if name in args and value is not None and not isinstance(value, kind):
        raise Invalid(f"{name} has the wrong type ({type(value).__name__})", field=name)
    if isinstance(value, str) and name == "session" and not value:
        raise Invalid("session must not be empty", field=name)
    return value


def _job(fn: Callable[..., Any], *args: Any) -> tuple[Literal["write"], JobSpec]:
    return "write", JobSpec(fn, args, {})


def _read(fn: Callable[..., Any], *args: Any) -> tuple[Literal["read"], Any]:
    return "read", lambda conn: fn(conn, *args)


def _usage(value: Any) -> tuple[int | None, int | None]:
    if value is None:
        return None, None
    if not (isinstance(value, list) and len(value) == 2):
        raise Invalid("usage is [prompt tokens, completion tokens]", field="usage")
    return value[0], value[1]


def _items(value: Any, field: str) -> list[tuple[str, str]]:
    if not isinstance(value, list):
        raise Invalid(f"{field} must be a list", field=field)
    return encode_items(value)


def plan(call: LibraryCall, args: dict[str, Any], now: int) -> tuple[str, Any]:  # noqa: C901
    """What to run for `call`: ("write", JobSpec) or ("read", fn(conn))."""
    s = functools.partial(_arg, args)
    if call == "create":
        label = s("session", str, None) or f"lib:{new_id()}"
        meta = encode_metadata(s("metadata", dict, None))
        return _job(writes_.create_session, label, s("title", str, None), meta, now)
    if call == "append":
        rows = _items(s("items", list), "items")
        usage = _usage(args.get("usage"))
        meta = encode_metadata(s("metadata", dict, None))
        return _job(
            writes_.append_turn, s("session", str), rows, now, s("create", bool, True), usage, meta
        )
    if call == "put":
        turns = [_items(t, "turns") for t in s("turns", list)]
        meta = encode_metadata(s("metadata", dict, None))
        return _job(writes_.put, s("session", str), turns, s("title", str, None), meta, now)
    if call == "set_title":
        meta = encode_metadata(s("metadata", dict, None))
        return _job(writes_.set_title, s("session", str), s("title", str, None), meta, now)
    if call == "delete":
        return _job(writes_.delete, s("session", str))
    if call == "pop":
        return _job(writes_.pop_item, s("session", str), now)
    if call == "clear":
        return _job(writes_.clear, s("session", str), now)
    if call == "end":
        return _job(writes_.end_session, s("session", str), s("summary", str, None), now)
    if call == "compact":
        rows = _items(s("summary", list), "summary")
        return _job(
            writes_.compact, s("session", str), s("head", str, None), rows, s("turns", int), now
        )
    if call == "import":
        lines = [ln for ln in s("lines", list) if isinstance(ln, str) and ln.strip()]
        return _job(import_lines, lines, s("new_id", str, None), now)
    if call == "get":
        return _read(reads_.get, s("session", str))
    if call == "list":
        filters = {
            "kind": s("kind", str, None),
            "title_contains": s("title_contains", str, None),
            "updated_after": s("updated_after", int, None),
            "cursor": s("cursor", str, None),
            "limit": s("limit", int, 100),
        }
        return "read", lambda c: reads_.list_sessions(c, **filters)
    if call == "last":
        return _read(reads_.last_items, s("session", str), s("n", int))
    if call == "items":
        return _read(reads_.items, s("session", str))
    if call == "turns":
        return _read(reads_.turns, s("session", str))
    if call == "thread":  # what a compaction summarizes: the head and its turns
        return _read(reads_.thread, s("session", str))
    if call == "export":
        return _read(export_snapshot, s("session", str), now)
    if call.startswith("adk."):
        return _plan_adk(call, s, now)
    raise Invalid(f"unknown library call {call!r}", field="call")


def _text_row(value: str) -> tuple[str, str]:
    try:
        return row_of_text(value)
    except ValueError:
        raise Invalid("event is not JSON text", field="event") from None


def _plan_adk(call: LibraryCall, s: Callable[..., Any], now: int) -> tuple[str, Any]:
    """Google ADK's calls (adk_rows.py; ledger/integrations/adk/ makes them)."""
    number = (int, float)
    if call == "adk.create":
        record = s("record", dict)
        for key in ("id", "state", "create_time", "update_time"):
            if key not in record:
                raise Invalid(f"record.{key} is required", field="record")
        return _job(
            adk_rows.create, s("session", str), record, s("app", str), s("user", str),
            s("app_delta", dict), s("user_delta", dict), s("ts", number), now,
        )  # fmt: skip
    if call == "adk.append":
        return _job(
            adk_rows.append, s("session", str), _text_row(s("event", str)),
            s("session_delta", dict), s("app", str), s("user", str), s("app_delta", dict),
            s("user_delta", dict), s("ts", number), now,
        )  # fmt: skip
    if call == "adk.get":
        return _read(
            adk_rows.session_view, s("app", str), s("user", str), s("session", str),
            s("recent", int, None), s("after", number, None),
        )  # fmt: skip
    if call == "adk.list":
        return _read(adk_rows.sessions_view, s("app", str), s("user", str, None))
    if call == "adk.user_state":
        return _read(adk_rows.shared_state, s("app", str), adk_rows.USER, s("user", str))
    raise Invalid(f"unknown library call {call!r}", field="call")


def answer(call: LibraryCall, value: Any) -> Any:
    """The JSON answer of a call's result."""
    if call == "pop":
        return {"found": value is not None, "item": None if value is None else decode_item(*value)}
    if call == "import":
        return {"session": value[0], "turns": value[1]}
    if call == "create":
        return {"created": value}
    if call == "adk.create":
        return {"app": value[0], "user": value[1]}
    if call in ("append", "compact"):
        return {"turn": value}
    if call == "list":
        return {
            "sessions": [dataclasses.asdict(x) for x in value.sessions],
            "next_cursor": value.next_cursor,
        }
    if call == "turns":
        return [dataclasses.asdict(t) for t in value]
    if call == "thread":
        return {"head": value[0], "turns": [dataclasses.asdict(t) for t in value[1]]}
    if call == "export":
        return [orjson.dumps(line).decode() for line in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return {} if value is None else value  # an op answering None sends no result
