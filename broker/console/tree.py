"""A session's turns laid out as a tree of rows, for the console to draw. Pure.

Each turn is one row at a depth: the line that leads to the session's head
stays at its depth, and every other child of a turn (a branch left by a
`/new`, a reset, an orphaned turn) opens a deeper level drawn before the line
goes on. Sessions forked from a turn hang under that turn's row. The walk is
iterative, so a session with a long thread cannot exhaust a stack.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Row:
    depth: int
    turn: dict[str, Any]
    branch: bool  # the first row of a deeper level
    on_head: bool  # on the line that leads to the head
    forks: list[dict[str, Any]] = field(default_factory=list)


def rows(turns: list[dict[str, Any]], forks: list[dict[str, Any]], head: str | None) -> list[Row]:
    """`turns` (each with `id`, `parent`, `started_at`) as rows, oldest root first."""
    by_id = {t["id"]: t for t in turns}
    children: dict[str, list[dict[str, Any]]] = {}
    roots = []
    for t in sorted(turns, key=lambda t: (t["started_at"], t["id"])):
        parent = t.get("parent")
        if parent is not None and parent in by_id:
            children.setdefault(parent, []).append(t)
        else:
            roots.append(t)
    on_head: set[str] = set()
    cursor = head
    while cursor is not None and cursor in by_id and cursor not in on_head:
        on_head.add(cursor)
        cursor = by_id[cursor].get("parent")
    forks_at: dict[str, list[dict[str, Any]]] = {}
    for f in forks:
        forks_at.setdefault(f["turn"], []).append(f)
    out: list[Row] = []
    stack: list[tuple[dict[str, Any], int, bool]] = [(r, 0, False) for r in reversed(roots)]
    while stack:
        node, depth, branch = stack.pop()
        out.append(Row(depth, node, branch, node["id"] in on_head, forks_at.get(node["id"], [])))
        kids = children.get(node["id"], [])
        if not kids:
            continue
        main = next((k for k in kids if k["id"] in on_head), kids[-1])
        stack.append((main, depth, False))
        stack.extend((k, depth + 1, True) for k in reversed(kids) if k is not main)
    return out
