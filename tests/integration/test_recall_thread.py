"""Recall along the thread on the real daemon: search hits with their neighbouring
turns (tool and op), a range by turn number, and the recall hint a turn gets when a
message names something that only turns outside its context hold."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import DaemonFactory
from tests.integration.test_events import chat
from wire.client import BrokerClient

pytestmark = pytest.mark.anyio

# "recall W": search W; "range A B": turns A..B by number; "hint? ...": the turn's recall
# hints as JSON; a summarizer's request: a summary that names none of the old terms.
ENGINE = textwrap.dedent("""
    import json, sys
    turn = json.loads(sys.stdin.readline())
    text = "\\n".join(m["content"] for m in turn["inputs"])
    call = None
    if (turn.get("system") or "").startswith("You compact a conversation"):
        text = "Earlier: small talk."
    elif text.startswith("recall "):
        call = {"action": "search", "query": text[7:]}
    elif text.startswith("range "):
        a, b = text.split()[1:]
        call = {"action": "range", "start_turn": int(a), "end_turn": int(b)}
    elif text.startswith("hint? "):
        text = json.dumps([n for n in turn["notes"] if n.startswith("[Recall hint")])
    if call is not None:
        # A call id of its own each turn: tool_calls.id is unique across the ledger.
        print(json.dumps({"type": "tool_call", "id": turn["turn"], "name": "conversation_recall",
                          "arguments": call}), flush=True)
        text = json.loads(sys.stdin.readline())["content"]
    print(json.dumps({"type": "final", "text": text}), flush=True)
""")
FILLER = "filler words about nothing in particular, just to fill the window. " * 4


async def test_neighbours_turn_numbers_and_the_hint(
    make_daemon: DaemonFactory, anyio_backend: str, tmp_path: Path
) -> None:
    program = tmp_path / "engine.py"
    program.write_text(ENGINE)
    engine = {
        "kind": "subprocess",
        "command": [sys.executable, str(program)],
        "context_window": 400,
        "reserve_reply_tokens": 50,
    }
    d = make_daemon({"engine": engine}, backend=anyio_backend)
    said = [
        "the deploy key lives in vault/prod-keys.yaml",
        "we counted twelve owls",
        "and four finches",
        *[f"{n} {FILLER}" for n in range(4)],
        "recall owls",
        "range 2 3",
        "hint? where was prod-keys.yaml again",
        "hint? and zebra-tools.txt",
        "hint? nothing in particular",
    ]
    replies = [r["text"] for r in await chat(d.socket, said)]
    session = await chat(d.socket, [], prefix="none")  # noqa: F841 - no messages: no-op
    found = replies[7]
    assert "owls" in found
    assert "before " in found and "user: the deploy key lives in vault/prod-keys.yaml" in found
    assert "after " in found and "user: and four finches" in found
    assert "-- turn #2 " in replies[8] and "-- turn #3 " in replies[8]
    assert "twelve owls" in replies[8] and "#4" not in replies[8]
    hinted = json.loads(replies[9])
    assert len(hinted) == 1 and '"prod-keys.yaml"' in hinted[0], hinted
    assert "conversation_recall" in hinted[0]
    assert json.loads(replies[10]) == []  # a name no earlier turn holds
    assert json.loads(replies[11]) == []  # nothing named

    async with await BrokerClient.connect(d.socket) as op:
        hits = await op.op("recall.search", query="twelve owls", neighbours_before=2)
        recalled = await op.op("events.query", type="memory_recall")
    # Each search of the archive the hint made is a `memory_recall` event of its turn.
    by_terms = {tuple(e["payload"]["terms"]): e["payload"] for e in recalled}
    assert by_terms[("prod-keys.yaml",)]["hinted"] is True
    assert by_terms[("prod-keys.yaml",)]["hits"] >= 1
    assert by_terms[("zebra-tools.txt",)] == {
        "by": "broker",
        "terms": ["zebra-tools.txt"],
        "hits": 0,
        "hinted": False,
    }
    first = [h for h in hits if h["snippet"] == "we counted **twelve** **owls**"]
    assert first and {h["role"] for h in first} == {"user", "assistant"}
    around = [(n["offset"], n["said"]) for n in first[0]["neighbours"]]
    assert around == [(-1, "the deploy key lives in vault/prod-keys.yaml"), (1, "and four finches")]
