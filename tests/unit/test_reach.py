"""core/reach.py: `owner_of` and `may_reach` over random histories of people, groups,
merges, forks and workers, against a model kept apart from them: every session
belongs to the set of people it was made for, and sets join only by a merge."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from core.identity import chain_to_root, link_roots
from core.reach import REFUSED, Owner, SessionLink, may_reach, owner_of

# One step of a history: ("person",), ("group",), ("merge", a, b), ("fork", s), ("worker", s).
# Indexes pick among what exists so far (modulo its count).
Step = tuple[str, int, int]
steps = st.lists(
    st.tuples(
        st.sampled_from(["person", "group", "merge", "fork", "worker"]),
        st.integers(0, 1000),
        st.integers(0, 1000),
    ),
    min_size=1,
    max_size=40,
)


@dataclass
class World:
    """The ledger's rows as owner_of reads them, and the model's own answer."""

    sessions: dict[str, SessionLink] = field(default_factory=dict)
    merged_into: dict[str, str | None] = field(default_factory=dict)
    # The model: which group of people (a frozenset of person ids) or group chat owns it.
    model: dict[str, frozenset[str]] = field(default_factory=dict)
    people: dict[str, frozenset[str]] = field(default_factory=dict)  # entity -> its merged set

    def root(self, entity: str) -> str:
        return chain_to_root(entity, lambda e: self.merged_into.get(e))[-1]

    def owner(self, label: str) -> Owner | None:
        return owner_of(label, self.sessions.get, self.root)

    def apply(self, step: Step) -> None:
        kind, i, j = step
        n = len(self.sessions)
        if kind == "person":
            entity = f"e{len(self.merged_into):04d}"
            self.merged_into[entity] = None
            self.people[entity] = frozenset({entity})
            label = f"dm:{entity}"
            self.sessions[label] = SessionLink(label, "dm", entity, None)
            self.model[label] = self.people[entity]
        elif kind == "group":
            label = f"group:sms:{n}"
            self.sessions[label] = SessionLink(label, "group", None, None)
            self.model[label] = frozenset({label})
        elif kind == "merge" and len(self.merged_into) >= 2:
            entities = sorted(self.merged_into)
            a, b = self.root(entities[i % len(entities)]), self.root(entities[j % len(entities)])
            linked = link_roots(a, b)  # `a` merged into `b`
            if linked is not None:
                root, child = linked
                self.merged_into[child] = root
                joined = self.people[a] | self.people[b]
                for e in joined:
                    self.people[e] = joined
                for label, owners in list(self.model.items()):
                    if owners & joined:
                        self.model[label] = joined
        elif kind in ("fork", "worker") and n:
            parent = sorted(self.sessions)[i % n]
            label = f"{kind}:{n}"
            self.sessions[label] = SessionLink(label, kind, None, parent)
            self.model[label] = self.model[parent]


def _world(history: list[Step]) -> World:
    w = World()
    for step in history:
        w.apply(step)
    return w


@given(steps)
@settings(max_examples=300, deadline=None)
def test_a_turn_reaches_exactly_the_sessions_of_its_owner(history: list[Step]) -> None:
    w = _world(history)
    for a in w.sessions:
        for b in w.sessions:
            assert may_reach(w.owner(a), w.owner(b)) == (w.model[a] == w.model[b]), (a, b)
            assert may_reach(w.owner(a), w.owner(b), "any")


@given(steps)
@settings(max_examples=200, deadline=None)
def test_a_session_that_does_not_exist_is_never_reached(history: list[Step]) -> None:
    w = _world(history)
    assert w.owner("dm:nobody") is None
    for a in w.sessions:
        assert not may_reach(w.owner(a), w.owner("dm:nobody"))
        assert not may_reach(w.owner(a), None, "any")


@given(steps, steps)
@settings(max_examples=200, deadline=None)
def test_reach_widens_only_at_a_merge(before: list[Step], after: list[Step]) -> None:
    """Between two points of a history, a pair of existing sessions that did not reach
    each other comes to only through a merge, and one that did never stops."""
    w = _world(before)
    pairs = {(a, b): may_reach(w.owner(a), w.owner(b)) for a in w.sessions for b in w.sessions}
    merged = False
    for step in after:
        w.apply(step)
        merged = merged or step[0] == "merge"
    for (a, b), was in pairs.items():
        now = may_reach(w.owner(a), w.owner(b))
        assert now or not was, (a, b)
        if now and not was:
            assert merged, (a, b)


def test_a_fork_of_a_fork_of_a_dm_belongs_to_the_person() -> None:
    w = _world([("person", 0, 0), ("person", 0, 0), ("fork", 0, 0), ("worker", 2, 0)])
    assert w.owner("worker:3") == ("entity", "e0000") == w.owner("dm:e0000")
    assert not may_reach(w.owner("worker:3"), w.owner("dm:e0001"))


def test_the_refusal_names_nothing() -> None:
    assert "session" in REFUSED and ":" not in REFUSED
