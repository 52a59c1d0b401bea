"""A turn's summary at its end, made mechanically from what it did (seed 000, step 5). Pure.

No model is asked: the summary lists what the broker saw. Actions taken are the
turn's tool calls and the actions and file changes its engine reported, each as
`tool path` (or the tool alone), in the order they happened, each once. Files
modified are the paths of its `file` events that wrote, edited, created or deleted,
and of the tool calls that succeeded under a tool whose name says it changes files
(`write`, `edit`, `create`, `delete`...); files read are the other paths its
successful calls and reported actions named, less those it modified. Decisions are
its `decision` events' texts. The outcome is the status line (`completed`,
`failed (timeout): ...`) and, for a turn that completed, the first line of its reply.
Every list is bounded (`MAX_ITEMS`), newest dropped first, so a long turn keeps a
short summary; `render` gives the few lines summary-mode context shows for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from core.engine_types import ToolCall
from core.session_state import TEXT_KEYS_IN_ORDER, first_line, paths_in

MAX_ITEMS = 20
TEXT_CHARS = 200
OUTCOME_CHARS = 200
MODIFYING_OPS = ("write", "edit", "create", "delete")
# Words in a tool's name that say it changes the files it names.
CHANGING_WORDS = ("write", "edit", "create", "delete", "remove", "patch", "apply", "move", "rename")
KEYS = ("actions_taken", "decisions", "files_read", "files_modified", "outcome")

Summary = dict[str, Any]


def summarize(
    outcome: str,
    reply: str,
    tool_calls: Sequence[ToolCall],
    events: Sequence[tuple[str, Mapping[str, Any]]],
) -> Summary:
    """The summary of a turn that ended with `outcome` (its status line) and `reply`."""
    line = outcome
    if outcome == "completed" and (said := first_line(reply, OUTCOME_CHARS)):
        line = f"completed: {said}"
    actions, decisions, read, modified = _listed(tool_calls, events)
    if not actions and not decisions:  # most turns: nothing to list (a path comes with an action)
        return {
            "actions_taken": [],
            "decisions": [],
            "files_read": [],
            "files_modified": [],
            "outcome": line,
        }
    changed = _once(modified)
    return {
        "actions_taken": _once(actions)[:MAX_ITEMS],
        "decisions": _once(decisions)[:MAX_ITEMS],
        "files_read": [p for p in _once(read) if p not in changed][:MAX_ITEMS],
        "files_modified": changed[:MAX_ITEMS],
        "outcome": line,
    }


def _listed(
    tool_calls: Sequence[ToolCall],
    events: Sequence[tuple[str, Mapping[str, Any]]],
) -> tuple[list[str], list[str], list[str], list[str]]:
    """Actions, decisions, files read and files modified, in order, repeats kept."""
    actions: list[str] = []
    decisions: list[str] = []
    read: list[str] = []
    modified: list[str] = []
    for call in tool_calls:
        paths = paths_in(call.arguments)
        actions += [f"{call.name} {p}" for p in paths] or [call.name]
        if call.status == "error":
            continue
        (modified if _changes(call.name) else read).extend(paths)
    for kind, payload in events:
        if kind == "action" and payload.get("by") != "broker":  # the broker's own: a tool call
            tool = payload.get("tool")
            if isinstance(tool, str) and tool:
                paths = _event_paths(payload)
                actions += [f"{tool} {p}" for p in paths] or [tool]
                if payload.get("success", True) is not False and payload.get("status") != "error":
                    (modified if _changes(tool) else read).extend(paths)
        elif kind == "file" and isinstance(path := payload.get("path"), str):
            op = payload.get("op")
            actions.append(f"{op if isinstance(op, str) else 'file'} {path}")
            if op in MODIFYING_OPS:
                modified.append(path)
            elif op == "read":
                read.append(path)
        elif kind == "decision" and (text := _text(payload)):
            decisions.append(first_line(text, TEXT_CHARS))
    return actions, decisions, read, modified


def render(title: str | None, summary: Mapping[str, Any]) -> str:
    """The summary as the lines a summary-mode context shows for its turn."""
    lines = [f"- {title or 'a turn'}: {summary.get('outcome') or 'no outcome'}"]
    for key, name in (
        ("actions_taken", "actions"),
        ("decisions", "decisions"),
        ("files_read", "files read"),
        ("files_modified", "files modified"),
    ):
        values = summary.get(key)
        if isinstance(values, list) and values:
            lines.append(f"  {name}: {'; '.join(str(v) for v in values)}")
    return "\n".join(lines)


def _changes(tool: str) -> bool:
    name = tool.lower()
    return any(word in name for word in CHANGING_WORDS)


def _event_paths(payload: Mapping[str, Any]) -> list[str]:
    args = payload.get("args")
    found: list[str] = []
    for where in (payload, args if isinstance(args, Mapping) else {}):
        for key in ("path", "file", "file_path", "filename"):
            value = where.get(key)
            if isinstance(value, str) and value.strip() and "\n" not in value:
                found.append(value.strip()[:300])
    return _once(found)


def _text(payload: Mapping[str, Any]) -> str | None:
    for key in TEXT_KEYS_IN_ORDER:
        value = payload.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return None


def _once(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))
