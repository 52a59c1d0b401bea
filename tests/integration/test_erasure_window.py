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

from ledger.erasure import begin
from ledger.ingest import WriterConnection
from tests import ledger_db
from tests.harness import DaemonProcess
from tests.integration.test_identity import adapter, contact, inbound, op, operator, say, uniq
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
    conn = ledger_db.connect(d.ledger, factory=WriterConnection, isolation_level=None)
    try:
        conn.execute("PRAGMA busy_timeout = 5000")
        conn.execute("BEGIN IMMEDIATE")
        begin(conn, fay["entity"], fay["entity"], 1)
        conn.execute("COMMIT")
    finally:
        conn.close()
    return Window(d, channel, fay["entity"], fay["session"], shown["head"],
                  gus["entity"], gus["session"])  # fmt: skip


def counts(d: DaemonProcess) -> dict[str, int]:
    conn = d.db()
    try:
        return {t: int(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]) for t in TABLES}
    finally:
        conn.close()


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
