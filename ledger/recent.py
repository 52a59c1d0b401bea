"""The block of time a session last changed in, by which sessions are listed latest first.

A session's `updated_block` is its `updated_at` shifted right by `BLOCK_BITS` (blocks of
about 17 minutes), and every statement that writes `updated_at` writes the block with
it, so the two always agree. The console's page of sessions reads the block's index
(`sessions_recent`) and sorts within each block it reads by `updated_at`: the same order
as `updated_at` alone, read through an index that changes far less often. A turn's
commit and a library append, which move `updated_at` every time, first try the
statement that leaves the block alone (`AND updated_block = ?`) and write it only when
that changes no row, so a busy session's turns leave the index untouched
(docs/performance.md, "Against the issue's baseline").
"""

from __future__ import annotations

BLOCK_BITS = 20


def block_of(ms: int) -> int:
    """The block a session changed at `ms` (milliseconds since the epoch) falls in."""
    return ms >> BLOCK_BITS
