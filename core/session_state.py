"""The session-state record, the running totals of turn events, and scratchpad merges. Pure.

The state record belongs to a thread: the record after a turn is `advance(record of
its parent, facts of the turn)`, so a fork made at turn T starts from exactly the
record after T, and a new thread (`/new`) from an empty one. Nothing in it is written
by hand: it is extracted mechanically from everything the broker sees of a turn. The
focus comes from the person's latest message (an engine's `intent` event says it
better and wins within its turn); files from the arguments of tool calls that
succeeded (`path`, `file`, `filename`...) and from `file` events; errors from failed
tool calls, failed turns and `error` events (a later successful call with the same
arguments, or an event that `resolves` it, marks one resolved); decisions from
`decision` events and from the agent's own `remember` calls (a constraint or a fact
is kept among them, named so).

Each list keeps its newest entries (20 files, 10 decisions, 5 errors), and an entry
seen again moves to the end instead of repeating; a compaction turn changes nothing,
as it only marks a context boundary. A scratchpad update is a JSON merge patch (RFC
7396): objects merge key by key, `null` deletes a key, anything else replaces.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import field, replace
from typing import Any

import orjson

from core.engine_types import ToolCall
from core.records import record

EVENT_TYPES = (
    "intent",
    "action",
    "file",
    "snapshot",
    "decision",
    "error",
    "llm",
    "feedback",
    "validation_gate",
    "memory_recall",
    "system_event",
)
MAX_FILES, MAX_DECISIONS, MAX_ERRORS = 20, 10, 5
FOCUS_CHARS = 100  # of the first line of the person's message (the seed's rule)
TEXT_CHARS = 200  # of a decision or an error
PATH_CHARS = 300
# Argument names under which tools name the files they work on.
FILE_ARGS = ("path", "file", "filename", "file_path", "filepath", "target_file")
FILE_LIST_ARGS = ("paths", "files")
TEXT_KINDS = ("intent", "decision", "error")  # the events whose text goes into the record
TEXT_KEYS_IN_ORDER = ("text", "message", "decision", "error", "summary")  # where it is, first wins
TEXT_KEYS = frozenset(TEXT_KEYS_IN_ORDER)
REMEMBER_TOOL = "remember"  # the agent's tool whose successful calls are key decisions
REMEMBER_KINDS = ("decision", "constraint", "fact")


@record
class FileEntry:
    path: str
    action: str  # the tool's name, or a `file` event's op
    turn: int  # the turn's number on the thread (1 = its root)


@record
class Decision:
    text: str
    turn: int


@record
class ErrorEntry:
    text: str
    turn: int
    resolved: bool = False
    call: str | None = None  # "tool {arguments}" of a failed call: its retry resolves it


@record
class Counts:
    turns: int = 0  # on the thread, compactions left out
    tool_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


@record
class TurnFacts:
    """What the broker saw of one committed turn, as the record needs it."""

    type: str  # turn | queue_batch | worker_result | compaction ...
    status: str  # completed | aborted | failed
    error: str | None = None
    model: str | None = None
    inputs: tuple[tuple[str, str], ...] = ()  # (source, text) in arrival order
    tool_calls: tuple[ToolCall, ...] = ()
    events: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    prompt_tokens: int = 0
    completion_tokens: int = 0


@record
class SessionState:
    """The state record of a thread after one of its turns."""

    focus: str | None = None
    files: tuple[FileEntry, ...] = ()
    decisions: tuple[Decision, ...] = ()
    errors: tuple[ErrorEntry, ...] = ()
    model: str | None = None
    counts: Counts = field(default_factory=Counts)

    def render(self, label: str | None = None) -> str | None:
        """The record as the agent reads it in its context; None when it is empty."""
        return render(self, label)


EMPTY = SessionState()


def advance(state: SessionState, turn: TurnFacts) -> SessionState:
    """The record after `turn`, from the record after its parent."""
    if turn.type == "compaction":
        return state
    n = state.counts.turns + 1
    focus = state.focus
    for source, text in turn.inputs:
        if source == "person" and (line := first_line(text, FOCUS_CHARS)):
            focus = line
    files, errors = list(state.files), list(state.errors)
    decisions = list(state.decisions)
    for call in turn.tool_calls:
        _apply_call(call, n, files, errors, decisions)
    for kind, payload in turn.events:
        focus = _apply_event(kind, payload, n, focus, files, decisions, errors)
    if turn.status == "failed":
        _push_error(errors, ErrorEntry(first_line(turn.error or "the turn failed", TEXT_CHARS), n))
    counts = state.counts
    return SessionState(
        focus=focus,
        files=tuple(files[-MAX_FILES:]),
        decisions=tuple(decisions[-MAX_DECISIONS:]),
        errors=tuple(errors[-MAX_ERRORS:]),
        model=turn.model or state.model,
        counts=Counts(
            turns=n,
            tool_calls=counts.tool_calls + len(turn.tool_calls),
            prompt_tokens=counts.prompt_tokens + turn.prompt_tokens,
            completion_tokens=counts.completion_tokens + turn.completion_tokens,
        ),
    )


def _apply_call(
    call: ToolCall,
    n: int,
    files: list[FileEntry],
    errors: list[ErrorEntry],
    decisions: list[Decision],
) -> None:
    key = f"{call.name} {' '.join(call.arguments.split())[:120]}"
    if call.status == "error":
        result = first_line(call.result, TEXT_CHARS) or "no result"
        _push_error(errors, ErrorEntry(f"{call.name} failed: {result}", n, call=key))
        return
    for i, entry in enumerate(errors):
        if entry.call == key and not entry.resolved:
            errors[i] = replace(entry, resolved=True)
    if call.name == REMEMBER_TOOL:
        if (line := remembered(call.arguments)) is not None:
            _push(decisions, Decision(line, n), lambda d: d.text)
        return
    for path in paths_in(call.arguments):
        _push_file(files, FileEntry(path, call.name, n))


def remembered(arguments: str) -> str | None:
    """The key-decision line of a `remember` call's arguments (JSON text): its text, a
    constraint or a fact named so; None for arguments that say nothing to keep."""
    try:
        args = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(args, dict):
        return None
    kind, text = args.get("kind"), args.get("text")
    if kind not in REMEMBER_KINDS or not isinstance(text, str):
        return None
    line = first_line(text, TEXT_CHARS)
    if not line:
        return None
    return line if kind == "decision" else first_line(f"{kind}: {line}", TEXT_CHARS)


def _apply_event(
    kind: str,
    payload: Mapping[str, Any],
    n: int,
    focus: str | None,
    files: list[FileEntry],
    decisions: list[Decision],
    errors: list[ErrorEntry],
) -> str | None:
    """One event's part of the record; the focus after it."""
    text = _text_of(payload) if kind in TEXT_KINDS else None
    if kind == "intent" and text:
        focus = first_line(text, FOCUS_CHARS)
    elif kind == "file" and (path := _path(payload.get("path"))):
        op = payload.get("op")
        _push_file(files, FileEntry(path, op if isinstance(op, str) and op else "file", n))
    elif kind == "decision" and text:
        _push(decisions, Decision(first_line(text, TEXT_CHARS), n), lambda d: d.text)
    elif kind == "error" and text:
        _push_error(errors, ErrorEntry(first_line(text, TEXT_CHARS), n))
    resolves = payload.get("resolves")
    if isinstance(resolves, str) and (what := first_line(resolves, TEXT_CHARS)):
        old = next((e for e in errors if e.text == what), None)
        _push_error(errors, replace(old or ErrorEntry(what, n), resolved=True))
    return focus


def _text_of(payload: Mapping[str, Any]) -> str | None:
    if TEXT_KEYS.isdisjoint(payload):  # the broker's own intent names none: it has its inputs
        return None
    for key in TEXT_KEYS_IN_ORDER:
        value = payload.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return None


def _push_file(files: list[FileEntry], entry: FileEntry) -> None:
    _push(files, entry, lambda f: f.path)


def _push_error(errors: list[ErrorEntry], entry: ErrorEntry) -> None:
    _push(errors, entry, lambda e: e.text)


def _push(items: list[Any], entry: Any, key: Any) -> None:
    """Append `entry`, removing an earlier one with the same key."""
    same = key(entry)
    items[:] = [i for i in items if key(i) != same]
    items.append(entry)


def first_line(text: str, limit: int) -> str:
    """The first non-blank line of `text`, spaces collapsed, cut to `limit` characters."""
    for line in text.splitlines():
        words = " ".join(line.split())
        if words:
            return words if len(words) <= limit else words[: limit - 1] + "…"
    return ""


def paths_in(arguments: str) -> list[str]:
    """The file paths a tool call's JSON arguments name; none if not JSON."""
    try:
        args = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return []
    if not isinstance(args, dict):
        return []
    found = [p for k in FILE_ARGS if (p := _path(args.get(k)))]
    for k in FILE_LIST_ARGS:
        value = args.get(k)
        if isinstance(value, list):
            found += [p for v in value if (p := _path(v))]
    return list(dict.fromkeys(found))


def _path(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    path = value.strip()
    if not path or len(path) > PATH_CHARS or "\n" in path or "\x00" in path:
        return None
    return path


# -- the record as JSON (the ledger stores it per turn) and as text -----------------


def to_json(state: SessionState) -> dict[str, Any]:
    """The record as `session.state` shows it (without the session's label and head)."""
    c = state.counts
    return {
        "focus": state.focus,
        "files": [{"path": f.path, "action": f.action, "turn": f.turn} for f in state.files],
        "decisions": [{"text": d.text, "turn": d.turn} for d in state.decisions],
        "errors": [
            {"text": e.text, "turn": e.turn, "resolved": e.resolved, "call": e.call}
            for e in state.errors
        ],
        "model": state.model,
        "counts": {
            "turns": c.turns,
            "tool_calls": c.tool_calls,
            "prompt_tokens": c.prompt_tokens,
            "completion_tokens": c.completion_tokens,
        },
    }


def from_json(data: Mapping[str, Any]) -> SessionState:
    c = data.get("counts") or {}
    return SessionState(
        focus=data.get("focus"),
        files=tuple(FileEntry(f["path"], f["action"], f["turn"]) for f in data.get("files", ())),
        decisions=tuple(Decision(d["text"], d["turn"]) for d in data.get("decisions", ())),
        errors=tuple(
            ErrorEntry(e["text"], e["turn"], bool(e.get("resolved")), e.get("call"))
            for e in data.get("errors", ())
        ),
        model=data.get("model"),
        counts=Counts(
            int(c.get("turns", 0)),
            int(c.get("tool_calls", 0)),
            int(c.get("prompt_tokens", 0)),
            int(c.get("completion_tokens", 0)),
        ),
    )


def dumps(state: SessionState) -> bytes:
    return orjson.dumps(to_json(state))


def loads(raw: str | bytes) -> SessionState:
    return from_json(orjson.loads(raw))


def render(state: SessionState, label: str | None = None, *, short: bool = False) -> str | None:
    """The record as text for the context; `short`: the session line and the focus
    only, for a budget too tight for the whole record. None when it is empty."""
    whole, short_text = render_both(state, label)
    return short_text if short else whole


def render_both(state: SessionState, label: str | None = None) -> tuple[str | None, str | None]:
    """`render` whole and short at once; the short text is the whole one itself (the
    same object) when the record has no files, decisions or errors to leave out."""
    lines, short = record_lines(state, label)
    if not lines:
        return None, None
    whole = "\n".join(lines)
    return whole, whole if short == len(lines) else "\n".join(lines[:short])


def record_lines(state: SessionState, label: str | None = None) -> tuple[list[str], int]:
    """The lines `render` joins, and how many of them its short form keeps; none when
    the record is empty. Each line begins with a letter or `-`, so a token counter
    may count them one by one (broker/context/tokens.py)."""
    if state == EMPTY:
        return [], 0
    c = state.counts
    who = f"{label}, " if label else ""
    model = f"model {state.model}, " if state.model else ""
    lines = [
        "Session state (kept by the broker for this thread):",
        f"session: {who}{model}{c.turns} turns, {c.tool_calls} tool calls,"
        f" {c.prompt_tokens} prompt and {c.completion_tokens} completion tokens",
    ]
    if state.focus:
        lines.append(f"current focus: {state.focus}")
    short = len(lines)
    if state.files:
        lines.append("files touched (newest last):")
        lines += [f"- {f.path} ({f.action}, turn {f.turn})" for f in state.files]
    if state.decisions:
        lines.append("key decisions:")
        lines += [f"- {d.text} (turn {d.turn})" for d in state.decisions]
    if state.errors:
        lines.append("errors:")
        lines += [
            f"- {e.text} (turn {e.turn}{', resolved' if e.resolved else ''})" for e in state.errors
        ]
    return lines, short


def state_from(events: Iterable[tuple[str, Mapping[str, Any]]]) -> SessionState:
    """The record of one completed turn that had only these events."""
    return advance(EMPTY, TurnFacts("turn", "completed", events=tuple(events)))


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
