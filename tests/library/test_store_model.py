"""The library Store against a plain model: random sequences of every public call
(sessions, appends of JSON values of every shape, reads, pop, clear, put, fork,
compact, export and import, close and reopen), mixed with turns written the way
the daemon writes them, each return value checked against what a dict-and-list
model says, and every session's whole state checked after every step.

The model keeps the turn tree (a turn's parent, type, items and writer), since
`fork` takes any turn, on the thread or off it; a session reads as its head's
chain back to the latest compaction. The same machine drives a `SyncStore` and
an async `Store` (through a blocking portal, so its appends take the event
loop's path: ledger/api/engine.py).

`SessionInfo.turns` is the length of the session's chain (every turn back to the
root), except after a fork, which starts counting at 0 (ledger/sessions.py Rule
1: a fork is constant time); it is checked again once `clear` or `put` counts it
afresh.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import anyio.from_thread
import orjson
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from ledger.api import Conflict, NotFound, SessionInfo, Store, SyncStore
from ledger.sessions import thread_ids
from tests import ledger_db
from tests.library.daemon_turns import daemon_aborted_turn, daemon_compaction, daemon_turn

LABELS = ["a", "b", "日本 ü", "x:y"]  # few: the calls meet on the same sessions
TEXT = st.text(max_size=6)
LEAF = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)  # orjson's range (docs/integrations.md)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT
)
JSON = st.recursive(
    LEAF,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=6,
)
ITEM = JSON | st.fixed_dictionaries(
    {"role": TEXT, "content": JSON}, optional={"type": st.sampled_from(["message", ""])}
)
ITEMS = st.lists(ITEM, max_size=3)
TITLE = st.none() | st.text(max_size=8)
METADATA = st.none() | st.dictionaries(TEXT, JSON, max_size=2)


def same(got: Any, want: Any) -> bool:
    """Equal as JSON texts: 1 is not 1.0 nor True, and dict keys keep their order."""
    return orjson.dumps(got) == orjson.dumps(want)


def daemon_items(texts: list[str]) -> list[Any]:
    return [{"role": ("user", "assistant")[n % 2], "content": t} for n, t in enumerate(texts)]


# -- the model ---------------------------------------------------------------


@dataclass
class Turn:
    parent: str | None
    owner: str  # the session that wrote it
    kind: str  # turn | compaction
    items: list[Any]
    at: int
    first_kept: str | None = None  # a daemon compaction's first turn kept verbatim
    aborted: bool = False  # a turn the daemon aborted: its inputs are not shown

    @property
    def shown(self) -> list[Any]:
        """The items the reads show: an aborted turn's inputs run again in a later
        turn and are left out (ledger/api/reads.py)."""
        return [i for i in self.items if not (self.aborted and i["role"] == "user")]

    def last_shown(self) -> int:
        """The position in `items` of the last item shown."""
        return max(n for n, i in enumerate(self.items) if not self.aborted or i["role"] != "user")


@dataclass
class Session:
    kind: str
    origin: str
    created_at: int
    updated_at: int
    head: str | None = None
    turns: int | None = 0  # None: not known (after a fork: see the module's docstring)
    title: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    parent_session: str | None = None
    parent_turn: str | None = None


class Model:
    def __init__(self) -> None:
        self.sessions: dict[str, Session] = {}
        self.turns: dict[str, Turn] = {}

    def thread(self, head: str | None) -> list[str]:
        """The turn ids a session with this head reads, oldest first: from the latest
        compaction, then the turns it kept but for compactions, then the turns since
        (ledger/api/reads.py)."""
        out: list[str] = []
        while head is not None:
            turn = self.turns[head]
            if turn.kind == "compaction":
                kept = [t for t in self.kept(head) if self.turns[t].kind != "compaction"]
                return [head, *kept[::-1], *out[::-1]]
            out.append(head)
            head = turn.parent
        return out[::-1]

    def kept(self, compaction: str) -> list[str]:
        """The turns `compaction` kept verbatim, newest first, compactions among them."""
        first_kept, out = self.turns[compaction].first_kept, []
        head = self.turns[compaction].parent if first_kept is not None else None
        while head is not None:
            out.append(head)
            if head == first_kept:
                break
            head = self.turns[head].parent
        return out

    def chain_length(self, head: str | None) -> int:
        n = 0
        while head is not None:
            n, head = n + 1, self.turns[head].parent
        return n

    def items(self, label: str) -> list[Any]:
        return [i for t in self.thread(self.sessions[label].head) for i in self.turns[t].shown]

    def info(self, label: str) -> Session:
        return self.sessions[label]

    def blockers(self, label: str) -> bool:
        mine = {t for t, turn in self.turns.items() if turn.owner == label}
        return any(
            turn.owner != label and turn.parent in mine for turn in self.turns.values()
        ) or any(s.head in mine for name, s in self.sessions.items() if name != label)


# -- driving a SyncStore or an async Store alike --------------------------------


class Driver:
    """The store under test, its calls made blocking."""

    def __init__(self, path: Path, clock: Callable[[], int], asynchronous: bool) -> None:
        self.path = path
        self._clock = clock
        self._async = asynchronous
        self._stack = ExitStack()
        self._portal = (
            self._stack.enter_context(anyio.from_thread.start_blocking_portal())
            if asynchronous
            else None
        )
        self.store: Any = self._open()

    def _open(self) -> Any:
        if self._portal is None:
            return SyncStore.open(self.path, clock=self._clock)
        return self._portal.call(functools.partial(Store.open, self.path, clock=self._clock))

    def __call__(self, name: str, *args: Any, **kwargs: Any) -> Any:
        method = getattr(self.store, name)
        if self._portal is None:
            return method(*args, **kwargs)
        return self._portal.call(functools.partial(method, *args, **kwargs))

    def list_sessions(self, **filters: Any) -> Any:
        return self("list_sessions", **filters)

    def close(self) -> None:
        if self._portal is None:
            self.store.close()
        else:
            self._portal.call(self.store.aclose)

    def reopen(self) -> None:
        self.close()
        self.store = self._open()

    def shutdown(self) -> None:
        try:
            self.close()
        finally:
            self._stack.close()


class StoreMachine(RuleBasedStateMachine):
    asynchronous = False

    def __init__(self) -> None:
        super().__init__()
        self.folder = Path(tempfile.mkdtemp(prefix="store-model-"))
        self.now = 1_000
        self.model = Model()
        self.store = Driver(self.folder / "ledger.db", self.clock, self.asynchronous)
        self.exports = 0

    def clock(self) -> int:
        return self.now

    def tick(self) -> None:
        self.now += 1

    def teardown(self) -> None:
        try:
            self.store.shutdown()
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)

    # -- what the model expects of an answer ----------------------------------

    def check_info(self, got: SessionInfo, label: str) -> None:
        want = self.model.sessions[label]
        assert got.id == label
        assert (got.kind, got.origin, got.status) == (want.kind, want.origin, "active")
        assert got.head_turn == want.head, (got.head_turn, want.head)
        assert got.title == want.title
        assert same(got.metadata, want.metadata)
        assert (got.created_at, got.updated_at) == (want.created_at, want.updated_at), label
        assert (got.parent_session, got.parent_turn) == (want.parent_session, want.parent_turn)
        if want.turns is not None:
            assert got.turns == want.turns == self.model.chain_length(want.head), label

    def expect_missing(self, call: str, *args: Any, **kwargs: Any) -> None:
        with pytest.raises(NotFound):
            self.store(call, *args, **kwargs)

    def learn_put_turns(self, label: str, turns: list[list[Any]]) -> None:
        """Register a new chain the store wrote, its ids read from the file."""
        with ledger_db.connect(self.store.path) as conn:
            ids = thread_ids(conn, self.store("get", label).head_turn)
        conn.close()
        parent = None
        for turn_id, items in zip(ids, turns, strict=True):
            self.model.turns[turn_id] = Turn(parent, label, "turn", items, self.now)
            parent = turn_id

    # -- sessions -------------------------------------------------------------

    @rule(label=st.sampled_from(LABELS) | st.none(), title=TITLE, metadata=METADATA)
    def create(self, label: str | None, title: str | None, metadata: dict[str, Any] | None) -> None:
        self.tick()
        if label in self.model.sessions:
            with pytest.raises(Conflict):
                self.store("create", label, title=title, metadata=metadata)
            return
        got = self.store("create", label, title=title, metadata=metadata)
        assert label is None or got.id == label
        self.model.sessions[got.id] = Session(
            "library", "library", self.now, self.now, title=title, metadata=metadata or {}
        )
        self.check_info(got, got.id)

    @rule(label=st.sampled_from(LABELS))
    def get(self, label: str) -> None:
        if label not in self.model.sessions:
            self.expect_missing("get", label)
            return
        self.check_info(self.store("get", label), label)

    @rule(
        kind=st.none() | st.sampled_from(["library", "fork", "import", "dm"]),
        title_contains=st.none() | st.text(alphabet="aAbü日 ", max_size=2),
        updated_after=st.none() | st.integers(999, 1_200),
        limit=st.integers(1, 4),
    )
    def list_sessions(
        self, kind: str | None, title_contains: str | None, updated_after: int | None, limit: int
    ) -> None:
        def matches(s: Session) -> bool:
            # SQLite's lower() folds ASCII letters only (ledger/api/reads.py).
            title = _ascii_lower(s.title or "")
            return (
                (kind is None or s.kind == kind)
                and (title_contains is None or _ascii_lower(title_contains) in title)
                and (updated_after is None or s.updated_at > updated_after)
            )

        want = sorted(label for label, s in self.model.sessions.items() if matches(s))
        seen: list[str] = []
        cursor = None
        while True:
            page = self.store.list_sessions(
                kind=kind,
                title_contains=title_contains,
                updated_after=updated_after,
                cursor=cursor,
                limit=limit,
            )
            assert len(page.sessions) <= limit
            for info in page.sessions:
                self.check_info(info, info.id)
            seen += [s.id for s in page.sessions]
            if page.next_cursor is None:
                break
            assert page.next_cursor == seen[-1]
            cursor = page.next_cursor
        assert seen == want

    @rule(
        label=st.sampled_from(LABELS),
        turns=st.lists(st.lists(ITEM, max_size=2), max_size=3),
        title=TITLE,
        metadata=METADATA,
    )
    def put(
        self,
        label: str,
        turns: list[list[Any]],
        title: str | None,
        metadata: dict[str, Any] | None,
    ) -> None:
        self.tick()
        got = self.store("put", label, turns, title=title, metadata=metadata)
        session = self.model.sessions.get(label)
        if session is None:
            session = Session("library", "library", self.now, self.now, title=title)
            session.metadata = metadata or {}
            self.model.sessions[label] = session
        else:
            session.title = title if title is not None else session.title
            session.metadata = metadata if metadata is not None else session.metadata
        session.updated_at, session.turns = self.now, len(turns)
        self.learn_put_turns(label, turns)
        session.head = got.head_turn
        self.check_info(got, label)

    @rule(label=st.sampled_from(LABELS), title=TITLE, metadata=METADATA)
    def set_title(self, label: str, title: str | None, metadata: dict[str, Any] | None) -> None:
        self.tick()
        if label not in self.model.sessions:
            self.expect_missing("set_title", label, title, metadata=metadata)
            return
        self.store("set_title", label, title, metadata=metadata)
        session = self.model.sessions[label]
        # None keeps what is there (ledger/api/writes.py set_title).
        session.title = title if title is not None else session.title
        session.metadata = metadata if metadata is not None else session.metadata
        session.updated_at = self.now

    @rule(label=st.sampled_from(LABELS))
    def delete(self, label: str) -> None:
        if label not in self.model.sessions:
            self.expect_missing("delete", label)
            return
        if self.model.blockers(label):
            with pytest.raises(Conflict):
                self.store("delete", label)
            return
        self.store("delete", label)
        del self.model.sessions[label]
        for turn_id in [t for t, turn in self.model.turns.items() if turn.owner == label]:
            del self.model.turns[turn_id]

    # -- items and turns ------------------------------------------------------

    @rule(label=st.sampled_from(LABELS), items=ITEMS, create=st.booleans())
    def append(self, label: str, items: list[Any], create: bool) -> None:
        self.tick()
        session = self.model.sessions.get(label)
        if session is None and not create:
            self.expect_missing("append", label, items, create=False)
            return
        turn_id = self.store("append", label, items, create=create)
        if session is None:
            session = self.model.sessions[label] = Session("library", "library", self.now, self.now)
        assert turn_id not in self.model.turns
        self.model.turns[turn_id] = Turn(session.head, label, "turn", items, self.now)
        session.head, session.updated_at = turn_id, self.now
        if session.turns is not None:
            session.turns += 1

    @rule(
        label=st.sampled_from(LABELS),
        bad=st.sampled_from([object(), {1, 2}, 2**64, {"k": b"bytes"}, {1: "key"}]),
        at=st.integers(0, 2),
    )
    def append_what_json_cannot_hold(self, label: str, bad: Any, at: int) -> None:
        items: list[Any] = ["fine", {"also": "fine"}]
        items.insert(at, bad)
        with pytest.raises(TypeError, match=f"item {at} "):
            self.store("append", label, items)

    @rule(label=st.sampled_from(LABELS), texts=st.lists(st.text(max_size=6), max_size=3))
    def daemon_writes_a_turn(self, label: str, texts: list[str]) -> None:
        session = self.model.sessions.get(label)
        if session is None:
            return
        self.tick()
        turn_id = daemon_turn(self.store.path, label, texts, self.now)
        self.model.turns[turn_id] = Turn(session.head, label, "turn", daemon_items(texts), self.now)
        session.head, session.updated_at = turn_id, self.now
        if session.turns is not None:
            session.turns += 1

    @rule(
        label=st.sampled_from(LABELS),
        inputs=st.lists(st.text(max_size=6), min_size=1, max_size=3),
        output=st.text(max_size=6),
    )
    def daemon_aborts_a_turn(self, label: str, inputs: list[str], output: str) -> None:
        """A turn the daemon aborted (an interrupt, or a crash it recovered from):
        its inputs, then its partial reply if it began one (ledger/turns.py)."""
        session = self.model.sessions.get(label)
        if session is None:
            return
        self.tick()
        turn_id = daemon_aborted_turn(self.store.path, label, inputs, output, self.now)
        items = [{"role": "user", "content": t} for t in inputs]
        items += [{"role": "assistant", "content": output}] if output else []
        self.model.turns[turn_id] = Turn(
            session.head, label, "turn" if len(inputs) == 1 else "queue_batch", items, self.now,
            aborted=True,
        )  # fmt: skip
        session.head, session.updated_at = turn_id, self.now
        if session.turns is not None:
            session.turns += 1

    @rule(label=st.sampled_from(LABELS), data=st.data(), summary=st.text(max_size=6))
    def daemon_compacts(self, label: str, data: st.DataObject, summary: str) -> None:
        """A compaction as the daemon's compactor writes one (broker/mailbox/
        compactor.py): its plan summarizes the oldest turns of its context and keeps
        the newest (none, or from any turn but the first)."""
        session = self.model.sessions.get(label)
        if session is None:
            return
        view = self.model.thread(session.head)
        blocks = [t for t in view if self.model.turns[t].shown]
        if view and self.model.turns[view[0]].kind == "compaction":
            blocks = [t for t in blocks if t != view[0]]  # the summary is not a block
        if not blocks:
            return  # nothing to summarize: the daemon writes no compaction
        first_kept = data.draw(st.sampled_from([None, *blocks[1:]]))
        self.tick()
        turn_id = daemon_compaction(self.store.path, label, summary, first_kept, self.now)
        item = {"role": "assistant", "content": summary}
        self.model.turns[turn_id] = Turn(
            session.head, label, "compaction", [item], self.now, first_kept
        )
        session.head, session.updated_at = turn_id, self.now
        if session.turns is not None:
            session.turns += 1

    @rule(label=st.sampled_from(LABELS), n=st.integers(-1, 12))
    def last(self, label: str, n: int) -> None:
        if label not in self.model.sessions:
            self.expect_missing("last", label, n)
            return
        whole = self.model.items(label)
        assert same(self.store("last", label, n), whole[-n:] if n > 0 else [])

    @rule(
        label=st.sampled_from(LABELS),
        start=st.integers(-6, 6),
        stop=st.none() | st.integers(-6, 6),
    )
    def items_range(self, label: str, start: int, stop: int | None) -> None:
        if label not in self.model.sessions:
            self.expect_missing("items", label, start, stop)
            return
        assert same(self.store("items", label, start, stop), self.model.items(label)[start:stop])

    @rule(label=st.sampled_from(LABELS))
    def pop(self, label: str) -> None:
        self.tick()
        session = self.model.sessions.get(label)
        if session is None:
            self.expect_missing("pop", label)
            return
        before = self.model.items(label)
        got = self.store("pop", label)
        if not before:
            assert got is None
            assert self.store("get", label).head_turn == session.head  # nothing moved
            return
        assert same(got, before[-1])
        self.model_pop(label, self.store("get", label).head_turn)
        assert same(self.model.items(label), before[:-1])

    def model_pop(self, label: str, new_head: str | None) -> None:
        """The head moves back past the last item (ledger/api/writes.py): to
        the parent of the turn that held it alone, else to a copy of that turn
        without it."""
        session = self.model.sessions[label]
        turn_id, skipped = session.head, 0
        while turn_id is not None:
            turn = self.model.turns[turn_id]
            if turn.shown or turn.kind == "compaction":
                break
            turn_id, skipped = turn.parent, skipped + 1
        assert turn_id is not None
        turn = self.model.turns[turn_id]
        if turn.kind == "compaction" and self.model_pop_kept(label, turn_id, new_head, skipped):
            return
        if len(turn.items) == 1 and turn.kind != "compaction":
            assert new_head == turn.parent
            delta = 1 + skipped
        else:
            assert new_head is not None and new_head not in self.model.turns
            # The copy keeps what the reads do not show (ledger/api/writes.py).
            rest = turn.items[:]
            del rest[turn.last_shown()]
            self.model.turns[new_head] = replace(turn, owner=label, items=rest, at=self.now)
            delta = skipped
        session.head, session.updated_at = new_head, self.now
        if session.turns is not None:
            session.turns = max(session.turns - delta, 0)

    def model_pop_kept(
        self, label: str, compaction: str, new_head: str | None, skipped: int
    ) -> bool:
        """A pop from the turns a daemon compaction kept (ledger/api/writes.py Rule
        2b): the new head is a copy of the compaction on the newest kept turn holding
        an item, shortened by a copy, or on its parent; False if none holds one."""
        kept = self.model.kept(compaction)
        holding = [t for t in kept if self.model.turns[t].kind != "compaction"]
        holding = [t for t in holding if self.model.turns[t].shown]
        if not holding:
            return False
        turn_id, original = holding[0], self.model.turns[compaction]
        dropped = kept.index(turn_id)  # the kept turns after it, left off
        turn = self.model.turns[turn_id]
        assert new_head is not None and new_head not in self.model.turns
        with ledger_db.connect(self.store.path) as conn:
            (base,) = conn.execute(
                "SELECT parent_id FROM turns WHERE id = ?", (new_head,)
            ).fetchone()
        conn.close()
        if len(turn.items) > 1:
            assert base not in self.model.turns
            rest = turn.items[:]
            del rest[turn.last_shown()]
            self.model.turns[base] = replace(turn, owner=label, items=rest, at=self.now)
            first = base if turn_id == original.first_kept else original.first_kept
        else:
            assert base == turn.parent
            dropped += 1
            first = None if turn_id == original.first_kept else original.first_kept
        self.model.turns[new_head] = replace(
            original, parent=base, owner=label, at=self.now, first_kept=first
        )
        session = self.model.sessions[label]
        session.head, session.updated_at = new_head, self.now
        if session.turns is not None:
            session.turns = max(session.turns - skipped - dropped, 0)
        return True

    @rule(label=st.sampled_from(LABELS))
    def clear(self, label: str) -> None:
        self.tick()
        session = self.model.sessions.get(label)
        if session is None:
            self.expect_missing("clear", label)
            return
        self.store("clear", label)
        if session.head is not None:
            session.head, session.updated_at, session.turns = None, self.now, 0
        elif session.turns is None:
            pass  # nothing moved, nothing counted
        assert self.store("items", label) == []

    @rule(data=st.data(), new_label=st.sampled_from(LABELS) | st.none())
    def fork(self, data: st.DataObject, new_label: str | None) -> None:
        self.tick()
        known = sorted(self.model.turns)
        turn_id = data.draw(st.sampled_from(known) if known else st.just("no-such-turn"))
        if turn_id not in self.model.turns:
            self.expect_missing("fork", turn_id, new_label)
            return
        if new_label in self.model.sessions:
            with pytest.raises(Conflict):
                self.store("fork", turn_id, new_label)
            return
        got = self.store("fork", turn_id, new_label)
        assert new_label is None or got.id == new_label
        self.model.sessions[got.id] = Session(
            "fork",
            "fork",
            self.now,
            self.now,
            head=turn_id,
            turns=None,
            parent_session=self.model.turns[turn_id].owner,
            parent_turn=turn_id,
        )
        self.check_info(got, got.id)

    @rule(label=st.sampled_from(LABELS), summary=ITEMS)
    def compact(self, label: str, summary: list[Any]) -> None:
        self.tick()
        session = self.model.sessions.get(label)
        if session is None:
            self.expect_missing("compact", label, lambda items: summary)
            return
        given: list[list[Any]] = []

        def summarizer(items: list[Any]) -> list[Any]:
            given.append(items)
            return summary

        async def summarize_async(items: list[Any]) -> list[Any]:
            return summarizer(items)

        # The async Store takes either kind (store.py Summarizer).
        turn_id = self.store("compact", label, summarize_async if self.asynchronous else summarizer)
        assert len(given) == 1 and same(given[0], self.model.items(label))
        self.model.turns[turn_id] = Turn(session.head, label, "compaction", summary, self.now)
        session.head, session.updated_at = turn_id, self.now
        if session.turns is not None:
            session.turns += 1

    @rule(label=st.sampled_from(LABELS), new_label=st.sampled_from(LABELS) | st.none())
    def export_then_import(self, label: str, new_label: str | None) -> None:
        self.tick()
        session = self.model.sessions.get(label)
        if session is None:
            self.expect_missing("export_jsonl", label)
            return
        data = self.store("export_jsonl", label)
        self.exports += 1
        fresh_path = self.folder / f"fresh-{self.exports}.db"
        with SyncStore.open(fresh_path) as fresh:
            copy = fresh.import_jsonl(data, "copy")
            assert same(fresh.items("copy"), self.model.items(label))
            assert copy.turns == self.model.chain_length(session.head)
        fresh_path.unlink()
        if new_label in self.model.sessions:
            with pytest.raises(Conflict):
                self.store("import_jsonl", data, new_label)
            return
        got = self.store("import_jsonl", data, new_label)
        assert new_label is None or got.id == new_label
        # The copy is a new chain of new turns, as long as the whole original one.
        with ledger_db.connect(self.store.path) as conn:
            ids = thread_ids(conn, got.head_turn)
        conn.close()
        originals = self.model_chain(session.head)
        assert len(ids) == len(originals)
        parent = None
        copies = dict(zip(originals, ids, strict=True))
        for copy_id, original in zip(ids, originals, strict=True):
            turn = self.model.turns[original]
            first_kept = None if turn.first_kept is None else copies[turn.first_kept]
            self.model.turns[copy_id] = replace(
                turn, parent=parent, owner=got.id, first_kept=first_kept
            )
            parent = copy_id
        self.model.sessions[got.id] = Session(
            "import", "import", self.now, self.now, head=got.head_turn, turns=len(ids)
        )
        self.check_info(got, got.id)

    def model_chain(self, head: str | None) -> list[str]:
        out: list[str] = []
        while head is not None:
            out.append(head)
            head = self.model.turns[head].parent
        return out[::-1]

    @rule()
    def close_and_reopen(self) -> None:
        self.store.reopen()

    # -- the whole state, after every step ------------------------------------

    @invariant()
    def every_session_reads_as_the_model_says(self) -> None:
        for label in self.model.sessions:
            self.check_info(self.store("get", label), label)
            whole = self.model.items(label)
            assert same(self.store("items", label), whole), label
            assert same(self.store("last", label, 3), whole[-3:]), label
            turns = self.store("turns", label)
            thread = self.model.thread(self.model.sessions[label].head)
            assert [t.id for t in turns] == thread
            for got in turns:
                want = self.model.turns[got.id]
                assert (got.session, got.type, got.created_at) == (want.owner, want.kind, want.at)
                assert same(got.items, want.shown)


def _ascii_lower(text: str) -> str:
    return "".join(c.lower() if c.isascii() else c for c in text)


class AsyncStoreMachine(StoreMachine):
    asynchronous = True


# Under 20 s a machine on a loaded machine; STORE_MODEL_EXAMPLES=300 and
# STORE_MODEL_STEPS=80 hunt longer.
MACHINE_SETTINGS = settings(
    max_examples=int(os.environ.get("STORE_MODEL_EXAMPLES", "25")),
    stateful_step_count=int(os.environ.get("STORE_MODEL_STEPS", "30")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

TestSyncStoreModel = StoreMachine.TestCase
TestSyncStoreModel.settings = MACHINE_SETTINGS
TestAsyncStoreModel = AsyncStoreMachine.TestCase
TestAsyncStoreModel.settings = MACHINE_SETTINGS


# -- what the machines found, kept as plain examples --------------------------


def test_an_export_holding_a_compaction_imports(tmp_path: Path) -> None:
    with SyncStore.open(tmp_path / "ledger.db") as store:
        store.append("s", ["a", "b"])
        store.compact("s", lambda items: ["summary"])
        store.append("s", ["c"])
        copy = store.import_jsonl(store.export_jsonl("s"), "copy")
        assert store.items("copy") == ["summary", "c"]
        assert [t.type for t in store.turns("copy")] == ["compaction", "turn"]
        assert copy.turns == 3


def test_a_pop_of_a_summary_does_not_bring_back_what_it_summarized(tmp_path: Path) -> None:
    with SyncStore.open(tmp_path / "ledger.db") as store:
        store.append("s", ["a", "b"])
        store.compact("s", lambda items: ["one", "two"])
        assert store.pop("s") == "two"
        assert store.items("s") == ["one"]
        with ledger_db.connect(tmp_path / "ledger.db") as conn:  # what the daemon reads
            summary = conn.execute(
                "SELECT summary FROM compactions WHERE turn_id = ?", (store.get("s").head_turn,)
            ).fetchone()
        conn.close()
        assert summary == ('["one"]',)
        assert store.pop("s") == "one"
        assert store.items("s") == [] and store.last("s", 5) == []
        assert store.pop("s") is None and store.items("s") == []
        store.append("s", ["c"])
        assert store.items("s") == ["c"]


def test_a_pop_after_an_empty_summary_finds_nothing(tmp_path: Path) -> None:
    with SyncStore.open(tmp_path / "ledger.db") as store:
        store.append("s", ["a", "b"])
        store.compact("s", lambda items: [])
        head = store.get("s").head_turn
        assert store.pop("s") is None
        assert store.items("s") == [] and store.get("s").head_turn == head


def test_a_message_written_after_a_delete_is_indexed_and_can_be_deleted(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with SyncStore.open(path) as store:
        store.append("a", ["zebra"])
        store.append("b", ["yak"])
        store.delete("b")  # the highest message id goes, and SQLite gives it out again
        store.append("c", ["zebra crossing"])
        store.delete("c")  # raised "database disk image is malformed" (FTS5)
        store.append("d", ["zebra crossing"])
    with ledger_db.connect(path) as conn:
        hits = conn.execute(
            "SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'crossing'"
        ).fetchall()
        conn.execute("INSERT INTO messages_fts (messages_fts) VALUES ('integrity-check')")
    conn.close()
    assert len(hits) == 1
