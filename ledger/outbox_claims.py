"""Claims on pending replies, for several broker nodes sharing one ledger.

On a cluster a node pushes a reply to its own adapters only once it has claimed the
outbox row (claimed_by = its node, claimed_at = now), so two nodes each holding an
adapter of the channel never both send it. A claim is the node's until it is
`lease_ms` old; then another node may take it over (the claimer died, or its adapter
left before confirming), and a node's own claim is always its to renew. The claim is
one UPDATE whose WHERE re-checks the claim: under PostgreSQL's READ COMMITTED a
second claimer waits on the row lock, then sees the first claim and updates nothing;
SQLite has one writer.
"""

from __future__ import annotations

import sqlite3

from ledger.port.records import OutboxKey

_CLAIMABLE = "(claimed_by IS NULL OR claimed_by = ? OR claimed_at < ?)"


def claimable_outbox(
    conn: sqlite3.Connection,
    channel: str,
    node: str,
    now: int,
    lease_ms: int,
    limit: int,
    after: OutboxKey | None = None,
) -> list[tuple[str, str, str, OutboxKey]]:
    """(out_id, session, frame, key) of up to `limit` pending replies of `channel`
    that `node` may claim, oldest first, from after `after` on (a page)."""
    since = after or (-1, "")
    return [
        (str(r[0]), str(r[1]), str(r[2]), (int(r[3]), str(r[0])))
        for r in conn.execute(
            "SELECT out_id, session_label, frame, created_at FROM outbox WHERE channel = ?"
            f" AND status = 'pending' AND {_CLAIMABLE} AND (created_at, out_id) > (?, ?)"
            " ORDER BY created_at, out_id LIMIT ?",
            (channel, node, now - lease_ms, *since, limit),
        )
    ]


def claim_outbox(
    conn: sqlite3.Connection, out_ids: list[str], node: str, now: int, lease_ms: int
) -> list[str]:
    """Claim what of `out_ids` is still pending and claimable by `node`; the ids won."""
    won = []
    for out_id in out_ids:
        cur = conn.execute(
            "UPDATE outbox SET claimed_by = ?, claimed_at = ?"
            f" WHERE out_id = ? AND status = 'pending' AND {_CLAIMABLE}",
            (node, now, out_id, node, now - lease_ms),
        )
        if cur.rowcount:
            won.append(out_id)
    return won
