"""The actor on virtual time: fake ports, a scripted engine, and trio's MockClock,
which jumps to the next deadline whenever every task waits. Debounce, idle
retirement, the engine timeout, a hung summarizer and progress saves take virtual
seconds here, not real ones."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
from trio.testing import MockClock

from broker.config import Settings
from broker.context import TokenCounter
from broker.context.session import SessionContext
from broker.engines.base import Engine, TurnIO
from broker.mailbox.actor import SessionActor
from broker.mailbox.commands import CompactRequest
from broker.mailbox.ports import CommandTarget
from broker.mailbox.turn_commit import Written
from broker.mailbox.turn_parts import ARCHIVE_LINES
from core.engine_types import EngineResult, ToolSpec, TurnRequest
from ledger.port.errors import WriterOverloaded
from ledger.port.records import ActorStart, Carry, ItemInfo, TurnRecord

pytestmark = pytest.mark.anyio
COUNTER = TokenCounter()


@pytest.fixture
def anyio_backend() -> Any:
    return ("trio", {"clock": MockClock(autojump_threshold=0)})


class ScriptedEngine:
    """Replies with its inputs; each call's behaviour comes from `script` (seconds
    to stream over, or "hang"); summarizer calls follow `summarize`."""

    name = "scripted"
    accepts_steering = False
    context_window = 8192

    def __init__(self) -> None:
        self.script: list[float | str] = []
        self.summarize: float | str = 0.0
        self.calls: list[tuple[float, TurnRequest]] = []
        self.note: Callable[[str, Any], None] = lambda what, detail: None

    async def run(self, request: TurnRequest, io: TurnIO) -> EngineResult:
        self.calls.append((anyio.current_time(), request))
        summarizing = "compact a conversation" in (request.system_prompt or "")
        self.note("engine", "summarize" if summarizing else "turn")
        how = self.summarize if summarizing else (self.script.pop(0) if self.script else 0.0)
        if how == "hang":
            await anyio.sleep_forever()
        text = "\n".join(m.content for m in request.inputs)
        if summarizing:
            return EngineResult(text="a summary", model="scripted")
        words = text.split() or [""]
        for word in words:  # streamed evenly over `how` seconds
            await io.delta(word + " ")
            await anyio.sleep(float(how) / len(words))
        return EngineResult(text=text, prompt_tokens=1, completion_tokens=1, model="scripted")

    async def aclose(self) -> None:
        return None


@dataclass
class Ports:
    """The actor's ports, recording what it asked for and when (virtual seconds)."""

    settings: Settings
    engine: ScriptedEngine = field(default_factory=ScriptedEngine)
    counter: TokenCounter = COUNTER
    log: list[tuple[float, str, Any]] = field(default_factory=list)
    commits: list[TurnRecord] = field(default_factory=list)
    retired: anyio.Event = field(default_factory=anyio.Event)
    began: anyio.Event = field(default_factory=anyio.Event)  # a turn's items marked running
    hint_found: set[str] = field(default_factory=set)  # terms older messages hold
    room: bool = True  # in the ledger's queue of writes; `make_room` changes it
    room_made: anyio.Event = field(default_factory=anyio.Event)

    def __post_init__(self) -> None:
        self.engine.note = self.note

    def clock(self) -> float:
        return anyio.current_time()

    def note(self, what: str, detail: Any = None) -> None:
        self.log.append((anyio.current_time(), what, detail))

    def send_delta(self, channel: str, session: str, frame: dict[str, Any]) -> None:
        self.note("delta", frame["text"])

    async def recover(self, label: str) -> list[ItemInfo]:
        return []

    async def settled(self) -> None:
        return None

    async def load(self, label: str) -> tuple[ActorStart, SessionContext]:
        start = ActorStart(None, None, None, 0, (0, 0), "dm", None)
        return start, SessionContext(self.counter)

    def mark_running(self, turn_id: str, item_ids: list[str], started_ms: int) -> None:
        self.note("running", item_ids)
        self.began.set()

    def has_room(self) -> bool:
        return self.room

    async def admit(self) -> None:
        """As the ledger's: at most `ledger.writer_wait_s` (virtual seconds) for room."""
        with anyio.move_on_after(self.settings.ledger.writer_wait_s):
            while not self.room:
                await self.room_made.wait()
        if not self.room:
            raise WriterOverloaded("the ledger writer queue stayed full")

    def make_room(self, room: bool = True) -> None:
        self.room = room
        self.room_made.set()
        self.room_made = anyio.Event()

    async def save_progress(self, turn_id: str, label: str, text: str) -> bool:
        try:
            await self.admit()
        except WriterOverloaded:
            self.note("not saved", text)
            return False
        self.note("saved", text)
        return True

    def write_events(
        self,
        turn_id: str,
        label: str,
        parent: str | None,
        first_seq: int,
        events: list[tuple[str, dict[str, Any]]],
    ) -> None:
        self.note("events", [kind for kind, _ in events])
        return None  # refused: they go with the commit

    def drop_item(self, label: str, item_id: str, reason: str, item: ItemInfo | None) -> None:
        self.note("dropped", item_id)

    def new_thread(
        self, label: str, previous: str | None, thread: int | None, reason: str, carry: Carry | None
    ) -> None:
        self.note("new thread")

    async def commit_turn(self, rec: TurnRecord) -> Written:
        self.note("commit", rec.type)
        self.commits.append(rec)
        return "thread"

    def engine_for(self, persona: str | None) -> Engine:
        return self.engine

    def default_mode(self, item: ItemInfo) -> Any:
        return None

    def tool_specs(self, label: str, kind: str) -> tuple[ToolSpec, ...]:
        return ()

    async def call_tool(
        self, label: str, turn_id: str, name: str, args: dict[str, Any], call_id: str
    ) -> str:
        raise AssertionError("no tools here")

    async def recall_hint(
        self, label: str, terms: tuple[str, ...], own_msg_ids: tuple[str, ...]
    ) -> list[str]:
        self.note("recall hint", terms)
        return [t for t in terms if t in self.hint_found]

    def chat_command(self, actor: CommandTarget, item: ItemInfo, overloaded: bool) -> None:
        self.note("overloaded" if overloaded else "command", item.text)

    def turn_ended(self) -> None:
        self.note("turn ended")

    def retire(self, actor: object) -> None:
        self.note("retired")
        self.retired.set()


def item(n: int, text: str = "hello", mode: str = "followup") -> ItemInfo:
    return ItemInfo(
        f"i{n}", n, "dm:a", "person", mode, "queued", None, None,
        None, f"m{n}", "alice", "Alice", "dm", "alice", None, text,
    )  # fmt: skip


def ports_with(**sections: dict[str, Any]) -> Ports:
    queue = {"idle_stop_s": 30.0, **sections.pop("queue", {})}
    return Ports(Settings(queue=queue, **sections))  # type: ignore[arg-type]


def at(ports: Ports, what: str) -> list[float]:
    return [t for t, w, _ in ports.log if w == what]


async def test_collect_items_wait_their_quiet_period_then_run_as_one_turn() -> None:
    ports = ports_with(queue={"debounce_ms": 2000})
    actor = SessionActor("dm:a", ports)
    async with anyio.create_task_group() as tg:
        tg.start_soon(actor.run, [])
        start = anyio.current_time()
        for n in range(1, 4):
            actor.post(item(n, f"part {n}", mode="collect"))
        await ports.retired.wait()
    (when, request), = ports.engine.calls  # fmt: skip
    assert [m.content for m in request.inputs] == ["part 1", "part 2", "part 3"]
    assert when - start == pytest.approx(2.0)  # the quiet period, in virtual seconds
    assert [r.type for r in ports.commits] == ["queue_batch"]


async def test_an_idle_actor_retires_idle_stop_s_after_its_last_turn() -> None:
    ports = ports_with(queue={"idle_stop_s": 30.0})
    ports.engine.script = [3.0]
    actor = SessionActor("dm:a", ports)
    async with anyio.create_task_group() as tg:
        tg.start_soon(actor.run, [])
        actor.post(item(1))
        await ports.retired.wait()
    (ended,) = at(ports, "turn ended")
    (retired,) = at(ports, "retired")
    assert ended == pytest.approx(3.0, abs=0.01)
    assert retired - ended == pytest.approx(30.0, abs=0.06)


async def test_a_compaction_asked_for_during_a_turn_runs_before_the_next_turn() -> None:
    ports = ports_with()
    ports.engine.script = [3.0, 0.0]
    actor = SessionActor("dm:a", ports)
    request = CompactRequest("keep names")
    async with anyio.create_task_group() as tg:
        tg.start_soon(actor.run, [])
        actor.post(item(1, "first thing"))
        await ports.began.wait()
        actor.post(request)  # both during the first turn
        actor.post(item(2, "second thing"))
        await request.done.wait()
        await ports.retired.wait()
    assert [(r.type, r.reason) for r in ports.commits] == [
        ("turn", None),
        ("compaction", "manual"),
        ("turn", None),
    ]
    assert request.turn == ports.commits[1].turn_id
    compacted = at(ports, "commit")[1]
    assert at(ports, "running")[1] >= compacted  # the second turn began after it


async def test_an_engine_past_its_timeout_fails_the_turn_at_the_deadline() -> None:
    ports = ports_with(engine={"timeout_s": 7.0})
    ports.engine.script = ["hang"]
    actor = SessionActor("dm:a", ports)
    async with anyio.create_task_group() as tg:
        tg.start_soon(actor.run, [])
        actor.post(item(1))
        await ports.retired.wait()
    (rec,) = ports.commits
    assert (rec.status, rec.reason) == ("failed", "timeout")
    ((started, _),) = ports.engine.calls
    (committed,) = at(ports, "commit")
    assert committed - started == pytest.approx(7.0, abs=0.01)


async def test_a_hung_summarizer_gives_way_to_the_deterministic_summary() -> None:
    small = {"reserve_reply_tokens": 60, "keep_recent_ratio": 0.25}
    ports = ports_with(engine={**small, "compaction_timeout_s": 4.0})
    ports.engine.summarize = "hang"
    ports.engine.context_window = 400
    actor = SessionActor("dm:a", ports)
    words = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike"
    async with anyio.create_task_group() as tg:
        tg.start_soon(actor.run, [])
        for n in range(1, 11):
            actor.post(item(n, f"message {n}: {words}"))
        await ports.retired.wait()
    compactions = [r for r in ports.commits if r.type == "compaction"]
    assert compactions and all(r.compaction and r.compaction["fallback"] == 1 for r in compactions)
    assert [r.status for r in ports.commits if r.type != "compaction"] == ["completed"] * 10
    # Each compaction took the summarizer's timeout, and was committed before the turn
    # it served began: nothing ran between the summarizer's call and that commit.
    log = ports.log
    asked = [n for n, (_, what, detail) in enumerate(log) if detail == "summarize"]
    assert len(asked) == len(compactions)
    for n in asked:
        (called, _, _), (committed, what, detail) = log[n], log[n + 1]
        assert (what, detail) == ("commit", "compaction")
        assert committed - called == pytest.approx(4.0, abs=0.01)


async def test_a_long_turn_saves_its_output_once_each_period() -> None:
    ports = ports_with(engine={"progress_save_s": 1.0})
    ports.engine.script = [4.0]  # ten words over four seconds
    actor = SessionActor("dm:a", ports)
    async with anyio.create_task_group() as tg:
        tg.start_soon(actor.run, [])
        actor.post(item(1, " ".join("abcdefghij")))
        await ports.retired.wait()
    saves = [(t, d) for t, w, d in ports.log if w == "saved"]
    # Deltas at 0, 0.4, ... 3.6 s: a save at the first delta of each second after the start.
    assert [round(t, 1) for t, _ in saves] == [1.2, 2.4, 3.6]
    assert saves[0][1] == "a b c d "
    assert ports.commits[0].progress_saved


async def test_a_quick_turn_never_saves() -> None:
    ports = ports_with(engine={"progress_save_s": 1.0})
    actor = SessionActor("dm:a", ports)
    async with anyio.create_task_group() as tg:
        tg.start_soon(actor.run, [])
        actor.post(item(1, "a b c"))
        await ports.retired.wait()
    assert at(ports, "saved") == [] and not ports.commits[0].progress_saved


async def test_a_recall_hint_only_once_older_turns_are_out_of_the_context() -> None:
    ports = ports_with(engine={"reserve_reply_tokens": 60, "keep_recent_ratio": 0.25})
    ports.engine.context_window = 400 + COUNTER.count(ARCHIVE_LINES)  # every prompt ends so
    ports.hint_found = {"prod-keys.yaml"}
    actor = SessionActor("dm:a", ports)
    words = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike"
    said = [
        "the key is in vault/prod-keys.yaml",
        "where was prod-keys.yaml?",  # the whole thread still fits: no lookup
        *[f"message {n}: {words}" for n in range(8)],
        "where was prod-keys.yaml again?",
        "and zebra-tools.txt?",
    ]
    async with anyio.create_task_group() as tg:
        tg.start_soon(actor.run, [])
        for n, text in enumerate(said, start=1):
            actor.post(item(n, text))
        await ports.retired.wait()
    turns = [r for _, r in ports.engine.calls if r.inputs and "compact" not in str(r.system_prompt)]
    notes = {r.inputs[0].content: r.notes for r in turns}
    assert notes["where was prod-keys.yaml?"] == ()
    (hint,) = notes["where was prod-keys.yaml again?"]
    assert hint.startswith('[Recall hint: "prod-keys.yaml"')
    assert notes["and zebra-tools.txt?"] == ()  # looked up, not found
    looked_up = [d for _, w, d in ports.log if w == "recall hint"]
    assert looked_up == [("prod-keys.yaml",), ("zebra-tools.txt",)]
