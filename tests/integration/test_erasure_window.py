"""Between the mark of an erasure and its end, every op that names one of the erased
person's sessions (or the person) is refused with a clear error and changes nothing,
while the daemon keeps serving the others.

The erasure is marked beside the running daemon, whose steps never come (it resumes
erasures only at start), so the window stays open for every op asked; one daemon a
backend serves them all.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests import ledger_db
from tests.conftest import DaemonFactory
from tests.harness import DaemonProcess
from tests.integration.scripted import Scripted, call
from tests.integration.test_agent_tools import results
from tests.integration.test_identity import adapter, contact, inbound, op, operator, say, uniq
from tests.integration.wire import table_counts
from wire.client import BrokerError

pytestmark = pytest.mark.anyio

# What an op could change, counted before and after each refused one.
TABLES = ("sessions", "timers", "scratchpad", "route_bindings", "dispatches", "queue_items",
          "session_aliases", "entities", "contacts", "merge_proposals", "turns")  # fmt: skip


@dataclass(frozen=True)
class Window:
    d: DaemonProcess
    channel: str
    fay: str  # the person being erased
    fay_session: str
    fay_turn: str
    gus: str
    gus_session: str


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the test's client; the daemon runs on each backend


@pytest.fixture(params=["asyncio", "trio"])
def agent_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)  # the daemon's, for the agent's tools


@pytest.fixture(scope="module", params=["asyncio", "trio"], ids=["d-asyncio", "d-trio"])
def window(request: pytest.FixtureRequest) -> Iterator[Window]:
    work = Path(tempfile.mkdtemp(prefix="brk-", dir="/tmp"))
    d = DaemonProcess(work, {}, backend=request.param).start()
    try:
        yield anyio.run(_open_window, d)
    finally:
        d.kill()
        shutil.rmtree(work, ignore_errors=True)


async def _open_window(d: DaemonProcess) -> Window:
    channel = uniq("c")
    async with await adapter(d, channel) as a, await operator(d) as o:
        await say(a, inbound(uniq("m"), "fay", text="fay says hello"))
        await say(a, inbound(uniq("m"), "gus", text="gus says hello"))
        fay, gus = await contact(o, channel, "fay"), await contact(o, channel, "gus")
        shown = await op(o, "session.show", session=fay["session"])
    ledger_db.mark_erasure(d.ledger, fay["entity"])
    return Window(d, channel, fay["entity"], fay["session"], shown["head"],
                  gus["entity"], gus["session"])  # fmt: skip


def counts(d: DaemonProcess) -> dict[str, int]:
    return table_counts(d, TABLES)


def asked(w: Window) -> dict[str, dict[str, Any]]:
    """Each op aimed at the erased person or one of their sessions."""
    s = w.fay_session
    return {
        "agent_send": {"op": "dispatch", "target": {"kind": "session", "session": s},
                       "task": "do it"},
        "agent_send-parent": {"op": "dispatch", "parent_session": s, "task": "do it",
                              "target": {"kind": "session", "session": w.gus_session}},
        "agent_send-fork": {"op": "dispatch", "task": "do it",
                            "target": {"kind": "fork", "turn": w.fay_turn}},
        "scratchpad.merge": {"session": s, "patch": {"k": "v"}},
        "timer.add": {"session": s, "text": "ping", "in_s": 60},
        "route.bind": {"channel": w.channel, "peer_kind": "dm", "peer_id": "gus", "session": s},
        "session.fork": {"turn": w.fay_turn},
        "session.reset": {"session": s},
        "session.close": {"session": s},
        "session.compact": {"session": s},
        "entity.alias": {"alias": uniq("alias"), "session": s},
        "entity.name": {"entity": w.fay, "name": "Fay"},
        "entity.merge": {"from": w.gus, "into": w.fay},
        "entity.merge-from": {"from": w.fay, "into": w.gus},
    }  # fmt: skip


OPS = ["agent_send", "agent_send-parent", "agent_send-fork", "scratchpad.merge", "timer.add",
       "route.bind", "session.fork", "session.reset", "session.close", "session.compact",
       "entity.alias", "entity.name", "entity.merge", "entity.merge-from"]  # fmt: skip


@pytest.mark.parametrize("name", OPS)
async def test_an_op_aimed_at_an_erased_session_is_refused_and_changes_nothing(
    window: Window, name: str
) -> None:
    w = window
    before = counts(w.d)
    async with await operator(w.d) as o:
        with pytest.raises(BrokerError) as refused:
            with anyio.fail_after(30):
                await o.op(name.split("-")[0], **asked(w)[name])
        assert refused.value.code in ("not_found", "invalid"), (name, refused.value)
        assert (
            w.fay_session in str(refused.value)
            or w.fay in str(refused.value)
            or (w.fay_turn in str(refused.value))
        ), (name, str(refused.value))
        # The daemon goes on serving everyone else.
        assert (await op(o, "session.show", session=w.gus_session))["label"] == w.gus_session
    assert counts(w.d) == before, name


async def test_an_agent_s_tools_aimed_at_an_erased_session_are_refused(
    make_daemon: DaemonFactory, tmp_path: Path, agent_backend: str
) -> None:
    """An owner's agent (reach "any", so reach lets every call through) aims each
    broker tool that names a session at a person being erased: each is an error
    naming the erasure, and nothing is written for that session. The tools of one's
    own session take no session argument (docs/security.md): given one, they act on
    the caller's session, never on the erased one."""
    policies = tmp_path / "policies.toml"
    policies.write_text(
        '[[rules]]\nname = "owner-reaches-all"\nmatch = { principal = ["owner"] }\nreach = "any"\n'
    )
    config = {"owners": [{"channel": "sms", "sender_id": "+9"}], "policies_file": str(policies)}
    s = Scripted(make_daemon, tmp_path, agent_backend, config)
    bob = str((await s.say("bob says hello", "b1", sender="+2"))["session"])
    bob_turn = s.rows("SELECT id FROM turns WHERE session_label = ?", bob)[0][0]
    bob_entity = s.rows("SELECT entity_id FROM sessions WHERE label = ?", bob)[0][0]
    await s.say("hello", "o1", sender="+9")
    ledger_db.mark_erasure(s.d.ledger, bob_entity)
    tries = [
        call("agent_send", task="tell me", target={"kind": "session", "session": bob}),
        call("agent_send", task="tell me", target={"kind": "fork", "turn": bob_turn}),
        call("scratchpad_merge", patch={"k": 1}, session=bob),
        call("schedule", text="later", in_s=3600, session=bob),
    ]
    got = results(await s.say("\n".join(tries), "o2", sender="+9"))
    assert [(name, status) for name, status, _ in got] == [
        ("agent_send", "error"),
        ("agent_send", "error"),
        ("scratchpad_merge", "ok"),
        ("schedule", "ok"),
    ], got
    assert "its person is being erased" in got[0][2], got
    assert bob_turn in got[1][2], got  # its turn is gone from the mark on: "no turn"
    for table, column in (("dispatches", "target_session"), ("scratchpad", "session_label"),
                          ("timers", "session_label"), ("sessions", "parent_session")):  # fmt: skip
        assert s.rows(f"SELECT count(*) FROM {table} WHERE {column} = ?", bob) == [(0,)], table
