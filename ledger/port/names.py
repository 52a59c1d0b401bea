"""What the shell asks of a ledger to name people (`entity.name`) and alias sessions
(`entity.alias`): ledger/names.py says what each keeps.

Each returns after its commit; a refused one (`Invalid`, `NotFound`, `Conflict`, with
the argument it blames) changes nothing.
"""

from __future__ import annotations

from typing import Any, Protocol


class NamesPort(Protocol):
    async def name_entity(
        self, entity: str, name: str, kind: str | None, now: int
    ) -> dict[str, Any]:
        """Name the person `entity` belongs to: `{"entity", "name", "kind"}`, `entity`
        there being the canonical root that now carries the name."""
        ...

    async def entity_show(self, entity: str) -> dict[str, Any]:
        """Who `entity` is: `{"entity", "canonical", "name", "kind", "members",
        "session"}` (ledger/names.py); `NotFound` for no such entity."""
        ...

    async def add_alias(self, alias: str, session: str, now: int) -> dict[str, Any]:
        """Lead the key `alias` to `session` (a label or an alias, merges followed):
        `{"alias", "session"}`."""
        ...
