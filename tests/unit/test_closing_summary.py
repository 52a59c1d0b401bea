"""The engine's closing summary (broker/mailbox/closing.py) on trio's MockClock: what
it asks, its bound (a hung engine gives None, the mechanical summary then, at the
engine's timeout in virtual seconds), and when it does not ask at all."""

from __future__ import annotations

from typing import Any, cast

import anyio
import pytest
from trio.testing import MockClock

from broker.config import Settings
from broker.context import TokenCounter
from broker.engines.base import EngineError, TurnIO
from broker.mailbox.closing import FOCUS, engine_summary, newest_fitting
from core.closing import MAX_SUMMARY
from core.engine_types import EngineResult, TurnRequest
from core.packing import Msg, TurnBlock
from core.session_state import EMPTY
from ledger.port.protocols import SessionStart
from ledger.port.records import ActorStart, StoredTurn, Thread

pytestmark = pytest.mark.anyio
COUNTER = TokenCounter()


@pytest.fixture
def anyio_backend() -> Any:
    return ("trio", {"clock": MockClock(autojump_threshold=0)})


class Ledger:
    def __init__(self, turns: list[StoredTurn]) -> None:
        self.thread = Thread(None, turns, EMPTY) if turns else None

    async def session_start(self, label: str) -> SessionStart:
        start = ActorStart(None, None, None, len(self.thread.turns) if self.thread else 0,
                           (0, 0), "dm", None)  # fmt: skip
        return SessionStart(start, self.thread)


class Engine:
    name = "fake"
    accepts_steering = False
    context_window = 8192

    def __init__(self, behaviour: str) -> None:
        self.behaviour = behaviour
        self.asked: list[TurnRequest] = []

    async def run(self, request: TurnRequest, io: TurnIO) -> EngineResult:
        self.asked.append(request)
        if self.behaviour == "hang":
            await anyio.sleep_forever()
        if self.behaviour == "fail":
            raise EngineError("the model is gone")
        text = "x" * (MAX_SUMMARY + 1) if self.behaviour == "long" else "We planned Lisbon."
        return EngineResult(text=text)

    async def aclose(self) -> None:
        return None


THREAD = [
    StoredTurn("t1", [("user", "Plan the trip to Lisbon", None), ("assistant", "Sure.", None)])
]


async def summary(engine: Engine, turns: list[StoredTurn] = THREAD) -> str | None:
    settings = Settings(engine={"timeout_s": 5.0, "compaction_timeout_s": 60.0})
    return await engine_summary(
        cast(Any, Ledger(turns)), settings, lambda persona: engine, COUNTER, "dm:a"
    )


async def test_the_engine_is_asked_as_a_summarizer_and_its_words_kept() -> None:
    engine = Engine("ok")
    assert await summary(engine) == "We planned Lisbon."
    (asked,) = engine.asked
    assert asked.history == () and asked.tools == ()
    assert FOCUS in asked.inputs[0].content and "Plan the trip to Lisbon" in asked.inputs[0].content


@pytest.mark.parametrize("behaviour", ["fail", "long"])
async def test_a_failing_or_wordy_engine_leaves_the_mechanical_summary(behaviour: str) -> None:
    assert await summary(Engine(behaviour)) is None


async def test_a_hung_engine_is_given_up_at_the_engine_timeout() -> None:
    start = anyio.current_time()
    assert await summary(Engine("hang")) is None
    assert anyio.current_time() - start == pytest.approx(5.0)


async def test_nothing_said_or_an_engine_that_cannot_summarize_is_not_asked() -> None:
    engine = Engine("ok")
    assert await summary(engine, []) is None
    engine.summarizes = False  # type: ignore[attr-defined]
    assert await summary(engine) is None
    assert engine.asked == []


def test_the_newest_turns_that_fit_are_kept() -> None:
    blocks = [TurnBlock(f"t{n}", (Msg("user", "x", 10),)) for n in range(5)]
    assert [b.turn_id for b in newest_fitting(blocks, 25)] == ["t3", "t4"]
    assert newest_fitting(blocks, 5) == ()
