"""Recall by meaning without a daemon: the tool's `mode` argument and its errors, and
the indexer's rounds (broker/recall_indexer.py) over a fake port, on asyncio and trio.
The model is the real one only where a vector must mean something
(tests/unit/test_encoder.py, tests/integration/test_recall_meaning.py)."""

from __future__ import annotations

import struct

import pytest

from broker.engines.base import EngineError
from broker.recall_indexer import BATCH, TEXT_MAX, Semantic
from broker.tools.recall import RECALL_TOOL, conversation_recall, parse_arguments
from ledger.port.records import Found, Hit, Request, Searched
from plumbing.encoder import EncoderUnavailable

pytestmark = pytest.mark.anyio


class Recorder:
    """A recall read that records the request it was given."""

    def __init__(self) -> None:
        self.requests: list[Request] = []

    async def recall(self, req: Request) -> Found:
        self.requests.append(req)
        return Searched([Hit(1, "alice", "T1", "user", 0, "the token's signature", 0.8)], False)


def test_mode_is_a_search_argument() -> None:
    assert RECALL_TOOL.parameters["properties"]["mode"]["enum"] == ["words", "meaning", "both"]
    assert parse_arguments({"action": "search", "query": "x"}, "a", True).mode == "words"
    req = parse_arguments({"action": "search", "query": "x", "mode": "both"}, "a", True)
    assert req.mode == "both"
    with pytest.raises(EngineError, match="mode must be one of words, meaning, both"):
        parse_arguments({"action": "search", "query": "x", "mode": "vibes"}, "a", True)
    with pytest.raises(EngineError, match="mode is for search only"):
        parse_arguments({"action": "summary", "mode": "meaning"}, "a", True)


async def test_meaning_sends_the_query_vector_and_words_never_encodes() -> None:
    ledger, asked = Recorder(), []

    async def embed(text: str) -> bytes:
        asked.append(text)
        return struct.pack("<2f", 0.6, 0.8)

    args = {"action": "search", "query": "JWT validation", "mode": "meaning"}
    text = await conversation_recall(ledger, "alice", args, len, embed=embed)
    assert "token's signature" in text and asked == ["JWT validation"]
    assert ledger.requests[0].query_vector == struct.pack("<2f", 0.6, 0.8)
    await conversation_recall(ledger, "alice", {**args, "mode": "words"}, len, embed=embed)
    assert asked == ["JWT validation"] and ledger.requests[1].query_vector is None


async def test_meaning_without_a_model_is_a_tool_error() -> None:
    args = {"action": "search", "query": "x", "mode": "meaning"}
    with pytest.raises(EngineError, match=r"mode 'meaning' is off on this broker"):
        await conversation_recall(Recorder(), "alice", args, len, embed=None)

    async def missing(text: str) -> bytes:
        raise EncoderUnavailable("the 'semantic' extra is not installed")

    with pytest.raises(EngineError, match=r"unavailable: the 'semantic' extra is not installed"):
        await conversation_recall(Recorder(), "alice", args, len, embed=missing)


class FakePort:
    """Messages 1..n (every third a tool result, not embedded), and what was stored."""

    def __init__(self, n: int) -> None:
        self.messages = {i: ("s", f"message {i}", i % 3 == 0) for i in range(1, n + 1)}
        self.mark = 0
        self.stored: dict[int, bytes] = {}
        self.batches: list[int] = []

    async def embeddings_pending(self, limit: int) -> tuple[int, int, list[tuple[int, str, str]]]:
        ids = sorted(i for i in self.messages if i > self.mark)[:limit]
        last = ids[-1] if ids else self.mark
        todo = [(i, self.messages[i][0], self.messages[i][1]) for i in ids]
        return self.mark, last, [t for t in todo if not self.messages[t[0]][2]]

    async def embeddings_store(self, through: int, rows: list[tuple[int, str, str, bytes]]) -> int:
        self.batches.append(len(rows))
        self.stored.update({m: v for m, _, _, v in rows})
        self.mark = through
        return len(rows)

    async def embeddings_counts(self) -> tuple[int, int]:
        return len(self.stored), self.mark


class FakeSemantic(Semantic):
    def __init__(self) -> None:
        super().__init__("")
        self.seen: list[str] = []

    def encode_sync(self, texts: list[str]) -> list[bytes]:
        self.seen.extend(texts)
        return [struct.pack("<f", len(t)) for t in texts]


async def test_the_indexer_catches_up_in_bounded_batches_and_resumes_at_the_mark() -> None:
    port, model = FakePort(BATCH * 2 + 5), FakeSemantic()
    while await model.round(port):
        pass
    assert max(port.batches) <= BATCH and len(port.stored) == len(
        [i for i, m in port.messages.items() if not m[2]]
    )
    assert 3 not in port.stored and port.mark == BATCH * 2 + 5
    port.messages[100] = ("s", "a new message " + "x" * (TEXT_MAX * 2), False)
    seen = len(model.seen)
    assert await model.round(port)
    assert not await model.round(port)
    assert model.seen[seen:] == [port.messages[100][1]] and 100 in port.stored


async def test_an_indexer_with_no_model_returns_at_once() -> None:
    off = Semantic("")
    assert not off.enabled
    await off.run(FakePort(3))  # returns: nothing to do
    with pytest.raises(EncoderUnavailable, match="recall by meaning is off"):
        await off.encode_query("x")
    broken = Semantic("/nonexistent/model")
    assert broken.enabled
    await broken.run(FakePort(3))  # a warning, and returns
    with pytest.raises(EncoderUnavailable, match=r"has no config\.json"):
        await broken.encode_query("x")
