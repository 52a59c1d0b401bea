"""Titles by a model, written after the turn, off its path (`[titles] engine`).

Off the turn's path: a committed turn is offered without waiting (a full queue skips
it), one task asks the model, one turn at a time, and the actor never waits on it, so
the next turn does not start later for it. Only a mechanical title is replaced (an
engine's `intent` title stays), with the model's first line, cut like any title
(core/titles.py); a model that fails, hangs past `titles.timeout_s` or says nothing
leaves the mechanical title, with a warning in the log.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc

from broker.config import TitleSettings
from broker.engines.base import Engine, EngineError
from broker.engines.factory import build_engine
from core.engine_types import ChatMessage, TurnRequest
from core.titles import MAX_TITLE, one_line
from ledger.port.protocols import TitlePort, TurnRecord
from plumbing import logs

log = logs.get("broker.titler")
PROMPT = (
    "Write a title for this exchange: at most eight words saying what it was about."
    " Answer with the title alone, on one line, without quotes."
)
MAX_TEXT = 2000  # of each side of the exchange shown to the model


@dataclass(frozen=True, slots=True)
class Job:
    session: str
    turn: str
    text: str


class _QuietIO:
    """The titling model's TurnIO: nothing is streamed, no tools, no steering."""

    async def delta(self, text: str) -> None:
        return None

    def take_steer(self) -> list[ChatMessage]:
        return []

    async def call_tool(
        self, name: str, arguments: dict[str, Any], call_id: str | None = None
    ) -> str:
        raise EngineError("no tools while writing a title")

    def event(self, kind: str, data: dict[str, Any]) -> None:
        return None


class Titler:
    def __init__(self, settings: TitleSettings, engine: Engine | None, ledger: TitlePort) -> None:
        self.settings = settings
        self.engine = engine  # None: off
        self.ledger = ledger
        self._send, self._receive = anyio.create_memory_object_stream[Job](settings.queue)
        self.written = 0

    @classmethod
    def build(cls, settings: TitleSettings, engines: dict[str, Any], ledger: TitlePort) -> Titler:
        engine = build_engine(engines[settings.engine]) if settings.engine else None
        return cls(settings, engine, ledger)

    def offer(self, rec: TurnRecord) -> None:
        """Queue a committed turn for a title, or skip it."""
        if self.engine is None or rec.title_source != "mechanical" or rec.type == "compaction":
            return
        said = "\n".join(i.content for i in rec.inputs)[:MAX_TEXT]
        text = f"Person: {said}\n\nAgent: {rec.output[:MAX_TEXT]}" if said else rec.output
        try:
            self._send.send_nowait(Job(rec.session, rec.turn_id, text[: 2 * MAX_TEXT]))
        except anyio.WouldBlock:
            log.debug("no title by model: the queue is full", session=rec.session, turn=rec.turn_id)

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        task_status.started()
        if self.engine is None:
            return
        try:
            async with self._receive:
                async for job in self._receive:
                    await self._title(job)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(2):
                await self.engine.aclose()

    async def _title(self, job: Job) -> None:
        assert self.engine is not None
        request = TurnRequest(
            session=job.session,
            turn_id=job.turn,
            system_prompt=PROMPT,
            history=(),
            inputs=(ChatMessage("user", job.text),),
        )
        try:
            with anyio.fail_after(self.settings.timeout_s):
                result = await self.engine.run(request, _QuietIO())
            title = one_line(result.text.strip().strip("\"'"), MAX_TITLE)
            if not title:
                raise EngineError("the model wrote no title")
            await self.ledger.set_title(job.turn, title, "model")
            self.written += 1
        except Exception as exc:  # the mechanical title stays
            log.warning(
                "no title by model; the mechanical one stays",
                session=job.session,
                turn=job.turn,
                error=str(exc) or type(exc).__name__,
            )
