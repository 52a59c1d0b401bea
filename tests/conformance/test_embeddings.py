"""Recall by meaning through the port, on each ledger: the indexer's reads and writes
(ledger/recall/vectors.py), a search by meaning kept to the person's own sessions, and
the vectors gone, to the bytes, when their person is forgotten or their turn expires.

Vectors here are made up (unit vectors of a seeded generator): what is checked is the
storage and the search, not the model (tests/unit/test_encoder.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from ledger.port.protocols import LedgerPort, Request
from ledger.port.records import Searched
from ledger.sqlite.store import Ledger
from tests.conformance.records import inbound, tick
from tests.conformance.test_erasure import GROUP, group_message, pg_table_bytes, raw_bytes, say

pytestmark = pytest.mark.anyio
DIM = 384


def unit(seed: int) -> bytes:
    v = np.random.default_rng(seed).standard_normal(DIM).astype("<f4")
    return bytes((v / np.linalg.norm(v)).astype("<f4").tobytes())


async def index_all(port: LedgerPort, vector_of: dict[str, bytes], default: bytes) -> int:
    """Run the indexer's rounds to the end, with a vector by content; the count stored."""
    stored = 0
    while True:
        mark, through, todo = await port.embeddings_pending(3)
        if through == mark:
            return stored
        rows = [(m, s, c, vector_of.get(c, default)) for m, s, c in todo]
        stored += await port.embeddings_store(through, rows)


def stored_bytes(port: LedgerPort, backend: str, request: pytest.FixtureRequest) -> bytes:
    if backend == "postgres":
        return pg_table_bytes(request)
    assert isinstance(port, Ledger)
    return raw_bytes(Path(port.path))


async def test_vectors_are_stored_once_and_searched_within_the_persons_sessions(
    port: LedgerPort,
) -> None:
    near, far = unit(1), unit(2)
    alice, _, _ = await say(port, inbound("a1", "alice", "checking the token's signature"))
    bob, _, _ = await say(port, inbound("b1", "bob", "bob checks his token too"))
    vectors = {"checking the token's signature": near, "bob checks his token too": near}
    assert await index_all(port, vectors, far) == 4  # two user and two assistant messages
    assert await index_all(port, vectors, far) == 0  # the mark moved: nothing again
    assert (await port.embeddings_counts())[0] == 4

    req = Request("search", alice, 5, query="JWT validation", person=True, mode="meaning")
    found = await port.recall(replace(req, query_vector=near))
    assert isinstance(found, Searched)
    assert [h.session for h in found.hits] == [alice, alice]  # never bob's
    assert found.hits[0].snippet == "checking the token's signature"
    assert found.hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert found.hits[1].score < 0.5

    both = await port.recall(replace(req, mode="both", query="signature", query_vector=far))
    assert isinstance(both, Searched)
    assert {h.session for h in both.hits} == {alice}
    # First in the list by words, second in the list by meaning: first when fused.
    assert both.hits[0].message == found.hits[0].message
    everyone = await port.recall(replace(req, session=None, query_vector=near))
    assert isinstance(everyone, Searched)
    assert {h.session for h in everyone.hits} == {alice, bob}  # all sessions: an operator's read
    tools = await port.recall(replace(req, roles=("tool",), query_vector=near))
    assert isinstance(tools, Searched) and tools.hits == []


async def test_a_vector_of_text_erased_meanwhile_is_not_stored(port: LedgerPort) -> None:
    _, _, alice_ent = await say(port, inbound("a1", "alice", "alice's words"))
    assert alice_ent is not None
    _, through, todo = await port.embeddings_pending(10)
    await port.erase_entity(alice_ent, alice_ent, tick())
    stored = await port.embeddings_store(through, [(m, s, c, unit(m)) for m, s, c in todo])
    assert stored == 0 and (await port.embeddings_counts()) == (0, through)


async def test_erasure_removes_the_persons_vectors_to_the_bytes(
    port: LedgerPort, ledger_backend: str, request: pytest.FixtureRequest
) -> None:
    alice, _, alice_ent = await say(port, inbound("a1", "alice", "alice's own words"))
    await say(port, group_message("g1", "alice", "alice in the group"), GROUP)
    bob, _, _ = await say(port, inbound("b1", "bob", "bob's words"))
    assert alice_ent is not None
    marker = unit(7)  # alice's vectors: her DM and what she said in the group
    vectors = {"alice's own words": marker, "alice in the group": marker}
    assert await index_all(port, vectors, unit(8)) == 6
    assert marker in stored_bytes(port, ledger_backend, request)

    await port.erase_entity(alice_ent, alice_ent, tick())
    assert (await port.embeddings_counts())[0] == 3  # the group's reply and bob's two
    found = await port.recall(
        Request("search", None, 10, query="x", mode="meaning", query_vector=marker)
    )
    assert isinstance(found, Searched)
    assert alice not in {h.session for h in found.hits} and bob in {h.session for h in found.hits}
    assert all(h.score < 0.5 for h in found.hits)
    assert marker not in stored_bytes(port, ledger_backend, request)


async def test_expiry_removes_the_expired_turns_vectors_to_the_bytes(
    port: LedgerPort, ledger_backend: str, request: pytest.FixtureRequest
) -> None:
    alice, _, _ = await say(port, inbound("a1", "alice", "old words"))
    marker = unit(9)
    assert await index_all(port, {"old words": marker}, unit(10)) == 2
    cutoff = tick()
    await say(port, inbound("a2", "alice", "newer words"))
    assert await index_all(port, {}, unit(11)) == 2
    assert marker in stored_bytes(port, ledger_backend, request)

    assert await port.expire_before(cutoff, tick()) == 1
    assert (await port.embeddings_counts())[0] == 2
    found = await port.recall(
        Request("search", alice, 10, query="x", mode="meaning", query_vector=marker)
    )
    assert isinstance(found, Searched)
    assert [h.snippet for h in found.hits if h.role == "user"] == ["newer words"]
    assert marker not in stored_bytes(port, ledger_backend, request)
