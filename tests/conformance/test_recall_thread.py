"""Recall along a thread through the port: a hit's neighbouring turns and the recall
hint's lookup of terms in a session's older messages."""

from __future__ import annotations

import pytest

from ledger.port import LedgerPort

from .records import inbound, ingest, turn

pytestmark = pytest.mark.anyio


async def _thread(port: LedgerPort, texts: list[str]) -> tuple[str, list[str]]:
    """One turn a message, each on the last: the session and the turns' ids."""
    ids: list[str] = []
    session = ""
    for n, text in enumerate(texts):
        acc = await ingest(port, inbound(f"t{n}", text=text))
        session = acc.session
        rec = turn(session, ids[-1] if ids else None, await port.open_items(session), "ok")
        await port.submit_turn(rec).result()
        ids.append(rec.turn_id)
    return session, ids


async def test_neighbours_of_hits(port: LedgerPort) -> None:
    session, ids = await _thread(port, ["herons", "owls", "finches"])
    around = await port.recall_neighbours([(ids[1], session), (ids[0], session)], 1, 1)
    assert [(n.turn, n.offset, n.said) for n in around[ids[1]]] == [
        (ids[0], -1, "herons"),
        (ids[2], 1, "finches"),
    ]
    assert [n.turn for n in around[ids[0]]] == [ids[1]]  # the root has none before it


async def test_hint_terms_are_found_in_older_messages_only(port: LedgerPort) -> None:
    session, _ = await _thread(port, ["keys live in vault/prod-keys.yaml", "fine"])
    terms = ("prod-keys.yaml", "zebra-tools.txt")
    assert await port.recall_hint_terms(session, terms, ()) == ["prod-keys.yaml"]
    assert await port.recall_hint_terms(session, terms, ("t0",)) == []  # its own input
    assert await port.recall_hint_terms("dm:nobody", terms, ()) == []


async def test_a_word_with_an_accent_is_found(
    port: LedgerPort, ledger_backend: str, request: pytest.FixtureRequest
) -> None:
    """Found by test_port_differential: SQLite's unicode61 tokenizer finds 'héron' in
    'Héron'; PostgreSQL's ledger_tsv splits at `[^[:alnum:]]`, which in a C-locale
    cluster (the tests', devcluster.py) is every non-ASCII letter ('H', 'ron')."""
    if ledger_backend == "postgres":
        reason = "known divergence, not fixed yet: ledger_tsv needs a migration (0004)"
        request.node.add_marker(pytest.mark.xfail(strict=True, reason=reason))
    session, ids = await _thread(port, ["Héron wades"])
    assert [h.turn for h in await port.recall_search("héron", session, 5)] == ids
