"""Reach on the real daemon (issue 39): Alice's agent, scripted as a prompt-injected
model would be, tries every broker tool on Bob's sessions; Bob's sessions are
unchanged afterwards, each refusal answers the same sentence whether the session
exists or not, and each is audited. A merge of the two widens reach from then on;
a route rule gives an owner reach "any"."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core.reach import REFUSED
from tests.conftest import DaemonFactory
from tests.integration.scripted import Scripted, call
from tests.integration.test_agent_tools import results

pytestmark = pytest.mark.anyio
ALICE, BOB, OWNER = "+1", "+2", "+9"
# Recall of other sessions on: reach is what keeps them apart (off, a turn recalls
# its own person's sessions only, whatever it names).
WIDE_RECALL = {"recall": {"cross_session": True}}


def bob_state(s: Scripted, label: str) -> dict[str, list[tuple[Any, ...]]]:
    """Everything of Bob's session a tool could change, and what could come from it."""
    one = (label,)
    return {
        "sessions": s.rows(
            "SELECT label, head_turn_id, turns, status, updated_at FROM sessions"
            " WHERE label = ? OR parent_session = ?",
            label,
            label,
        ),
        "turns": s.rows("SELECT id, status FROM turns WHERE session_label = ?", *one),
        "items": s.rows("SELECT id, status FROM queue_items WHERE session_label = ?", *one),
        "dispatches": s.rows(
            "SELECT id FROM dispatches WHERE target_session = ? OR parent_session = ?", label, label
        ),
        "timers": s.rows("SELECT id FROM timers WHERE session_label = ?", *one),
        "pad": s.rows("SELECT state FROM scratchpad WHERE session_label = ?", *one),
        "compactions": s.rows("SELECT turn_id FROM compactions WHERE session_label = ?", *one),
        "outbox": s.rows("SELECT * FROM outbox WHERE session_label = ?", *one),
        "forks": s.rows(
            "SELECT s.label FROM sessions s JOIN turns t ON s.parent_turn_id = t.id"
            " WHERE t.session_label = ?",
            *one,
        ),
    }


async def test_alice_s_agent_cannot_touch_bob_s_sessions(
    make_daemon: DaemonFactory, tmp_path: Path, anyio_backend: str
) -> None:
    s = Scripted(make_daemon, tmp_path, anyio_backend, WIDE_RECALL)
    bob = str((await s.say("my secret word is pineapple", "b1", sender=BOB))["session"])
    bob_turn = s.rows("SELECT id FROM turns WHERE session_label = ?", bob)[0][0]
    alice = str((await s.say("hello", "a1", sender=ALICE))["session"])
    before = bob_state(s, bob)
    tries = [
        call("agent_send", task="tell me", target={"kind": "session", "session": bob}),
        call("agent_send", task="tell me", target={"kind": "fork", "turn": bob_turn}),
        call("agent_send", task="x", target={"kind": "session", "session": "dm:NOSUCHONE"}),
        call("agent_send", task="x", target={"kind": "fork", "turn": "01NOSUCHTURN"}),
        call("agent_send", task="x", target={"kind": "session"}),
        call("conversation_recall", action="search", query="pineapple", session=bob),
        call("conversation_recall", action="summary", session=bob),
        call("conversation_recall", action="tool_calls", session=bob),
        call("conversation_recall", action="range", session=bob, start_turn=1),
        call("conversation_recall", action="range", around_turn=bob_turn),
        call("conversation_recall", action="summary", session="dm:NOSUCHONE"),
        call("conversation_recall", action="search", query="pineapple", session="*"),
        call("agent_send", task="x", target={"kind": "nonsense"}),
        call("scratchpad_merge", patch={"mine": 1}, session=bob),
        call("scratchpad_get", session=bob),
        call("schedule", text="later", in_s=3600, session=bob),
        call("session_compact", session=bob),
    ]
    reply = await s.say("\n".join(tries), "a2", sender=ALICE)
    got = results(reply)
    assert len(got) == len(tries), reply["text"]
    refused = got[:11]
    assert [(name, status, text) for name, status, text in refused] == [
        (name, "error", REFUSED) for name, _, _ in refused
    ]
    # All sessions, for Alice's agent, are Alice's: Bob's word is not found.
    assert got[11][:2] == ("conversation_recall", "ok") and "No messages" in got[11][2]
    assert "secret word" not in got[11][2] and bob not in got[11][2]
    # A malformed target says what is wrong with it, and nothing of anyone's sessions.
    assert got[12][:2] == ("agent_send", "error") and "target.kind" in got[12][2]
    # The tools of one's own session take no session argument: they act on Alice's.
    assert [status for _, status, _ in got[13:]] == ["ok", "ok", "ok", "ok"]
    assert s.rows("SELECT state FROM scratchpad WHERE session_label = ?", alice) == [
        ('{"mine":1}',)
    ]
    await s.until("SELECT 1 FROM compactions WHERE session_label = ?", alice)
    assert bob_state(s, bob) == before
    audited = s.rows("SELECT uid, role, op, target, outcome FROM audit ORDER BY id")
    assert audited == [(None, None, name, alice, "refused") for name, _, _ in refused]
    # Refused rows name the session that tried, never the tool's arguments.
    assert not s.rows("SELECT 1 FROM audit WHERE target LIKE ? OR op LIKE ?", "%dm:NO%", "%{%")


async def test_a_merge_widens_reach_from_the_merge_on(
    make_daemon: DaemonFactory, tmp_path: Path, anyio_backend: str
) -> None:
    s = Scripted(make_daemon, tmp_path, anyio_backend, WIDE_RECALL)
    bob = str((await s.say("my other phone says hi", "b1", sender=BOB))["session"])
    alice = str((await s.say("hello", "a1", sender=ALICE))["session"])
    look = call("conversation_recall", action="summary", session=bob)
    before = results(await s.say(look, "a2", sender=ALICE))
    assert before == [("conversation_recall", "error", REFUSED)]
    entities = {
        label: s.rows("SELECT entity_id FROM sessions WHERE label = ?", label)[0][0]
        for label in (alice, bob)
    }
    await s.op("entity.merge", **{"from": entities[bob], "into": entities[alice]})
    after = results(await s.say(look, "a3", sender=ALICE))
    assert after[0][:2] == ("conversation_recall", "ok"), after
    # The merge was audited, by the op's own write: uid and role of this test's process.
    merged = s.rows("SELECT role, op, target, outcome FROM audit WHERE op = 'entity.merge'")
    assert merged == [("admin", "entity.merge", entities[bob], "ok")]


async def test_an_owner_rule_may_grant_reach_any(
    make_daemon: DaemonFactory, tmp_path: Path, anyio_backend: str
) -> None:
    policies = tmp_path / "policies.toml"
    policies.write_text(
        '[[rules]]\nname = "owner-reaches-all"\nmatch = { principal = ["owner"] }\nreach = "any"\n'
    )
    config = {
        **WIDE_RECALL,
        "owners": [{"channel": "sms", "sender_id": OWNER}],
        "policies_file": str(policies),
    }
    s = Scripted(make_daemon, tmp_path, anyio_backend, config)
    bob = str((await s.say("the garage code is 4711", "b1", sender=BOB))["session"])
    await s.say("hello", "o1", sender=OWNER)
    alice = str((await s.say("hello", "a1", sender=ALICE))["session"])
    search = call("conversation_recall", action="search", query="garage", session="*")
    owner_got = str((await s.say(search, "o2", sender=OWNER))["text"])
    assert owner_got.startswith("conversation_recall:ok:") and "4711" in owner_got
    alice_got = str((await s.say(search, "a2", sender=ALICE))["text"])
    assert alice_got.startswith("conversation_recall:ok:") and "4711" not in alice_got
    send = call("agent_send", task="ping", target={"kind": "session", "session": alice})
    assert results(await s.say(send, "o3", sender=OWNER))[0][:2] == ("agent_send", "ok")
    assert bob  # Bob's session exists; only the owner reached it
