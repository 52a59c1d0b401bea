"""A reader's view of the ledger while an erasure runs: the person already gone.

An erasure is marked in one short transaction and its rows go in steps after it
(ledger/erasure.py). A reader connection sees every table that can hold a person's
data through a temporary view of the same name, which shadows the table for that
connection's unqualified names (SQLite looks in `temp` first, PostgreSQL in
`pg_temp`): so every read, the ops', the tools', the library's and the console's,
already written or still to come, is filtered the same way without knowing it.

From the mark until the erasure is finished, the views leave out the rows of the
sessions it covers (their turns, messages, items, events, files, timers and the
rest) and of the entities it covers, and show the person's words in the other
sessions (groups) as the erasure will leave them: their messages and inbound text
`[erased]`, the titles of the turns that held them gone, and the broker's `intent`
events of those turns (which quote every input) without their inputs. A group session's own
title, slug and closing summary, and the state records of non-DM sessions, may
quote a message too, and nothing indexed says which: while an erasure runs they
are left out for every such session, and come back once it is done (those that
quoted the person are then gone from the tables too).

Outside an erasure the views pass every row unchanged: each condition first asks
whether an erasure is running, a question asked once a statement. The writer's
connection never has them: the steps work on the tables themselves.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

ERASED = "[erased]"
ERASED_INTENT = '{"by": "broker", "inputs": []}'  # an intent that quoted the person
# A found message `m` that is not one of a running erasure's (a search would find
# it by its stored words, which the view shows as ERASED). A placeholder left by a
# finished erasure is found as any word is.
NOT_THEIRS = (
    f"NOT (m.content = '{ERASED}' AND EXISTS (SELECT 1 FROM erasures WHERE finished_at IS NULL))"
)


@dataclass(frozen=True, slots=True)
class Dialect:
    """The few phrases the views spell differently on each backend."""

    schema: str  # where the tables are
    temp: str  # how a temporary view that replaces any earlier one is created
    sessions: str  # the running erasure's sessions, one a row
    entities: str  # its entities, one a row
    senders: str  # its senders as `channel || SEP || sender_id`, one a row
    sep: str


def sqlite_dialect() -> Dialect:
    running = "FROM main.erasures e, json_each(e.{0}) j WHERE e.finished_at IS NULL"
    return Dialect(
        schema="main",
        temp="CREATE TEMP VIEW",
        sessions="SELECT j.value " + running.format("sessions"),
        entities="SELECT j.value " + running.format("entities"),
        senders="SELECT json_extract(j.value, '$[0]') || char(31) || json_extract(j.value, '$[1]') "
        + running.format("senders"),
        sep="char(31)",
    )


def pg_dialect(schema: str) -> Dialect:
    def each(column: str, fn: str) -> str:
        return f"FROM {schema}.erasures e, {fn}(e.{column}::jsonb) j WHERE e.finished_at IS NULL"

    return Dialect(
        schema=schema,
        temp="CREATE OR REPLACE TEMP VIEW",
        sessions="SELECT j " + each("sessions", "jsonb_array_elements_text"),
        entities="SELECT j " + each("entities", "jsonb_array_elements_text"),
        senders="SELECT (j ->> 0) || chr(31) || (j ->> 1) "
        + each("senders", "jsonb_array_elements"),
        sep="chr(31)",
    )


# Tables that name their session in other columns than `session_label`.
_BY_SESSION = {
    "dispatches": ("parent_session", "target_session"),
    "bridge_notes": ("session_label", "merged_session"),
    "sessions": (),  # by its status, in `views`
}
# Tables with nothing of a person, or that an erasure's mark already rewrote.
_UNTOUCHED = frozenset({"erasures", "audit", "blobs", "adk_shared_state", "schema_version"})


class _Phrases:
    """The conditions of the views, on one backend."""

    def __init__(self, d: Dialect) -> None:
        self.d = d
        self.running = f"EXISTS (SELECT 1 FROM {d.schema}.erasures WHERE finished_at IS NULL)"
        self.erased_session = f"IN ({d.sessions})"

    def said_by_them(self, alias: str) -> str:
        d = self.d
        return f"{alias}.channel || {d.sep} || {alias}.sender_id IN ({d.senders})"

    def holds_theirs(self, turn: str) -> str:
        """Whether the turn `turn` names holds a message of theirs."""
        return (
            f"EXISTS (SELECT 1 FROM {self.d.schema}.messages m"
            f" WHERE m.turn_id = {turn} AND {self.said_by_them('m')})"
        )

    def hidden(self, table: str, columns: list[str]) -> list[str]:
        """When a row of `table` is one of the person's, while their erasure runs."""
        d, out = self.d, []
        default = ("session_label",) if "session_label" in columns else ()
        out += [f"x.{col} {self.erased_session}" for col in _BY_SESSION.get(table, default)]
        if "turn_id" in columns and "session_label" not in columns:
            out.append(
                f"EXISTS (SELECT 1 FROM {d.schema}.turns et WHERE et.id = x.turn_id"
                f" AND et.session_label {self.erased_session})"
            )
        if table == "timer_firings":
            out.append(
                f"x.timer_id IN (SELECT id FROM {d.schema}.timers"
                f" WHERE session_label {self.erased_session})"
            )
        if table == "entities":
            out.append(f"x.id IN ({d.entities})")
        if table == "turn_state":  # a record may quote a group's message
            out.append(
                f"EXISTS (SELECT 1 FROM {d.schema}.turns st JOIN {d.schema}.sessions ss"
                " ON ss.label = st.session_label WHERE st.id = x.turn_id AND ss.kind != 'dm')"
            )
        return out

    def redacted(self, table: str) -> dict[str, str]:
        """The columns of `table` that show the person's words otherwise."""
        if table in ("messages", "inbound"):
            them = f"{self.running} AND {self.said_by_them('x')}"
            if table == "messages":
                return {"content": f"CASE WHEN {them} THEN '{ERASED}' ELSE x.content END"}
            return {
                "text": f"CASE WHEN {them} THEN '{ERASED}' ELSE x.text END",
                "sender_name": f"CASE WHEN {them} THEN NULL ELSE x.sender_name END",
                "meta": f"CASE WHEN {them} THEN NULL ELSE x.meta END",
            }
        if table == "turn_events":  # the broker's intent quotes each input
            quoted = f"x.type = 'intent' AND {self.running} AND {self.holds_theirs('x.turn_id')}"
            return {"payload": f"CASE WHEN {quoted} THEN '{ERASED_INTENT}' ELSE x.payload END"}
        if table == "turns":
            held = f"{self.running} AND {self.holds_theirs('x.id')}"
            return {
                c: f"CASE WHEN {held} THEN NULL ELSE x.{c} END" for c in ("title", "title_source")
            }
        if table == "sessions":
            return {
                c: f"CASE WHEN x.kind != 'dm' AND {self.running} THEN NULL ELSE x.{c} END"
                for c in ("title", "slug", "closing_summary")
            }
        return {}


def views(dialect: Dialect, tables: dict[str, list[str]]) -> list[str]:
    """The statements that create the views over `tables` (name → its columns)."""
    p = _Phrases(dialect)
    out: list[str] = []
    for table, columns in sorted(tables.items()):
        if table in _UNTOUCHED or table.startswith(("messages_fts", "sqlite_")):
            continue
        hidden, redacted = p.hidden(table, columns), p.redacted(table)
        if table == "sessions":
            where = " WHERE x.status != 'erased'"
        elif hidden:
            where = f" WHERE NOT ({p.running} AND ({' OR '.join(hidden)}))"
        elif redacted:
            where = ""
        else:
            continue  # nothing of a person to hide here
        select = ", ".join(f"{redacted[c]} AS {c}" if c in redacted else f"x.{c}" for c in columns)
        out.append(
            f"{dialect.temp} {table} AS SELECT {select} FROM {dialect.schema}.{table} x{where}"
        )
    return out


def sqlite_tables(conn: sqlite3.Connection) -> dict[str, list[str]]:
    names = [
        str(r[0]) for r in conn.execute("SELECT name FROM main.sqlite_schema WHERE type = 'table'")
    ]
    return {n: [str(r[1]) for r in conn.execute(f"PRAGMA main.table_info('{n}')")] for n in names}


def shadow(conn: sqlite3.Connection) -> sqlite3.Connection:
    """Give a SQLite reader connection the views; returns it."""
    tables = sqlite_tables(conn)
    if "erasures" not in tables:
        return conn  # a ledger older than erasures: nothing can be running
    for sql in views(sqlite_dialect(), tables):
        conn.execute(sql)
    return conn


def shadow_pg(conn: Any) -> None:
    """Give a PostgreSQL reader session (a psycopg connection) the views."""
    schema = str(conn.execute("SELECT current_schema()").fetchone()[0])
    tables: dict[str, list[str]] = {}
    for table, column in conn.execute(
        "SELECT table_name, column_name FROM information_schema.columns"
        " WHERE table_schema = %s ORDER BY table_name, ordinal_position",
        (schema,),
    ):
        tables.setdefault(str(table), []).append(str(column))
    if "erasures" not in tables:
        return
    for sql in views(pg_dialect(schema), tables):
        conn.execute(sql)
