"""`Store.connect` against the in-process Store, call for call: random sequences of
the library's calls run through a real daemon's socket (`store.call`) and on a
`SyncStore` of a second ledger file; every answer must be the same, and every
session must read the same after every step.

The two ledgers give out their own turn ids and their own times, so turn ids
are compared through a map (remote id -> local id) learned as they appear (an
append's answer, each session's turns and head after each step) and checked
once known, and times are not compared. Labels are given, never generated, and
carry the example's number: one daemon serves every example.
(tests/library/test_store_model.py checks the in-process Store against a model.)
"""

from __future__ import annotations

import functools
import itertools
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio.from_thread
import orjson
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from ledger.api import Conflict, NotFound, SessionInfo, Store, SyncStore
from tests.harness import DaemonProcess
from tests.library.daemon_turns import daemon_aborted_turn
from tests.library.test_store_model import ITEM, ITEMS, METADATA, TITLE

LABELS = ["a", "b", "ü x"]
SETTINGS = settings(
    max_examples=int(os.environ.get("REMOTE_MODEL_EXAMPLES", "10")),
    stateful_step_count=int(os.environ.get("REMOTE_MODEL_STEPS", "25")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def same(got: Any, want: Any) -> bool:
    return orjson.dumps(got) == orjson.dumps(want)


class RemoteMachine(RuleBasedStateMachine):
    socket: Path  # the daemon's, set by the test
    ledger: Path  # the daemon's ledger file, set by the test
    backend = "asyncio"  # the client's event loop, set by the test
    examples = itertools.count()

    def __init__(self) -> None:
        super().__init__()
        self.prefix = f"m{next(self.examples)}/"
        self.folder = Path(tempfile.mkdtemp(prefix="remote-model-"))
        self.local = SyncStore.open(self.folder / "ledger.db")
        self.portal_cm = anyio.from_thread.start_blocking_portal(self.backend)
        self.portal = self.portal_cm.__enter__()
        self.remote = self.portal.call(Store.connect, self.socket)
        self.ids: dict[str, str] = {}  # remote turn id -> local turn id
        self.labels: set[str] = set()  # the sessions made (on both, or neither)

    def teardown(self) -> None:
        try:
            self.portal.call(self.remote.aclose)
            self.portal_cm.__exit__(None, None, None)
            self.local.close()
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)

    def label(self, name: str) -> str:
        return self.prefix + name

    def both(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        """The call on each; both raise the same kind of error, or neither does."""
        errors: list[type[Exception] | None] = []
        answers: list[Any] = []
        calls: list[Callable[[], Any]] = [
            lambda: self.portal.call(
                functools.partial(getattr(self.remote, name), *args, **kwargs)
            ),
            lambda: getattr(self.local, name)(*self.local_args(args), **kwargs),
        ]
        for call in calls:
            try:
                answers.append(call())
                errors.append(None)
            except (NotFound, Conflict, TypeError, ValueError) as exc:
                answers.append(exc)
                errors.append(type(exc))
        assert errors[0] == errors[1], (name, args, answers)
        return answers[0], answers[1]

    def local_args(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(self.ids.get(a, a) if isinstance(a, str) else a for a in args)

    def same_id(self, remote: str | None, local: str | None) -> None:
        if remote is None or local is None:
            assert remote is local is None
            return
        known = self.ids.setdefault(remote, local)
        assert known == local, (remote, local, known)

    def same_info(self, remote: SessionInfo, local: SessionInfo) -> None:
        assert (remote.id, remote.title, remote.kind, remote.origin, remote.status) == (
            local.id,
            local.title,
            local.kind,
            local.origin,
            local.status,
        )
        assert remote.turns == local.turns
        assert same(remote.metadata, local.metadata)
        assert remote.parent_session == local.parent_session
        self.same_id(remote.head_turn, local.head_turn)
        self.same_id(remote.parent_turn, local.parent_turn)

    # -- sessions ---------------------------------------------------------

    @rule(name=st.sampled_from(LABELS), title=TITLE, metadata=METADATA)
    def create(self, name: str, title: str | None, metadata: dict[str, Any] | None) -> None:
        remote, local = self.both("create", self.label(name), title=title, metadata=metadata)
        if isinstance(remote, SessionInfo):
            self.labels.add(remote.id)
            self.same_info(remote, local)

    @rule(
        name=st.sampled_from(LABELS),
        turns=st.lists(st.lists(ITEM, max_size=2), max_size=3),
        title=TITLE,
        metadata=METADATA,
    )
    def put(
        self,
        name: str,
        turns: list[list[Any]],
        title: str | None,
        metadata: dict[str, Any] | None,
    ) -> None:
        remote, local = self.both("put", self.label(name), turns, title=title, metadata=metadata)
        assert isinstance(remote, SessionInfo), remote
        self.labels.add(remote.id)
        self.same_turns(remote.id)
        self.same_info(remote, local)

    @rule(name=st.sampled_from(LABELS), title=TITLE, metadata=METADATA)
    def set_title(self, name: str, title: str | None, metadata: dict[str, Any] | None) -> None:
        self.both("set_title", self.label(name), title, metadata=metadata)

    @rule(name=st.sampled_from(LABELS))
    def delete(self, name: str) -> None:
        remote, _ = self.both("delete", self.label(name))
        if not isinstance(remote, Exception):
            self.labels.discard(self.label(name))

    @rule(kind=st.none() | st.sampled_from(["library", "fork", "import"]), limit=st.integers(1, 3))
    def list_sessions(self, kind: str | None, limit: int) -> None:
        # Other examples' sessions are on the daemon too: page through ours alone.
        pages: list[list[SessionInfo]] = [[], []]
        stores: list[Any] = [self.remote, self.local]
        for n, store in enumerate(stores):
            cursor = self.prefix if n == 0 else None
            while True:
                call = functools.partial(store.list_sessions, kind=kind, cursor=cursor, limit=limit)
                page = self.portal.call(call) if n == 0 else call()
                mine = [s for s in page.sessions if s.id.startswith(self.prefix)]
                pages[n] += mine
                if page.next_cursor is None or len(mine) < len(page.sessions):
                    break
                cursor = page.next_cursor
        assert [s.id for s in pages[0]] == [s.id for s in pages[1]]
        for remote, local in zip(*pages, strict=True):
            self.same_info(remote, local)

    # -- items and turns --------------------------------------------------

    @rule(name=st.sampled_from(LABELS), items=ITEMS, create=st.booleans())
    def append(self, name: str, items: list[Any], create: bool) -> None:
        remote, local = self.both("append", self.label(name), items, create=create)
        if isinstance(remote, str):
            self.labels.add(self.label(name))
            self.same_id(remote, local)

    @rule(
        name=st.sampled_from(LABELS),
        inputs=st.lists(st.text(max_size=4), min_size=1, max_size=2),
        output=st.text(max_size=4),
    )
    def daemon_aborts_a_turn(self, name: str, inputs: list[str], output: str) -> None:
        """A turn the daemon aborted, written into each ledger as the daemon writes
        one: both must leave its inputs out alike (ledger/api/reads.py)."""
        label = self.label(name)
        if label not in self.labels:
            return
        remote = daemon_aborted_turn(self.ledger, label, inputs, output, 1)
        local = daemon_aborted_turn(self.folder / "ledger.db", label, inputs, output, 1)
        self.same_id(remote, local)

    @rule(name=st.sampled_from(LABELS), at=st.integers(0, 1))
    def append_what_json_cannot_hold(self, name: str, at: int) -> None:
        items: list[Any] = ["fine"]
        items.insert(at, {1, 2})
        remote, _ = self.both("append", self.label(name), items)
        assert isinstance(remote, TypeError)

    @rule(name=st.sampled_from(LABELS), n=st.integers(-1, 8))
    def last(self, name: str, n: int) -> None:
        remote, local = self.both("last", self.label(name), n)
        assert isinstance(remote, Exception) or same(remote, local)

    @rule(
        name=st.sampled_from(LABELS),
        start=st.integers(-4, 4),
        stop=st.none() | st.integers(-4, 4),
    )
    def items(self, name: str, start: int, stop: int | None) -> None:
        remote, local = self.both("items", self.label(name), start, stop)
        assert isinstance(remote, Exception) or same(remote, local)

    @rule(name=st.sampled_from(LABELS))
    def pop(self, name: str) -> None:
        remote, local = self.both("pop", self.label(name))
        assert isinstance(remote, Exception) or same(remote, local)

    @rule(name=st.sampled_from(LABELS))
    def clear(self, name: str) -> None:
        self.both("clear", self.label(name))

    @rule(data=st.data(), new=st.sampled_from(LABELS))
    def fork(self, data: st.DataObject, new: str) -> None:
        known = sorted(self.ids)
        turn = data.draw(st.sampled_from(known) if known else st.just("no-such-turn"))
        remote, local = self.both("fork", turn, self.label(new))
        if isinstance(remote, SessionInfo):
            self.labels.add(remote.id)
            self.same_info(remote, local)

    @rule(name=st.sampled_from(LABELS), summary=ITEMS)
    def compact(self, name: str, summary: list[Any]) -> None:
        given: list[list[Any]] = []

        def summarizer(items: list[Any]) -> list[Any]:
            given.append(items)
            return summary

        remote, local = self.both("compact", self.label(name), summarizer)
        if isinstance(remote, str):
            assert len(given) == 2 and same(given[0], given[1])
            self.same_id(remote, local)

    @rule(name=st.sampled_from(LABELS), new=st.sampled_from(LABELS))
    def export_then_import(self, name: str, new: str) -> None:
        remote, local = self.both("export_jsonl", self.label(name))
        if isinstance(remote, Exception):
            return
        lines = [orjson.loads(line) for line in remote.splitlines()]
        mine = [orjson.loads(line) for line in local.splitlines()]
        for line in (*lines, *mine):
            line.pop("exported_at", None)
            for key in ("id", "started_at", "completed_at", "created_at"):
                line.pop(key, None)
            for message in line.get("messages", []):
                message.pop("created_at", None)
            if isinstance(line.get("compaction"), dict):
                line["compaction"].pop("created_at", None)
        assert same(lines, mine)
        # Each imports the other's export: the files are one format.
        imported: list[Any] = [None, None]
        pairs: list[tuple[Any, bytes]] = [(self.remote, local), (self.local, remote)]
        for n, (store, data) in enumerate(pairs):
            call = functools.partial(store.import_jsonl, data, self.label(new))
            try:
                imported[n] = self.portal.call(call) if n == 0 else call()
            except Conflict as exc:
                imported[n] = exc
        assert type(imported[0]) is type(imported[1])
        if isinstance(imported[0], SessionInfo):
            self.labels.add(imported[0].id)
            self.same_turns(imported[0].id)
            self.same_info(imported[0], imported[1])

    # -- the whole state, after every step --------------------------------

    def same_turns(self, label: str) -> None:
        remote, local = self.both("turns", label)
        assert len(remote) == len(local), label
        for mine, theirs in zip(local, remote, strict=True):
            self.same_id(theirs.id, mine.id)
            assert (theirs.session, theirs.type) == (mine.session, mine.type)
            assert same(theirs.items, mine.items)

    @invariant()
    def every_session_reads_the_same(self) -> None:
        for label in sorted(self.labels):
            self.same_turns(label)  # first: it learns the ids `get` compares
            remote, local = self.both("get", label)
            self.same_info(remote, local)
            remote, local = self.both("items", label)
            assert same(remote, local), label
            remote, local = self.both("last", label, 3)
            assert same(remote, local), label


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_store_connect_answers_as_the_store_does(daemon: DaemonProcess, backend: str) -> None:
    RemoteMachine.socket, RemoteMachine.backend = daemon.socket, backend
    RemoteMachine.ledger = daemon.ledger
    run_state_machine_as_test(RemoteMachine, settings=SETTINGS)
