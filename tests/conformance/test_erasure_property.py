"""A property of `entity.erase`: over random histories (DMs, groups, merges, forks,
workers, file snapshots), erasing one person leaves nothing of theirs readable by any
read of the port, and every read of everyone else's sessions answers as before."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.identity import SessionSpec
from ledger.port.errors import NotFound
from ledger.port.protocols import InboundRecord, LedgerPort, Request
from ledger.port.records import Limits
from ledger.sqlite.store import Ledger
from tests.conformance.records import DM, inbound, tick, turn

GROUP = SessionSpec("group:{channel}:{peer}", None)
PEOPLE = ("p0", "p1", "p2", "p3")
LIMITS = Limits(max_depth=3, max_children=50, timeout_ms=60_000)

Action = tuple[str, int, int]
actions = st.lists(
    st.tuples(
        st.sampled_from(["dm", "dm", "group", "merge", "fork", "worker", "file"]),
        st.integers(0, len(PEOPLE) - 1),
        st.integers(0, len(PEOPLE) - 1),
    ),
    min_size=3,
    max_size=14,
)


@dataclass
class Model:
    """What the history made, as the test knows it."""

    entity: dict[str, str] = field(default_factory=dict)  # person -> their first entity
    parent: dict[str, str] = field(default_factory=dict)  # person -> whom they merged into
    sessions: dict[str, set[str]] = field(default_factory=dict)  # person -> their sessions
    words: dict[str, set[str]] = field(default_factory=dict)  # person -> words they wrote
    last_turn: dict[str, tuple[str, str]] = field(default_factory=dict)  # person -> (session, turn)
    n: int = 0

    def root(self, person: str) -> str:
        while person in self.parent:
            person = self.parent[person]
        return person

    def word(self, person: str) -> str:
        self.n += 1
        w = f"zq{person}w{self.n}x"
        self.words.setdefault(person, set()).add(w)
        return w


async def _turn(port: LedgerPort, session: str, text: str, files: bool) -> str:
    head = (await port.session_start(session)).start.head
    rec = turn(session, head, await port.open_items(session), "noted")
    if files:
        rec.events = [("file", {"path": "f.txt", "op": "write", "content": f"{text}\n"})]
    await port.submit_turn(rec).result()
    return rec.turn_id


async def _play(port: LedgerPort, history: list[Action], m: Model) -> None:
    for kind, a, b in history:
        person = PEOPLE[a]
        if kind in ("dm", "file"):
            text = m.word(person)
            rec = inbound(f"m{m.n}", sender=person, text=text)
            acc = await port.submit_inbound(rec, DM, tick()).result()
            assert acc.entity is not None
            m.entity.setdefault(person, acc.entity)
            m.sessions.setdefault(person, set()).add(acc.session)
            turn_id = await _turn(port, acc.session, text, kind == "file")
            m.last_turn[person] = (acc.session, turn_id)
        elif kind == "group":
            text = m.word(person)
            rec = InboundRecord(
                "chat", f"m{m.n}", person, None, "group", "room", None, text, None, None, None
            )
            acc = await port.submit_inbound(rec, GROUP, tick()).result()
            m.entity.setdefault(person, str(acc.entity))
            await _turn(port, acc.session, text, False)
        elif kind == "merge" and a != b and PEOPLE[b] in m.entity and person in m.entity:
            if m.root(person) != m.root(PEOPLE[b]):
                await port.merge_entities(m.entity[person], m.entity[PEOPLE[b]], tick())
                m.parent[m.root(person)] = m.root(PEOPLE[b])
        elif kind == "fork" and person in m.last_turn:
            label = await port.fork(m.last_turn[person][1], None, tick())
            m.sessions[person].add(label)
        elif kind == "worker" and person in m.last_turn:
            task = m.word(person)
            done = await port.dispatch(
                parent=m.last_turn[person][0], parent_turn=None, tool_call=None,
                target={"kind": "new_session"}, task=task, persona=None, limits=LIMITS,
                now=tick(),
            )  # fmt: skip
            m.sessions[person].add(done.session)
            await _turn(port, done.session, task, False)


async def _reads(port: LedgerPort, sessions: set[str], words: set[str]) -> dict[str, Any]:
    """Every read of these sessions and words the port offers."""
    out: dict[str, Any] = {}
    for s in sorted(sessions):
        out[f"show {s}"] = await port.session_show(s, 1000)
        out[f"files {s}"] = await port.file_list(s)
        out[f"pad {s}"] = await port.scratchpad_get(s)
        out[f"range {s}"] = await port.recall(Request("range", s, 1000))
    for w in sorted(words):
        out[f"search {w}"] = [(h.session, h.turn) for h in await port.recall_search(w, None, 50)]
    return out


def raw(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(folder.glob("l.db*")))


async def _check(history: list[Action]) -> None:
    with tempfile.TemporaryDirectory(dir="/tmp") as work:
        async with Ledger.open(Path(work) / "l.db", writer="thread", check_s=0) as port:
            m = Model()
            await _play(port, history, m)
            if "p0" not in m.entity:
                return
            erased = {p for p in m.entity if m.root(p) == m.root("p0")}
            kept = [p for p in m.entity if p not in erased]
            theirs = set().union(*(m.sessions.get(p, set()) for p in erased))
            others = set().union(*(m.sessions.get(p, set()) for p in kept)) - theirs
            their_words = set().union(*(m.words.get(p, set()) for p in erased))
            other_words = set().union(*(m.words.get(p, set()) for p in kept))
            before = await _reads(port, others, other_words)

            await port.erase_entity(m.entity["p0"], m.entity["p0"], tick())

            assert await _reads(port, others, other_words) == before
            for s in theirs:
                with pytest.raises(NotFound):
                    await port.session_show(s, 10)
            listed = {r["label"] for r in await port.sessions_list(None, 10_000)}
            assert not listed & theirs
            for w in their_words:
                assert await port.recall_search(w, None, 50) == []
            for p in erased:
                with pytest.raises(NotFound):
                    await port.contact_show("chat", p)
            group = [
                r["label"] for r in await port.sessions_list(None, 100) if r["kind"] == "group"
            ]
            for g in group:
                said = str(await port.recall(Request("range", g, 1000)))
                assert not any(w in said for w in their_words)
            data = raw(Path(work))
            assert not any(w.encode() in data for w in their_words)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(actions)
def test_erasing_one_person_leaves_the_others_as_they_were(history: list[Action]) -> None:
    anyio.run(_check, history)
