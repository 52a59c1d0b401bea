"""Errors the ledger raises for callers to map onto protocol error codes."""

from __future__ import annotations


class LedgerLookupError(Exception):
    code = "internal"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class NotFound(LedgerLookupError):
    code = "not_found"


class Conflict(LedgerLookupError):
    code = "invalid"
