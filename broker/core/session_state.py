"""Session state from typed turn events, and scratchpad merges. Pure.

Rule 1: the state record is derived mechanically from events, never written
        by hand: files touched (`file` events), the latest decisions
        (`decision`), errors resolved (events that name what they resolve) and
        the current focus (the latest `intent`).
Rule 2: a scratchpad update is a JSON merge patch (RFC 7396): objects merge
        key by key, `null` deletes a key, anything else replaces.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

EVENT_TYPES = ("intent", "action", "file", "snapshot", "decision", "error", "llm", "feedback")
MAX_ITEMS = 10  # of each list in the state record


@dataclass
class SessionState:
    files: list[str] = field(default_factory=list)
    decisions: list[str] = field(default_factory=list)
    errors_resolved: list[str] = field(default_factory=list)
    focus: str | None = None

    def apply(self, kind: str, payload: dict[str, Any]) -> None:
        if kind == "file" and isinstance(path := payload.get("path"), str):
            _push(self.files, path)
        elif kind == "decision" and isinstance(text := payload.get("text"), str):
            _push(self.decisions, text)
        elif kind == "intent" and isinstance(text := payload.get("text"), str):
            self.focus = text
        if isinstance(resolved := payload.get("resolves"), str):
            _push(self.errors_resolved, resolved)

    def render(self) -> str | None:
        parts = []
        if self.focus:
            parts.append(f"Current focus: {self.focus}")
        if self.files:
            parts.append("Files touched: " + ", ".join(self.files))
        if self.decisions:
            parts.append("Decisions: " + "; ".join(self.decisions))
        if self.errors_resolved:
            parts.append("Errors resolved: " + "; ".join(self.errors_resolved))
        return "Session state:\n" + "\n".join(parts) if parts else None


def _push(items: list[str], value: str) -> None:
    if value in items:
        items.remove(value)
    items.append(value)
    del items[:-MAX_ITEMS]


def state_from(events: Iterable[tuple[str, dict[str, Any]]]) -> SessionState:
    state = SessionState()
    for kind, payload in events:
        state.apply(kind, payload)
    return state


def totals_of(events: Iterable[tuple[str, dict[str, Any]]]) -> dict[str, int]:
    """What a turn's events add to the session's running totals."""
    out = {"events": 0, "files_modified": 0, "errors": 0, "errors_resolved": 0}
    for kind, payload in events:
        out["events"] += 1
        out["files_modified"] += kind == "file" and payload.get("op") in (
            "write",
            "edit",
            "create",
            "delete",
        )
        out["errors"] += kind == "error"
        out["errors_resolved"] += isinstance(payload.get("resolves"), str)
    return out


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7396 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result
