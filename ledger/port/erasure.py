"""What the shell asks of a ledger to forget a person (`entity.erase`).

An erasure is marked in one transaction before anything else happens, and the
shell hears of it then (`marked`, with the sessions it covers) so it can stop
what runs for them; the call returns only once the rows and their bytes are
gone. A ledger opened after a crash finishes the erasure it finds unfinished
(`resume_erasure`). One erasure runs at a time.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from ledger.port.errors import LedgerLookupError

Marked = Callable[[list[str]], Awaitable[None]]


class ErasureRunning(LedgerLookupError):
    """Another erasure has not finished: one runs at a time."""

    code = "conflict"


class ErasurePort(Protocol):
    async def erase_entity(
        self, entity: str, confirm: str, now: int, marked: Marked | None = None
    ) -> dict[str, int]:
        """Forget `entity` and every entity merged with it: `{"sessions", "messages",
        "files"}` removed. `NotFound` for no such entity, `Invalid` when `confirm`
        differs, `ErasureRunning` while another erasure runs; each changes nothing."""
        ...

    async def resume_erasure(self) -> dict[str, int | str] | None:
        """Finish an erasure a crash cut off: its entity and counts, or None."""
        ...
