"""A session's context state: the shell around the pure packing and compaction core.

Rule 1: token counts are computed once, when a message is first seen, and
        stored with the message; loading a session never re-tokenizes history
        (rows written before counts were stored are counted once on load).
Rule 2: the history kept in memory is exactly the turns after the latest
        compaction boundary (the kept turns of that compaction and every turn
        since), with the same rule as the ledger: inputs of aborted turns run
        again elsewhere and are left out; an aborted turn's partial reply stays.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from itertools import chain

import orjson

from .packing import ContextInput, ContextPlan, Msg, TurnBlock, WholeHistory, assemble
from .state import SessionState, state_from
from .tokens import TokenCounter

MAX_LOAD_TURNS = 5000  # a thread longer than this without a compaction loads its newest part


@dataclass
class SessionContext:
    counter: TokenCounter
    blocks: list[TurnBlock] = field(default_factory=list)
    summary: str | None = None
    summary_tokens: int = 0
    last_reported: int | None = None  # the prompt tokens the engine last reported
    state: SessionState = field(default_factory=SessionState)
    _fixed: dict[tuple[str, str], int] = field(default_factory=dict, repr=False)
    # `blocks` flattened and summed (packing Rule 6) and how many blocks that covers;
    # -1: stale, made again (once) by the next `build`; `add_turn` grows it in place.
    _whole: WholeHistory = field(default_factory=WholeHistory, repr=False)
    _whole_blocks: int = field(default=-1, repr=False)

    def fixed(self, role: str, content: str) -> Msg:
        """A message that recurs turn after turn (the system prompt, the state record):
        counted once while its text stays the same."""
        tokens = self._fixed.get((role, content))
        if tokens is None:
            if len(self._fixed) >= 16:
                self._fixed.clear()
            tokens = self._fixed[(role, content)] = self.counter.count_message(role, content)
        return Msg(role, content, tokens)  # type: ignore[arg-type]

    def msg(
        self, role: str, content: str, name: str | None = None, turn_id: str | None = None
    ) -> Msg:
        tokens = self.counter.count_message(role, content, name)
        return Msg(role, content, tokens, turn_id=turn_id, name=name)  # type: ignore[arg-type]

    def build(
        self,
        *,
        window: int,
        reserve: int,
        threshold: float,
        system: Msg | None,
        inputs: tuple[Msg, ...],
        notes: tuple[Msg, ...],
    ) -> ContextPlan:
        summary = None
        if self.summary:
            summary = Msg("system", summary_text(self.summary), self.summary_tokens)
        rendered = self.state.render()
        return assemble(
            ContextInput(
                window=window,
                reserve_reply=min(reserve, window - 1),
                system=system,
                state=self.fixed("system", rendered) if rendered else None,
                summary=summary,
                history=tuple(self.blocks),
                inputs=inputs,
                notes=notes,
                threshold=threshold,
                whole=self._whole_history(),
            )
        )

    def _whole_history(self) -> WholeHistory:
        if self._whole_blocks != len(self.blocks):
            messages = tuple(chain.from_iterable(block.messages for block in self.blocks))
            tokens = sum(block.tokens for block in self.blocks)
            self._whole, self._whole_blocks = WholeHistory(messages, tokens), len(self.blocks)
        return self._whole

    def add_turn(self, turn_id: str, messages: list[Msg]) -> None:
        if messages:
            block = TurnBlock(turn_id, tuple(messages))
            if self._whole_blocks == len(self.blocks):
                self._whole, self._whole_blocks = self._whole.plus(block), self._whole_blocks + 1
            self.blocks.append(block)

    def compacted(self, summary: str, keep: tuple[TurnBlock, ...]) -> None:
        self.summary = summary
        self.summary_tokens = self.counter.count_message("system", summary_text(summary))
        self.blocks, self._whole_blocks = list(keep), -1
        self.last_reported = None

    def reset(self) -> None:
        """`/new`: a fresh thread has no history, no summary and no state."""
        self.blocks, self.summary, self.summary_tokens, self.last_reported = [], None, 0, None
        self._whole_blocks = -1
        self.state = SessionState()


def summary_text(summary: str) -> str:
    return f"Summary of the earlier conversation:\n{summary}"


def load(conn: sqlite3.Connection, head: str | None, counter: TokenCounter) -> SessionContext:
    ctx = SessionContext(counter)
    if head is None:
        return ctx
    ctx.state = _state(conn, head)
    chain = conn.execute(
        "WITH RECURSIVE chain(id, depth) AS (SELECT ?, 0 UNION ALL"
        " SELECT t.parent_id, c.depth + 1 FROM turns t JOIN chain c ON t.id = c.id"
        " WHERE t.parent_id IS NOT NULL AND t.type != 'compaction' AND c.depth < ?)"
        " SELECT t.id, t.type, t.status FROM chain c JOIN turns t ON t.id = c.id"
        " ORDER BY c.depth",
        (head, MAX_LOAD_TURNS),
    ).fetchall()
    turns: list[tuple[str, str]] = []  # (id, status), newest first, up to a compaction
    for turn_id, kind, status in chain:
        if kind == "compaction":
            row = conn.execute(
                "SELECT summary, first_kept_turn_id FROM compactions WHERE turn_id = ?",
                (turn_id,),
            ).fetchone()
            if row is not None:
                ctx.summary = str(row[0])
                ctx.summary_tokens = counter.count_message("system", summary_text(ctx.summary))
                turns += _kept_turns(conn, turn_id, row[1])
            break
        turns.append((str(turn_id), str(status)))
    for turn_id, status in reversed(turns):
        ctx.add_turn(turn_id, _messages(conn, turn_id, status, counter))
    return ctx


def _kept_turns(
    conn: sqlite3.Connection, compaction: str, first_kept: str | None
) -> list[tuple[str, str]]:
    """The turns a compaction kept verbatim: from its parent back to `first_kept`."""
    if first_kept is None:
        return []
    rows = conn.execute(
        "WITH RECURSIVE chain(id, depth) AS ("
        " SELECT parent_id, 0 FROM turns WHERE id = ? UNION ALL"
        " SELECT t.parent_id, c.depth + 1 FROM turns t JOIN chain c ON t.id = c.id"
        " WHERE c.id != ? AND t.parent_id IS NOT NULL AND c.depth < ?)"
        " SELECT t.id, t.status FROM chain c JOIN turns t ON t.id = c.id ORDER BY c.depth",
        (compaction, first_kept, MAX_LOAD_TURNS),
    ).fetchall()
    return [(str(r[0]), str(r[1])) for r in rows]


def _messages(
    conn: sqlite3.Connection, turn_id: str, status: str, counter: TokenCounter
) -> list[Msg]:
    out = []
    for role, content, tokens in conn.execute(
        "SELECT role, content, tokens FROM messages WHERE turn_id = ? ORDER BY seq",
        (turn_id,),
    ):
        if status == "aborted" and role == "user":
            continue  # those inputs ran again in a later turn
        count = int(tokens) if tokens is not None else counter.count_message(role, content)
        out.append(Msg(role, content, count, turn_id=turn_id))
    return out


STATE_EVENTS = 500  # the newest events of a session that its state record is built from


def _state(conn: sqlite3.Connection, head: str) -> SessionState:
    row = conn.execute("SELECT session_label FROM turns WHERE id = ?", (head,)).fetchone()
    if row is None:
        return SessionState()
    rows = conn.execute(
        "SELECT type, payload FROM turn_events WHERE session_label = ?"
        " AND type IN ('intent', 'file', 'decision', 'error', 'feedback')"
        " ORDER BY created_at DESC, turn_id DESC, seq DESC LIMIT ?",
        (row[0], STATE_EVENTS),
    ).fetchall()
    return state_from((str(kind), orjson.loads(payload)) for kind, payload in reversed(rows))
