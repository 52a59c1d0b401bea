"""Session leases: which attempt of a session's turn may run it, in a cluster on Temporal.

Temporal gives a turn whose node went silent to another node while the first may
still be alive (starved, or paused), so two attempts of one turn could run at once.
An attempt runs its turn only while it holds its session's lease. Taking a lease
succeeds only once the last one lapsed or was released, and every taking makes a
larger `token`, so a renewal or release names the taking it belongs to and an
attempt that lost the lease can never renew it. Expiry times are the taking node's
clock (ms), so the nodes' clocks are assumed to agree within the margin the holder
keeps (broker/runtime/temporal/session_lease.py). A caller that gives no `now` has the
lease counted from when its write runs, read from the writer's clock: the time its
write waited in the writer's queue is not taken from the lease, and the expiry
returned tells the caller when that was.

A running turn's writes are fenced by its taking (`fenced`, ledger/port/fencing.py):
each checks, in its own transaction, that its token is still the session's. Only a
taking moves the token on (a release leaves it), so a write that passes the check
commits before any later taking, and one after it changes nothing. On PostgreSQL the
check holds the lease's row in key-share mode until the write commits, so a taking
on another node (which changes the key, `token`) waits for it, while a renewal or a
release (which change `expires_at` alone) does not.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar

from ledger.port.errors import LeaseFenced
from ledger.port.records import LeaseTaking
from plumbing.ids import now_ms

T = TypeVar("T")
_HOLDS = "SELECT token FROM session_leases WHERE session_label = ?"
_HOLDS_LOCKED = _HOLDS + " FOR KEY SHARE"  # a server's rows are written by many nodes


def take(
    conn: sqlite3.Connection, session: str, holder: str, now: int | None, ttl_ms: int
) -> LeaseTaking:
    """Take the session's lease for `holder` until `now + ttl_ms` if it is free (never
    taken, released, or lapsed); else say who holds it and until when."""
    now = now_ms() if now is None else now
    conn.execute(
        "INSERT INTO session_leases (session_label, token, holder, expires_at)"
        " VALUES (?, 1, ?, ?) ON CONFLICT (session_label) DO UPDATE SET"
        " token = session_leases.token + 1, holder = excluded.holder,"
        " expires_at = excluded.expires_at WHERE session_leases.expires_at <= ?",
        (session, holder, now + ttl_ms, now),
    )
    token, owner, expires_at = conn.execute(
        "SELECT token, holder, expires_at FROM session_leases WHERE session_label = ?",
        (session,),
    ).fetchone()
    return LeaseTaking(owner == holder, int(token), str(owner), int(expires_at))


def renew(
    conn: sqlite3.Connection, session: str, token: int, now: int | None, ttl_ms: int
) -> int | None:
    """Hold the lease until `now + ttl_ms`, and say until when; None if this taking lost
    it (another attempt took it since)."""
    expires_at = (now_ms() if now is None else now) + ttl_ms
    cur = conn.execute(
        "UPDATE session_leases SET expires_at = ?"
        " WHERE session_label = ? AND token = ? AND expires_at <> 0",
        (expires_at, session, token),
    )
    return expires_at if cur.rowcount == 1 else None


def release(conn: sqlite3.Connection, session: str, token: int) -> None:
    """Let the lease go at once, if this taking still holds it, for good: a released
    lease (expiry 0) is renewed no more, so a renewal of this taking still in flight
    (sent before the release, committed after it) is refused rather than hold the lease
    again for nobody. The token stays until the next taking, so a write of this
    taking that joins a batch behind its release (which is lazy: at the batch's head)
    still lands; nobody else has read the session since."""
    conn.execute(
        "UPDATE session_leases SET expires_at = 0 WHERE session_label = ? AND token = ?",
        (session, token),
    )


def fenced(
    conn: sqlite3.Connection,
    session: str,
    token: int,
    fn: Callable[..., T],
    /,
    *args: Any,
    **kwargs: Any,
) -> T:
    """`fn(conn, *args, **kwargs)` if the taking `token` still holds the session's lease;
    else LeaseFenced, having changed nothing. One primary-key read."""
    held = conn.execute(
        _HOLDS_LOCKED if getattr(conn, "locks_rows", False) else _HOLDS, (session,)
    ).fetchone()
    if held is None or int(held[0]) != token:
        raise LeaseFenced(f"the lease of session {session} was taken by another attempt")
    return fn(conn, *args, **kwargs)
