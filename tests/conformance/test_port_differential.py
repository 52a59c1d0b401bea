"""The same random sequence of port operations on a fresh SQLite ledger and a fresh
PostgreSQL ledger: every answer, and at the end every session's reads, must agree.

The hand-written conformance tests check what each backend does in cases someone
thought of; this one looks for the cases nobody did, where the two disagree.

One example is one `anyio.run` driving both ports step by step: each step is drawn
(`st.data()`) from what exists so far, run on SQLite, then on PostgreSQL, and the two
outcomes (a value, or an error's class and field) compared at once, so a divergence
names the step that made it.

What legitimately differs is normalized, and only that. The ids a ledger makes
(ULIDs, `ent_` ids; they show up in labels and frames too) become `#n` by order of
first appearance, per backend, and an id cut off at the end of a preview is `#cut`;
everything the test passes in (turn ids, times, texts) is the same on both sides, and
a later step names a thing by its normalized form, which each side turns back into
its own id. Recall's ranking is each engine's own (bm25 against ts_rank), so search
hits are compared as sets of (session, turn, role, snippet); both ports make snippets
with FTS5's `snippet()` (ledger/postgres/snippets.py), so those must be the same text.
Tool call ids are made from the turn's id (`tool_calls.id` is a key of the whole
ledger), so a reused id fails the turn on both backends alike.

`PORT_DIFF_EXAMPLES` / `PORT_DIFF_STEPS` raise the example count and the steps per
example for a longer hunt (defaults 30 x 25); `PORT_DIFF_SHRINK=0` reports the first
divergence unshrunk (shrinking a 40-step sequence can take many minutes).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import re
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Literal

import anyio
import orjson
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from core.engine_types import ToolCall
from core.identity import SessionSpec
from core.resets import ResetPolicy
from core.timers import parse_spec
from ledger.port.errors import HeadMoved, LedgerLookupError
from ledger.port.protocols import (
    BindCommand,
    Carry,
    Conversation,
    InboundRecord,
    LedgerPort,
    Request,
    TurnRecord,
)
from ledger.port.records import Limits
from ledger.sqlite.store import Ledger
from plumbing.ids import new_id

EXAMPLES = int(os.environ.get("PORT_DIFF_EXAMPLES", "30"))
STEPS = int(os.environ.get("PORT_DIFF_STEPS", "25"))
# A longer hunt gets time in proportion: about 0.05 s a step when loaded.
pytestmark = [pytest.mark.postgres, pytest.mark.timeout(max(120, EXAMPLES * STEPS // 5))]
LIMITS = Limits(max_depth=2, max_children=4, timeout_ms=60_000)
_ULID = re.compile(r"[0-9A-HJKMNP-TV-Z]{26}")
_CUT_ULID = re.compile(r'(?<=")[0-9A-HJKMNP-TV-Z]{1,25}$')  # a preview cut inside an id
SENDERS = [("chat", "ann"), ("chat", "bob"), ("mail", "ann@x"), ("sms", "+100")]
TEXTS = [
    "hello there",
    "herons wade",
    "owls hunt at night",
    "/queue collect",
    "tea or coffee",
    "Héron HERONS Ünïcode",
    "naïve—café Ωμέγα ДОМ 東京 e\u0301te\u0301",
    "ǅemal x²y \U00010400X ｆｕｌｌ «crème» 31e50x1FABC",
    "50% off_sale \\ 'quoted' \"dq\"",
]
# Non-ASCII words too since PG migration 0004 (test_recall_thread.py): folded case
# and Latin diacritics (heron, ÉTÉ), kept Greek accents (ωμεγα finds nothing).
WORDS = ["herons", "owls", "tea", "hello", "night", "reply", "off_sale", "HERONS"]
WORDS += ["héron", "heron", "unicode", "ÜNÏCODE", "cafe", "ωμέγα", "ωμεγα", "дом", "東京", "ÉTÉ"]
WORDS += ["ǆemal", "x²y", "\U00010428x", "ＦＵＬＬ", "full", "ete", "creme"]
WORDS += ["31e50x1fabc", "x1fabc"]  # one word to unicode61; PostgreSQL's parser made two
EVENT_TEXTS = ["tea", "TEA", "Héron", "é", "50%", "_", "\\", '"']
SPECS = [
    SessionSpec(None, None),
    SessionSpec(None, None, ResetPolicy(max_turns=2)),
    SessionSpec("room:{entity}", "helper"),
]


class Ids:
    """One backend's ids and their normalized names."""

    def __init__(self) -> None:
        self.to_name: dict[str, str] = {}
        self.to_raw: dict[str, str] = {}

    def name(self, raw: str) -> str:
        if raw not in self.to_name:
            name = f"#{len(self.to_name)}"
            self.to_name[raw] = name
            self.to_raw[name] = raw
        return self.to_name[raw]

    def norm(self, value: Any) -> Any:
        if isinstance(value, str):
            return _CUT_ULID.sub("#cut", _ULID.sub(lambda m: self.name(m[0]), value))
        if isinstance(value, bytes):
            return self.norm(value.decode())
        if isinstance(value, dict):
            return {self.norm(k): self.norm(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            out = [self.norm(v) for v in value]
            if hasattr(value, "_fields"):  # a named tuple: keep its field names
                return dict(zip(value._fields, out, strict=True))
            return out
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
            return {"__type": type(value).__name__, **self.norm(fields)}
        return value

    def raw(self, value: Any) -> Any:
        """A normalized value back in this backend's ids."""
        if isinstance(value, str):
            return re.sub(r"#\d+", lambda m: self.to_raw.get(m[0], m[0]), value)
        return value


def first_difference(a: Any, b: Any, path: str = "") -> str:
    """Where two normalized outcomes first differ, and how: for the failure's message."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if a.get(key, "<absent>") != b.get(key, "<absent>"):
                return first_difference(
                    a.get(key, "<absent>"), b.get(key, "<absent>"), f"{path}.{key}"
                )
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for n, (x, y) in enumerate(zip(a, b, strict=True)):
            if x != y:
                return first_difference(x, y, f"{path}[{n}]")
    return f"{path or 'the value'}: sqlite {a!r} != postgres {b!r}"


def outcome(ids: Ids, result: Any) -> Any:
    if isinstance(result, BaseException):
        field = getattr(result, "field", None)
        return ("error", type(result).__name__, field)
    return ids.norm(result)


@dataclasses.dataclass
class Model:
    """What the steps know exists, in normalized names (the same on both sides)."""

    sessions: list[str] = dataclasses.field(default_factory=list)
    entities: list[str] = dataclasses.field(default_factory=list)
    turns: list[str] = dataclasses.field(default_factory=list)  # committed, raw = shared
    outbox: list[str] = dataclasses.field(default_factory=list)
    timers: list[str] = dataclasses.field(default_factory=list)
    workers: list[str] = dataclasses.field(default_factory=list)
    running: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (turn, session)
    conversations: list[Conversation] = dataclasses.field(default_factory=list)

    def add(self, bucket: list[Any], value: Any) -> None:
        if value is not None and value not in bucket:
            bucket.append(value)


Step = Callable[[LedgerPort, Ids], Awaitable[Any]]


class Twin:
    """The two ports, stepped together."""

    def __init__(self, sqlite: LedgerPort, pg: LedgerPort) -> None:
        self.sides = [(sqlite, Ids()), (pg, Ids())]
        self.model = Model()
        self.log: list[str] = []
        self.clock = itertools.count(1_700_000_000_000, 1000)

    def now(self) -> int:
        return next(self.clock)

    async def both(self, what: str, step: Step) -> Any:
        """Run `step` on each side; the normalized outcome, which must agree."""
        self.log.append(what)
        outs = []
        for port, ids in self.sides:
            try:
                result: Any = await step(port, ids)
            except (LedgerLookupError, HeadMoved, ValueError) as exc:
                result = exc
            outs.append(outcome(ids, result))
        sqlite, pg = outs
        if sqlite != pg:
            steps = "\n".join(self.log)
            raise AssertionError(
                f"step {len(self.log)} {what} diverges at {first_difference(sqlite, pg)}\n{steps}"
            )
        return sqlite


def inbound(channel: str, sender: str, msg_id: str, text: str) -> InboundRecord:
    return InboundRecord(
        channel, msg_id, sender, sender.title(), "dm", sender, None, text, None, None, None, None
    )


def turn_record(
    turn_id: str, session: str, parent: str | None, inputs: list[Any], now: int, **extra: Any
) -> TurnRecord:
    return TurnRecord(
        turn_id=turn_id,
        session=session,
        parent_id=parent,
        type=extra.pop("type", "turn"),
        status=extra.pop("status", "completed"),
        reason=None,
        error=None,
        output=extra.pop("output", "a reply"),
        engine="echo",
        model="m",
        started_at=now,
        completed_at=now + 1,
        prompt_tokens=3,
        completion_tokens=2,
        inputs=inputs,
        item_status="done",
        **extra,
    )


async def step_ingest(t: Twin, data: st.DataObject) -> None:
    batch = data.draw(
        st.lists(
            st.tuples(st.sampled_from(SENDERS), st.integers(0, 6), st.sampled_from(TEXTS)),
            min_size=1,
            max_size=3,
        )
    )
    spec = data.draw(st.sampled_from(SPECS))
    now = t.now()

    async def run(port: LedgerPort, ids: Ids) -> Any:
        recs = [(inbound(ch, s, f"m{n}", text), spec) for (ch, s), n, text in batch]
        return await port.ingest(recs, now)

    accepted = await t.both(f"ingest {batch} {spec}", run)
    if isinstance(accepted, list):
        for acc in accepted:
            t.model.add(t.model.sessions, acc["session"])
            t.model.add(t.model.entities, acc["entity"])
        for (ch, s), _, _ in batch:
            t.model.add(t.model.conversations, Conversation(ch, "dm", s, None))


async def step_merge(t: Twin, data: st.DataObject) -> None:
    if len(t.model.entities) < 2:
        return
    src, into = data.draw(st.permutations(t.model.entities))[:2]
    now = t.now()
    result = await t.both(
        f"merge {src} into {into}",
        lambda port, ids: port.merge_entities(ids.raw(src), ids.raw(into), now),
    )
    if isinstance(result, dict):
        t.model.add(t.model.sessions, result.get("primary"))


async def step_mark_running(t: Twin, data: st.DataObject) -> None:
    if not t.model.sessions:
        return
    session = data.draw(st.sampled_from(t.model.sessions))
    turn_id = new_id()
    now = t.now()

    async def run(port: LedgerPort, ids: Ids) -> Any:
        items = [i for i in await port.open_items(ids.raw(session)) if i.status == "queued"]
        if not items:
            return None
        await port.submit_mark_running(turn_id, [i.id for i in items], now).result()
        return [i.id for i in items]

    if await t.both(f"mark running {session} {turn_id}", run):
        t.model.running.append((turn_id, session))


async def step_turn(t: Twin, data: st.DataObject) -> None:
    """Commit a turn on a session's head (or a stale parent): its queued or running
    items, with tool calls, events and a reply drawn."""
    if not t.model.sessions:
        return
    if bool(t.model.running) and data.draw(st.booleans()):
        turn_id, session = t.model.running.pop(data.draw(st.integers(0, len(t.model.running) - 1)))
        running = True
    else:
        turn_id, session, running = new_id(), data.draw(st.sampled_from(t.model.sessions)), False
    stale = data.draw(st.integers(0, 5)) == 0
    kind = data.draw(st.sampled_from(["completed", "completed", "aborted", "failed"]))
    tools = data.draw(st.integers(0, 2))
    events = data.draw(
        st.lists(
            st.sampled_from(
                [
                    ("decision", {"text": "use tea"}),
                    ("decision", {"text": 'Héron 50% off_sale \\ "q"'}),
                    ("intent", {"text": "greet"}),
                    ("file", {"path": "a.txt", "op": "write", "content": "one"}),
                    ("file", {"path": "b.txt", "op": "create", "content": "two"}),
                    ("error", {"text": "oops"}),
                ]
            ),
            max_size=3,
        )
    )
    output = data.draw(st.sampled_from(["a reply", "herons are grey", "tea please", ""]))
    reply = data.draw(st.sampled_from([None, "chat", "mail"]))
    out_id = new_id()
    now = t.now()

    async def run(port: LedgerPort, ids: Ids) -> Any:
        label = ids.raw(session)
        start = await port.session_start(label)
        head = start.start.head
        if stale and head is not None:
            head = None
        waiting = await port.open_items(label)
        if running:
            items = [i for i in waiting if i.turn_id == turn_id]
        else:
            items = [i for i in waiting if i.status == "queued"]
        frame = orjson.dumps({"type": "deliver", "session": label, "text": output}).decode()
        rec = turn_record(
            turn_id,
            label,
            head,
            items,
            now,
            status=kind,
            output=output,
            tool_calls=[
                ToolCall(f"{turn_id}-c{k}", "edit_file", '{"path": "a.txt"}', "ok", "ok")
                for k in range(tools)
            ],
            events=[(k, dict(p)) for k, p in events],
            outbox=(out_id, reply, frame) if reply else None,
        )
        try:
            return await port.submit_turn(rec).result()
        except HeadMoved:
            await port.submit_orphan(rec).result()
            return "orphan"

    what = f"turn {turn_id} on {session} stale={stale} {kind} tools={tools} {events} {reply}"
    result = await t.both(what, run)
    if result != "orphan":
        t.model.turns.append(turn_id)
        if reply:
            t.model.outbox.append(out_id)


async def step_compaction(t: Twin, data: st.DataObject) -> None:
    if not t.model.sessions:
        return
    session = data.draw(st.sampled_from(t.model.sessions))
    turn_id = new_id()
    now = t.now()

    async def run(port: LedgerPort, ids: Ids) -> Any:
        head = (await port.session_start(ids.raw(session))).start.head
        if head is None:
            return None
        rec = turn_record(
            turn_id,
            ids.raw(session),
            head,
            [],
            now,
            type="compaction",
            output="",
            compaction={
                "summary": "they talked about tea",
                "summarized_through_turn_id": head,
                "first_kept_turn_id": None,
                "turns_summarized": 1,
                "trigger": "manual",
            },
        )
        return await port.submit_turn(rec).result()

    if await t.both(f"compaction {turn_id} of {session}", run) is not None:
        t.model.turns.append(turn_id)


async def step_fork(t: Twin, data: st.DataObject) -> None:
    if not t.model.turns:
        return
    turn_id = data.draw(st.sampled_from(t.model.turns))
    label = data.draw(st.sampled_from([None, "fork-a", "fork-b"]))
    now = t.now()
    made = await t.both(
        f"fork {turn_id} as {label}", lambda port, ids: port.fork(turn_id, label, now)
    )
    if isinstance(made, str):
        t.model.add(t.model.sessions, made)


async def step_outbox(t: Twin, data: st.DataObject) -> None:
    channel = data.draw(st.sampled_from(["chat", "mail"]))
    now = t.now()
    if bool(t.model.outbox) and data.draw(st.booleans()):
        some = data.draw(st.lists(st.sampled_from(t.model.outbox), min_size=1, max_size=2))
        await t.both(
            f"delivered {some}", lambda port, ids: port.submit_delivered(some, now).result()
        )
    elif bool(t.model.outbox) and data.draw(st.booleans()):
        some = data.draw(st.lists(st.sampled_from(t.model.outbox), min_size=1, max_size=2))
        node = data.draw(st.sampled_from(["a", "b"]))
        await t.both(
            f"claim {some} for {node}",
            lambda port, ids: port.submit_claim_outbox(some, node, now, 5_000).result(),
        )
    else:
        await t.both(
            f"claimable {channel}",
            lambda port, ids: port.claimable_outbox(channel, "a", now, 5_000, 3),
        )


async def step_timer(t: Twin, data: st.DataObject) -> None:
    choice = data.draw(st.integers(0, 3))
    now = t.now()
    if choice == 0 and t.model.sessions:
        session = data.draw(st.sampled_from([*t.model.sessions, "system:beat"]))
        in_s = data.draw(st.sampled_from([0, 1, 5]))
        every = data.draw(st.sampled_from([None, 2]))
        spec = parse_spec("ping", in_s, None, every, now)
        info = await t.both(
            f"add timer {session} in {in_s} every {every}",
            lambda port, ids: port.add_timer(ids.raw(session), spec, now),
        )
        if isinstance(info, dict):
            t.model.add(t.model.timers, info["timer"])
            t.model.add(t.model.sessions, info["session"])
    elif choice == 1 and t.model.timers:
        timer = data.draw(st.sampled_from(t.model.timers))
        await t.both(
            f"cancel timer {timer}", lambda port, ids: port.cancel_timer(ids.raw(timer), now)
        )
    elif choice == 2 and t.model.timers:
        timer = data.draw(st.sampled_from(t.model.timers))
        at = now + data.draw(st.sampled_from([0, 3_000, 10_000]))
        await t.both(
            f"fire timer {timer} at {at}", lambda port, ids: port.fire_timer(ids.raw(timer), at)
        )
    else:
        at = now + data.draw(st.sampled_from([0, 3_000, 10_000]))
        await t.both(f"fire due at {at}", lambda port, ids: port.fire_due_timers(at, 2))


async def step_thread(t: Twin, data: st.DataObject) -> None:
    if not t.model.sessions:
        return
    session = data.draw(st.sampled_from(t.model.sessions))
    choice = data.draw(st.integers(0, 2))
    now = t.now()
    if choice == 0:
        await t.both(
            f"reset {session}",
            lambda port, ids: port.reset_session(ids.raw(session), "operator", now),
        )
    elif choice == 1:

        async def cut(port: LedgerPort, ids: Ids) -> Any:
            pending = (await port.session_start(ids.raw(session))).start.pending_thread
            if pending is None:
                return await port.submit_new_thread(ids.raw(session), now).result()
            number, reason, _ = pending
            return await port.submit_new_thread(ids.raw(session), now, number, reason).result()

        await t.both(f"cut {session}", cut)
    else:
        carry = Carry(new_id(), "Summary: tea.")

        async def rollover(port: LedgerPort, ids: Ids) -> Any:
            pending = (await port.session_start(ids.raw(session))).start.pending_thread
            if pending is None or pending[1] != "turn_limit":
                return None
            number, reason, _ = pending
            return await port.submit_new_thread(
                ids.raw(session), now, number, reason, carry
            ).result()

        if await t.both(f"rollover {session} carry {carry.turn_id}", rollover) is not None:
            t.model.turns.append(carry.turn_id)


async def step_items(t: Twin, data: st.DataObject) -> None:
    if not t.model.sessions:
        return
    session = data.draw(st.sampled_from(t.model.sessions))
    choice = data.draw(st.integers(0, 3))
    pick = data.draw(st.integers(0, 3))
    now = t.now()

    async def item_of(port: LedgerPort, ids: Ids) -> str | None:
        items = await port.open_items(ids.raw(session))
        return items[pick % len(items)].id if items else None

    if choice == 0:

        async def cancel(port: LedgerPort, ids: Ids) -> Any:
            item = await item_of(port, ids)
            return await port.cancel_item(ids.raw(session), item or "no-such-item", now)

        await t.both(f"cancel item {pick} of {session}", cancel)
    elif choice == 1:

        async def drop(port: LedgerPort, ids: Ids) -> Any:
            item = await item_of(port, ids)
            if item is None:
                return None
            return await port.submit_item_status([(item, "dropped", "cap:old")], now).result()

        await t.both(f"drop item {pick} of {session}", drop)
    elif choice == 2:
        t.model.running = [r for r in t.model.running if r[1] != session]
        await t.both(
            f"recover {session}", lambda port, ids: port.recover_crashed(now, ids.raw(session))
        )
    else:
        patches: list[dict[str, Any]] = [{"a": 1}, {"a": None, "b": [1]}, {"c": {"d": 2}}]
        patch = data.draw(st.sampled_from(patches))
        await t.both(
            f"scratchpad {session} {patch}",
            lambda port, ids: port.scratchpad_merge(ids.raw(session), patch, now),
        )


async def step_route(t: Twin, data: st.DataObject) -> None:
    if not t.model.conversations or not t.model.sessions:
        return
    conv = data.draw(st.sampled_from(t.model.conversations))
    now = t.now()
    if data.draw(st.booleans()):
        session = data.draw(st.sampled_from(t.model.sessions))
        await t.both(
            f"bind {conv} to {session}",
            lambda port, ids: port.route_bind(conv, ids.raw(session), now),
        )
    else:
        await t.both(f"unbind {conv}", lambda port, ids: port.route_unbind(conv))


async def step_worker(t: Twin, data: st.DataObject) -> None:
    choice = data.draw(st.integers(0, 2))
    now = t.now()
    if choice == 0 and t.model.sessions:
        parent = data.draw(st.sampled_from(t.model.sessions))
        done = await t.both(
            f"dispatch from {parent}",
            lambda port, ids: port.dispatch(
                parent=ids.raw(parent), parent_turn=None, tool_call=None,
                target={"kind": "new_session"}, task="count herons", persona=None,
                limits=LIMITS, now=now,
            ),
        )  # fmt: skip
        if isinstance(done, dict):
            t.model.add(t.model.sessions, done["session"])
            t.model.add(t.model.workers, done["session"])
    elif choice == 1 and t.model.workers:
        worker = data.draw(st.sampled_from(t.model.workers))
        await t.both(
            f"worker done {worker}",
            lambda port, ids: port.report_worker_done(ids.raw(worker), "found 3", now),
        )
    else:
        at = now + data.draw(st.sampled_from([0, 120_000]))
        await t.both(f"sweep at {at}", lambda port, ids: port.sweep_worker_timeouts(at))


async def step_library(t: Twin, data: st.DataObject) -> None:
    session = data.draw(st.sampled_from(["lib-1", "lib-2"]))
    call = data.draw(st.sampled_from(["append", "append", "pop", "clear", "items", "get"]))
    args: dict[str, Any] = {"session": session}
    if call == "append":
        args["items"] = data.draw(st.lists(st.sampled_from([1, "x", {"k": [1, 2]}]), max_size=3))
    now = t.now()
    await t.both(f"library {call} {args}", lambda port, ids: port.library_call(call, args, now))


async def step_reply_ops(t: Twin, data: st.DataObject) -> None:
    """Feedback on a reply, a command's reply and override, a turn's title."""
    choice = data.draw(st.integers(0, 2))
    now = t.now()
    if choice == 0 and t.model.outbox:
        out_id = data.draw(st.sampled_from(t.model.outbox))
        channel = data.draw(st.sampled_from(["chat", "mail"]))
        msg = f"fb{data.draw(st.integers(0, 3))}"
        reaction = data.draw(st.sampled_from(["+1", "-1"]))
        await t.both(
            f"feedback {msg} on {out_id} via {channel}",
            lambda port, ids: port.submit_feedback(
                channel, out_id, msg, "ann", reaction, "nice", now
            ).result(),
        )
    elif choice == 1 and t.model.sessions:
        session = data.draw(st.sampled_from(t.model.sessions))
        override = data.draw(st.sampled_from(['{"mode":"collect"}', None, False]))
        out_id = new_id()

        async def command(port: LedgerPort, ids: Ids) -> Any:
            items = await port.open_items(ids.raw(session))
            queued = [i for i in items if i.status == "queued"]
            if not queued:
                return None
            label = ids.raw(session)
            reply = (out_id, label, "chat", orjson.dumps({"type": "deliver"}).decode())
            await port.submit_command_done(queued[0].id, "command", reply, override, now).result()
            return await port.queue_override(label)

        if await t.both(f"command in {session} override {override}", command) is not None:
            t.model.outbox.append(out_id)
    elif t.model.turns:
        turn_id = data.draw(st.sampled_from(t.model.turns))
        title = data.draw(st.sampled_from(["Tea talk", "Héron"]))
        await t.both(
            f"title {turn_id} {title}", lambda port, ids: port.set_title(turn_id, title, "model")
        )


async def step_chat_bind(t: Twin, data: st.DataObject) -> None:
    """`/fork` or `/switch` from a conversation, on its contact's waiting item."""
    now = t.now()
    if t.model.conversations and t.model.sessions:
        conv = data.draw(st.sampled_from(t.model.conversations))
        verb: Literal["fork", "switch"] = data.draw(st.sampled_from(["fork", "switch"]))
        target = data.draw(st.sampled_from(t.model.sessions)) if verb == "switch" else None
        out_id = new_id()

        async def bind(port: LedgerPort, ids: Ids) -> Any:
            home = (await port.contact_show(conv.channel, conv.peer_id))["session"]
            if home is None:  # a contact with no DM session of its own
                return None
            items = [i for i in await port.open_items(home) if i.status == "queued"]
            if not items:
                return None
            frame = orjson.dumps({"type": "deliver", "session": home, "text": ""}).decode()
            cmd = BindCommand(
                verb, items[0].id, home, conv, ids.raw(target) if target else None, out_id, frame
            )
            return await port.submit_chat_bind(cmd, now).result()

        made = await t.both(f"/{verb} {target} from {conv}", bind)
        if isinstance(made, str):
            t.model.outbox.append(out_id)
            routes = await t.both("routes", lambda port, ids: port.route_list(None))
            for route in routes:
                t.model.add(t.model.sessions, route["session"])


async def step_queries(t: Twin, data: st.DataObject) -> None:
    """Reads with filters, mid-sequence: events by text and kind, recall by person."""
    choice = data.draw(st.integers(0, 2))
    if choice == 0:
        text = data.draw(st.sampled_from([None, *EVENT_TEXTS]))
        kind = data.draw(st.sampled_from([None, "decision", "feedback", "file"]))
        await t.both(
            f"events kind={kind} text={text!r}",
            lambda port, ids: port.events_query(
                kind=kind, session=None, turn=None, text=text, limit=50
            ),
        )
    elif choice == 1 and t.model.sessions:
        session = data.draw(st.sampled_from(t.model.sessions))
        word = data.draw(st.sampled_from(WORDS))

        async def person(port: LedgerPort, ids: Ids) -> Any:
            found = await port.recall(
                Request("search", ids.raw(session), 20, query=word, person=True)
            )
            hits = getattr(found, "hits", [])
            return sorted((h.session, h.turn, h.role, h.snippet) for h in hits), getattr(
                found, "also", ()
            )

        await t.both(f"recall {word} as the person of {session}", person)
    else:
        now = t.now()  # one cutoff for both sides: read inside the step, each had its own
        await t.both("health", lambda port, ids: port.health_reads(now))


STEP_KINDS = [
    step_ingest,
    step_ingest,
    step_ingest,
    step_merge,
    step_mark_running,
    step_turn,
    step_turn,
    step_turn,
    step_compaction,
    step_fork,
    step_outbox,
    step_timer,
    step_thread,
    step_items,
    step_route,
    step_worker,
    step_library,
    step_reply_ops,
    step_chat_bind,
    step_queries,
]


async def compare_reads(t: Twin) -> None:
    """What every read reports at the end, for every session (and all of them)."""
    await t.both("counts", lambda port, ids: port.counts())
    await t.both("sessions", lambda port, ids: port.sessions_list(None, 100))
    await t.both("open items", lambda port, ids: port.open_items())
    await t.both("timers", lambda port, ids: port.list_timers(None))
    await t.both("next timer", lambda port, ids: port.next_timer_at())
    await t.both("routes", lambda port, ids: port.route_list(None))
    await t.both("events", lambda port, ids: port.events_query(
        kind=None, session=None, turn=None, text=None, limit=200))  # fmt: skip
    for channel in ("chat", "mail"):
        await t.both(f"outbox {channel}", reading("pending_outbox", channel, 100))
    for session in t.model.sessions:
        for what, read in [
            ("show", reading("session_show", session, 100)),
            ("start", reading("session_start", session)),
            ("items", reading("open_items", session)),
            ("threads", reading("list_threads", session)),
            ("state", reading("session_state", session)),
            ("scratchpad", reading("scratchpad_get", session)),
            ("resolve", reading("resolve_session", session)),
            ("workers", reading("workers_list", session, None)),
            ("files", reading("file_list", session)),
            ("export", reading("export_session", session, 0)),
        ]:
            await t.both(f"{what} {session}", read)
        await t.both(f"summary {session}", summarizing(session))
        for word in WORDS:
            await t.both(f"search {word} in {session}", searching(word, session))
    for word in WORDS:
        await t.both(f"search {word}", searching(word, None))
    for label in ("lib-1", "lib-2"):
        await t.both(
            f"library turns {label}", reading("library_call", "turns", {"session": label}, 0)
        )


def reading(method: str, *args: Any) -> Step:
    """A read of the port named `method`, its arguments in each side's own ids."""
    return lambda port, ids: getattr(port, method)(*(ids.raw(a) for a in args))


def summarizing(session: str) -> Step:
    return lambda port, ids: port.recall(Request("summary", ids.raw(session), 5))


def searching(word: str | None, session: str | None) -> Step:
    async def search(port: LedgerPort, ids: Ids) -> Any:
        if word is None:
            return None
        return await hit_set(port.recall_search(word, ids.raw(session), 50))

    return search


async def hit_set(hits: Awaitable[list[Any]]) -> list[tuple[str, str, str, str]]:
    """Which messages were found and their snippets, not their rank or score."""
    return sorted((h.session, h.turn, h.role, h.snippet) for h in await hits)


async def run_example(sqlite_path: Path, dsn: str, data: st.DataObject) -> None:
    from ledger import postgres
    from ledger.postgres import devcluster

    devcluster.empty_database(dsn)
    async with (
        Ledger.open(sqlite_path, writer="thread", check_s=0) as sqlite,
        postgres.open(dsn) as pg,
    ):
        twin = Twin(sqlite, pg)
        for _ in range(data.draw(st.integers(1, STEPS), label="steps")):
            step = data.draw(st.sampled_from(STEP_KINDS), label="step")
            await step(twin, data)
        await compare_reads(twin)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    phases=[Phase.generate] if os.environ.get("PORT_DIFF_SHRINK") == "0" else list(Phase),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_sqlite_and_postgres_agree_on_random_sequences(
    pg_conformance_db: str, data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory(prefix="diff-") as tmp:
        anyio.run(run_example, Path(tmp) / "ledger.db", pg_conformance_db, data)
