"""Identity: the ledger's union-find over entities, and the core's session keys and
label resolution, stepped synchronously."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.identity import (
    DmCandidate,
    Resolved,
    Route,
    SessionRef,
    build_session_key,
    chain_to_root,
    link_roots,
    pick_primary,
    resolve_label,
)
from ledger.db import migrate
from ledger.ingest import IdentityCache, find_root
from ledger.merge import merge_entities

NODES = [f"n{i:02d}" for i in range(12)]  # zero-padded, so string order is index order

node = st.sampled_from(NODES)
merges = st.lists(st.tuples(node, node), max_size=30)


def _template() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    migrate(conn)
    return conn


TEMPLATE = _template()  # migrated once; each case copies it


class Entities:
    """The ledger's union-find: the `entities` table, `find_root` and `merge_entities`
    run on a fresh in-memory ledger holding one entity per node."""

    def __init__(self, parent: Mapping[str, str] | None = None) -> None:
        self.conn = sqlite3.connect(":memory:", isolation_level=None)
        TEMPLATE.backup(self.conn)
        self.conn.execute("PRAGMA foreign_keys = ON")
        self.conn.executemany(
            "INSERT INTO entities (id, kind, created_at) VALUES (?, 'contact', 0)",
            [(n,) for n in NODES],
        )
        self.conn.executemany(
            "UPDATE entities SET merged_into = ? WHERE id = ?",
            [(p, n) for n, p in (parent or {}).items()],
        )

    def merge(self, a: str, b: str) -> str:
        return merge_entities(self.conn, IdentityCache(), a, b, now=1).canonical

    def find(self, n: str) -> str:
        return find_root(self.conn, IdentityCache(), n)

    def parent(self) -> dict[str, str]:
        rows = self.conn.execute("SELECT id, merged_into FROM entities WHERE merged_into NOT NULL")
        return {str(n): str(p) for n, p in rows}

    def groups(self) -> dict[str, frozenset[str]]:
        out: dict[str, set[str]] = {}
        for n in NODES:
            out.setdefault(self.find(n), set()).add(n)
        return {root: frozenset(members) for root, members in out.items()}


def apply(merge_list: list[tuple[str, str]]) -> Entities:
    entities = Entities()
    for a, b in merge_list:
        entities.merge(a, b)
    return entities


def components(merge_list: list[tuple[str, str]]) -> set[frozenset[str]]:
    """The partition by brute force: repeatedly join overlapping sets."""
    sets = [{n} for n in NODES]
    for a, b in merge_list:
        sa = next(s for s in sets if a in s)
        sb = next(s for s in sets if b in s)
        if sa is not sb:
            sa |= sb
            sets.remove(sb)
    return {frozenset(s) for s in sets}


def root_without_compression(parent: Mapping[str, str], n: str) -> str:
    return chain_to_root(n, parent.get)[-1]


def depth(parent: Mapping[str, str], n: str) -> int:
    return len(chain_to_root(n, parent.get)) - 1


# -- union-find (ledger/ingest.py find_root, ledger/merge.py) -----------------


class Model:
    """What the union-find must say: each node's root, kept as a plain map. A merge of
    `a` into `b` moves every node of `a`'s set to `b`'s root."""

    def __init__(self) -> None:
        self.root = {n: n for n in NODES}

    def merge(self, a: str, b: str) -> str:
        ra, rb = self.root[a], self.root[b]
        for n, r in self.root.items():
            if r == ra:
                self.root[n] = rb
        return rb


class PureUnionFind:
    """The core's two rules alone over a parent map: `chain_to_root` to find (with the
    path compression the ledger does), `link_roots` to join."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, n: str) -> str:
        path = chain_to_root(n, self.parent.get)
        for m in path[:-2]:
            self.parent[m] = path[-1]
        return path[-1]

    def merge(self, a: str, b: str) -> str:
        root = self.find(b)
        link = link_roots(self.find(a), root)
        if link is not None:
            root, child = link
            self.parent[child] = root
        return root


def assert_follows_model(
    found: Callable[[str], str], parent: Mapping[str, str], model: Model
) -> None:
    for n in NODES:
        chain_to_root(n, parent.get)  # raises on a cycle
        assert found(n) == model.root[n]


@settings(max_examples=80)
@given(merges)
def test_pure_merges_follow_the_model_and_into_wins(merge_list: list[tuple[str, str]]) -> None:
    uf, model = PureUnionFind(), Model()
    for a, b in merge_list:
        into_root = model.root[b]
        assert uf.merge(a, b) == model.merge(a, b) == into_root  # `into`'s root stays canonical
        assert_follows_model(uf.find, uf.parent, model)


@settings(max_examples=60)
@given(merges)
def test_ledger_merges_follow_the_model_and_into_wins(merge_list: list[tuple[str, str]]) -> None:
    entities, model = Entities(), Model()
    for a, b in merge_list:
        into_root = model.root[b]
        root = entities.merge(a, b)
        assert root == model.merge(a, b) == into_root
        assert root == entities.find(a) == entities.find(b)
        assert_follows_model(entities.find, entities.parent(), model)


@settings(max_examples=60)
@given(merges, st.data())
def test_any_order_of_merges_gives_the_same_partition(
    merge_list: list[tuple[str, str]], data: st.DataObject
) -> None:
    reordered = data.draw(st.permutations(merge_list))
    flips = data.draw(st.lists(st.booleans(), min_size=len(reordered), max_size=len(reordered)))
    reordered = [(b, a) if flip else (a, b) for (a, b), flip in zip(reordered, flips, strict=True)]

    first = apply(merge_list).groups()
    second = apply(reordered).groups()

    assert set(first.values()) == set(second.values()) == components(merge_list)


@settings(max_examples=60)
@given(merges, node)
def test_a_named_into_stays_canonical_whatever_came_before(
    merge_list: list[tuple[str, str]], person: str
) -> None:
    """The seed's "merge the contacts into the new person entity": a root named as
    `into` is the root of everything merged into it, in any order, from any set."""
    entities = apply([(a, b) for a, b in merge_list if person not in (a, b)])
    assert entities.find(person) == person
    for n in NODES:
        assert entities.merge(n, person) == person
    assert entities.groups() == {person: frozenset(NODES)}


@st.composite
def forests(draw: st.DrawFn) -> dict[str, str]:
    """Any acyclic parent map over NODES (roots need not be the smallest ids)."""
    order = draw(st.permutations(NODES))
    parent: dict[str, str] = {}
    for i, n in enumerate(order[1:], start=1):
        if draw(st.booleans()):
            parent[n] = order[draw(st.integers(0, i - 1))]
    return parent


@settings(max_examples=60)
@given(forests(), st.lists(node, max_size=30))
def test_find_never_changes_a_root_and_only_shortens_paths(
    parent: dict[str, str], finds: list[str]
) -> None:
    entities = Entities(parent)
    roots = {n: root_without_compression(parent, n) for n in NODES}
    depths = {n: depth(parent, n) for n in NODES}
    for n in finds:
        assert entities.find(n) == roots[n]
        now = entities.parent()
        assert depth(now, n) <= 1  # compressed: straight to the root
        for m in NODES:
            assert root_without_compression(now, m) == roots[m]
            assert depth(now, m) <= depths[m]
            depths[m] = depth(now, m)


def test_find_compresses_a_long_chain() -> None:
    entities = Entities({"n04": "n03", "n03": "n02", "n02": "n01", "n01": "n00"})
    assert entities.find("n04") == "n00"
    assert entities.parent() == {"n04": "n00", "n03": "n00", "n02": "n00", "n01": "n00"}
    assert entities.find("n00") == "n00"  # a root is its own root and gets no parent
    assert "n00" not in entities.parent()


@settings(max_examples=60)
@given(merges, node, node)
def test_merge_is_idempotent(merge_list: list[tuple[str, str]], a: str, b: str) -> None:
    entities = apply(merge_list)
    first = entities.merge(a, b)
    partition = entities.groups()
    assert entities.merge(a, b) == first
    assert entities.merge(b, a) == first
    assert entities.groups() == partition


def test_link_roots_puts_from_under_into() -> None:
    assert link_roots("ent_B", "ent_A") == ("ent_A", "ent_B")
    assert link_roots("ent_A", "ent_B") == ("ent_B", "ent_A")  # the ids' order is no matter
    assert link_roots("ent_A", "ent_A") is None


def test_merge_of_an_entity_with_itself_changes_nothing() -> None:
    entities = Entities()
    assert entities.merge("n05", "n05") == "n05"
    assert entities.parent() == {}


def test_merge_links_from_s_root_under_into_s_root() -> None:
    entities = Entities()
    assert entities.merge("n05", "n09") == "n09"
    assert entities.merge("n01", "n05") == "n09"  # `into` is not a root: its root wins
    assert entities.parent() == {"n05": "n09", "n01": "n09"}
    assert entities.merge("n09", "n03") == "n03"
    assert entities.parent() == {"n05": "n09", "n01": "n09", "n09": "n03"}
    assert entities.find("n05") == "n03"


@pytest.mark.parametrize(
    "parent",
    [
        {"a": "a"},
        {"a": "b", "b": "a"},
        {"a": "b", "b": "c", "c": "d", "d": "b"},
    ],
)
def test_chain_to_root_raises_on_a_cycle(parent: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="cycle"):
        chain_to_root("a", parent.get)


def test_find_on_a_cycle_raises_and_changes_nothing() -> None:
    entities = Entities({"n00": "n01", "n01": "n02", "n02": "n00", "n07": "n00"})
    before = entities.parent()
    with pytest.raises(ValueError, match="cycle"):
        entities.find("n07")
    assert entities.parent() == before


def test_chain_to_root_lists_the_whole_path() -> None:
    assert chain_to_root("c", {"c": "b", "b": "a"}.get) == ["c", "b", "a"]
    no_parents: dict[str, str] = {}
    assert chain_to_root("a", no_parents.get) == ["a"]


# -- session keys -----------------------------------------------------------


def route(
    peer_kind: str = "dm", peer_id: str = "peer1", thread: str | None = None, entity: str = "ent_A"
) -> Route:
    return Route("chat", peer_kind, peer_id, thread, "sender9", entity)  # type: ignore[arg-type]


def test_dm_key_is_the_canonical_entity() -> None:
    assert build_session_key(route()) == "dm:ent_A"
    assert build_session_key(route(thread="t1")) == "dm:ent_A"  # a DM ignores threads


def test_group_key() -> None:
    assert build_session_key(route("group", "g1")) == "group:chat:g1"


def test_group_thread_key() -> None:
    assert build_session_key(route("group", "g1", "t7")) == "group:chat:g1:thread:t7"


def test_custom_template_fills_every_placeholder() -> None:
    template = "{channel}/{peer}/{sender}/{entity}/{thread}"
    assert build_session_key(route("group", "g1", "t7"), template) == "chat/g1/sender9/ent_A/t7"


def test_custom_template_with_thread_suffix_drops_it_without_a_thread() -> None:
    template = "team:{channel}:{peer}:thread:{thread}"
    assert build_session_key(route("group", "g1"), template) == "team:chat:g1"
    assert build_session_key(route("group", "g1", "t2"), template) == "team:chat:g1:thread:t2"


def test_template_naming_thread_elsewhere_never_renders_none() -> None:
    key = build_session_key(route("group", "g1"), "topic:{channel}:{thread}")
    assert "None" not in key
    assert key.startswith("topic:chat")


@given(
    st.text(min_size=1, max_size=20),
    st.text(min_size=1, max_size=20),
    st.none() | st.text(min_size=1, max_size=20),
)
def test_dm_key_depends_only_on_the_entity(peer: str, sender: str, thread: str | None) -> None:
    r = Route("chan", "dm", peer, thread, sender, "ent_{x}")
    assert build_session_key(r) == "dm:ent_{x}"  # values are never parsed as templates


# -- label resolution -------------------------------------------------------


class Lookups:
    """Fake ledger lookups that record the order of calls."""

    def __init__(
        self, sessions: Mapping[str, tuple[str, str | None]], aliases: Mapping[str, str]
    ) -> None:
        self.sessions = {
            label: SessionRef(label, status, into) for label, (status, into) in sessions.items()
        }
        self.aliases = dict(aliases)
        self.calls: list[tuple[str, str]] = []

    def session(self, label: str) -> SessionRef | None:
        self.calls.append(("session", label))
        return self.sessions.get(label)

    def alias(self, name: str) -> str | None:
        self.calls.append(("alias", name))
        return self.aliases.get(name)

    def resolve(self, key: str) -> Resolved:
        return resolve_label(key, self.session, self.alias)


def test_direct_label_wins_over_an_alias() -> None:
    look = Lookups({"k": ("active", None), "other": ("active", None)}, {"k": "other"})
    assert look.resolve("k") == Resolved("k", "label")
    assert ("alias", "k") not in look.calls


def test_merged_session_is_followed_to_its_primary() -> None:
    look = Lookups({"k": ("merged", "p"), "p": ("active", None)}, {})
    assert look.resolve("k") == Resolved("p", "merged")


def test_chain_of_merged_sessions_is_followed_to_the_end() -> None:
    look = Lookups(
        {"k": ("merged", "a"), "a": ("merged", "b"), "b": ("merged", "c"), "c": ("active", None)},
        {},
    )
    assert look.resolve("k") == Resolved("c", "merged")


@pytest.mark.parametrize(
    "sessions",
    [
        {"k": ("merged", "k")},
        {"k": ("merged", "a"), "a": ("merged", "k")},
        {"k": ("merged", "a"), "a": ("merged", "b"), "b": ("merged", "a")},
    ],
)
def test_cycle_of_merged_sessions_terminates(sessions: dict[str, tuple[str, str | None]]) -> None:
    look = Lookups(sessions, {})
    resolved = look.resolve("k")
    assert resolved.via == "merged"
    assert resolved.label in sessions
    assert len(look.calls) <= len(sessions) + 1


def test_merged_into_a_missing_session_stops_at_the_last_one_found() -> None:
    look = Lookups({"k": ("merged", "a"), "a": ("merged", "gone")}, {})
    assert look.resolve("k") == Resolved("a", "merged")


def test_merged_status_without_target_is_a_plain_label() -> None:
    look = Lookups({"k": ("merged", None)}, {})
    assert look.resolve("k") == Resolved("k", "label")


def test_alias_is_used_when_there_is_no_label() -> None:
    look = Lookups({"target": ("active", None)}, {"k": "target"})
    assert look.resolve("k") == Resolved("target", "alias")
    assert look.calls[:2] == [("session", "k"), ("alias", "k")]


def test_alias_to_a_merged_session_is_followed_to_its_primary() -> None:
    look = Lookups(
        {"target": ("merged", "mid"), "mid": ("merged", "p"), "p": ("active", None)},
        {"k": "target"},
    )
    assert look.resolve("k") == Resolved("p", "alias")


def test_nothing_found_means_create() -> None:
    look = Lookups({"x": ("active", None)}, {"y": "x"})
    assert look.resolve("k") == Resolved(None, "create")
    assert look.calls == [("session", "k"), ("alias", "k")]


# -- primary DM session -----------------------------------------------------


def test_pick_primary_prefers_most_turns() -> None:
    cands = [DmCandidate("a", 1, 900), DmCandidate("b", 5, 100), DmCandidate("c", 2, 999)]
    assert pick_primary(cands) == "b"


def test_pick_primary_then_latest_activity() -> None:
    cands = [DmCandidate("a", 3, 100), DmCandidate("b", 3, 300), DmCandidate("c", 1, 999)]
    assert pick_primary(cands) == "b"


def test_pick_primary_then_smallest_label() -> None:
    cands = [DmCandidate("dm:z", 3, 100), DmCandidate("dm:b", 3, 100), DmCandidate("dm:m", 3, 100)]
    assert pick_primary(cands) == "dm:b"


def test_pick_primary_of_nothing_raises() -> None:
    with pytest.raises(ValueError, match="empty"):
        pick_primary([])


candidates = st.lists(
    st.builds(DmCandidate, st.sampled_from("abcdef"), st.integers(0, 3), st.integers(0, 3)),
    min_size=1,
    max_size=6,
    unique_by=lambda c: c.label,  # labels are primary keys
)


@settings(max_examples=50)
@given(candidates, st.data())
def test_pick_primary_ignores_input_order(cands: list[DmCandidate], data: st.DataObject) -> None:
    shuffled = data.draw(st.permutations(cands))
    best = pick_primary(cands)
    assert pick_primary(shuffled) == best
    winner = next(c for c in cands if c.label == best)
    assert winner.turns == max(c.turns for c in cands)
    top = [c for c in cands if c.turns == winner.turns]
    assert winner.last_activity == max(c.last_activity for c in top)
