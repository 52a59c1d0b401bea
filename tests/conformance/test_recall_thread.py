"""Recall along a thread through the port: a hit's neighbouring turns and the recall
hint's lookup of terms in a session's older messages."""

from __future__ import annotations

import pytest

from ledger.port.protocols import LedgerPort
from tests.conformance.records import inbound, ingest, turn

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


async def test_a_word_with_an_accent_is_found(port: LedgerPort) -> None:
    """Found by test_port_differential: PostgreSQL's first ledger_tsv split at
    `[^[:alnum:]]`, which in a C-locale cluster (the tests', devcluster.py) is every
    non-ASCII letter ('H', 'ron'); PG migration 0004 splits as unicode61 does."""
    session, ids = await _thread(port, ["Héron wades"])
    assert [h.turn for h in await port.recall_search("héron", session, 5)] == ids


async def test_case_folds_past_ascii(port: LedgerPort) -> None:
    session, ids = await _thread(port, ["ÉTÉ chaud", "été froid", "Ωμέγα", "ДОМ"])
    assert {h.turn for h in await port.recall_search("été", session, 5)} == set(ids[:2])
    assert {h.turn for h in await port.recall_search("ÉTÉ", session, 5)} == set(ids[:2])
    assert [h.turn for h in await port.recall_search("ωμέγα", session, 5)] == [ids[2]]
    assert [h.turn for h in await port.recall_search("дом", session, 5)] == [ids[3]]


async def test_latin_diacritics_are_dropped_and_others_kept(port: LedgerPort) -> None:
    """unicode61 (remove_diacritics 1) folds Latin letters to their base letter, both
    precomposed and a combining mark after the letter, and leaves Greek accents."""
    session, ids = await _thread(port, ["Le Héron", "cafe\u0301 noir", "Ωμέγα"])
    assert [h.turn for h in await port.recall_search("heron", session, 5)] == [ids[0]]
    assert [h.turn for h in await port.recall_search("HERON", session, 5)] == [ids[0]]
    assert [h.turn for h in await port.recall_search("café", session, 5)] == [ids[1]]
    assert [h.turn for h in await port.recall_search("cafe", session, 5)] == [ids[1]]
    assert await port.recall_search("ωμεγα", session, 5) == []


async def test_a_word_found_through_a_fold_is_marked_in_its_snippet(port: LedgerPort) -> None:
    """The snippet marks what the search matched, folds included, on both ports:
    PostgreSQL's `ts_headline` read the text with its own parser and left "Héron"
    unmarked for "heron" (postgres/recall.py)."""
    session, _ = await _thread(port, ["Le Héron gris", "ÉTÉ chaud", "cafe\u0301 noir"])
    [heron] = await port.recall_search("heron", session, 5)
    assert heron.snippet == "Le **Héron** gris"
    [summer] = await port.recall_search("été", session, 5)
    assert summer.snippet == "**ÉTÉ** chaud"
    [coffee] = await port.recall_search("café", session, 5)
    assert coffee.snippet == "**cafe\u0301** noir"
    [prefix] = await port.recall_search("hér*", session, 5)
    assert prefix.snippet == "Le **Héron** gris"


async def test_words_in_other_scripts(port: LedgerPort) -> None:
    """A run of CJK letters is one word to unicode61, as a run of Latin letters is."""
    session, ids = await _thread(port, ["Москва зимой", "東京 タワー", "東京タワー"])
    assert [h.turn for h in await port.recall_search("москва", session, 5)] == [ids[0]]
    assert [h.turn for h in await port.recall_search("東京", session, 5)] == [ids[1]]
    assert [h.turn for h in await port.recall_search("東京タワー", session, 5)] == [ids[2]]
    assert {h.turn for h in await port.recall_search("東京タ*", session, 5)} == {ids[2]}


async def test_words_split_at_non_ascii_punctuation(port: LedgerPort) -> None:
    session, ids = await _thread(port, ["naïve—café «crème»", "naive cafes"])
    for query in ("café", "crème", "creme", '"naive cafe"'):
        assert [h.turn for h in await port.recall_search(query, session, 5)] == [ids[0]], query
    for query in ("naive", '"naive cafe"*'):
        assert {h.turn for h in await port.recall_search(query, session, 5)} == set(ids), query
