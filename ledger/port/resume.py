"""What the shell asks of a ledger to list a person's sessions and threads, to pick one
to resume (`person.sessions`; ledger/resume.py says which are listed)."""

from __future__ import annotations

from typing import Any, Protocol


class ResumePort(Protocol):
    async def person_sessions(self, entity: str, limit: int) -> dict[str, Any]:
        """`{"entity", "canonical", "name", "sessions"}`, newest activity first, each
        session with its threads; `NotFound` for no such entity."""
        ...
