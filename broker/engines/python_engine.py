"""`kind = "python"`: an engine of the operator's own, run in the daemon's process.

`entry` names either an engine (an object with `async run(request, io)`) or a
factory (a class or function) that is called once with the `[engine]` table as a
dict and returns one. What cannot serve as an engine is a `ConfigError` naming
`engine.entry`, found at start. The engine runs like the built-in ones: inside the
turn's cancel scope, so an engine that raises fails its turn with a sentence and one
that hangs is stopped at `engine.timeout_s`; the daemon goes on either way.

An engine that blocks the event loop (a synchronous HTTP call, `time.sleep`) holds
up every other session while it does. A watcher runs beside each turn and, when
the loop stood still longer than `BLOCK_WARN_S`, logs a warning naming the engine
and how long: the cure is `await anyio.to_thread.run_sync(...)` (docs/engines.md).
"""

from __future__ import annotations

import inspect
import time
from typing import Any

import anyio

from broker.config import ConfigError, EngineSettings
from broker.engines.base import Engine, EngineError, TurnIO
from broker.engines.loader import resolve
from core.engine_types import EngineResult, TurnRequest
from plumbing import logs

log = logs.get("broker.engines")

# A loop that stood still longer than this while an engine ran is reported.
BLOCK_WARN_S = 0.5
# How often the watcher looks; a block shorter than this may go unseen.
WATCH_EVERY_S = 0.1


def is_engine(candidate: object) -> bool:
    """An object with a coroutine function `run`, not a class (a class is a factory)."""
    run = getattr(candidate, "run", None)
    return not isinstance(candidate, type) and inspect.iscoroutinefunction(run)


def check_entry(found: object, key: str, reference: str) -> None:
    """ConfigError unless `found` is an engine or something that could make one."""
    if is_engine(found) or callable(found):
        return
    raise ConfigError(
        f"invalid configuration: {key} = {reference!r} is a {type(found).__name__}, neither"
        " an engine (an object with async run(request, io)) nor a factory returning one"
    )


def load_python_engine(settings: EngineSettings, key: str = "engine.entry") -> PythonEngine:
    reference = settings.entry or ""
    found = resolve(reference, key)
    check_entry(found, key, reference)
    engine = found
    if not is_engine(found):
        assert callable(found)
        try:
            engine = found(settings.model_dump(mode="json"))
        except Exception as exc:  # the operator's factory
            raise ConfigError(
                f"invalid configuration: {key} = {reference!r}: the factory raised"
                f" {type(exc).__name__}: {exc}"
            ) from exc
        if not is_engine(engine):
            raise ConfigError(
                f"invalid configuration: {key} = {reference!r}: the factory returned a"
                f" {type(engine).__name__}, not an engine (an object with async run(request, io))"
            )
    return PythonEngine(engine, reference, settings.context_window)


class _Watch:
    """When the loop last ran the watcher, and the worst stand-still seen since."""

    def __init__(self, engine: str) -> None:
        self.engine = engine
        self.mark = time.monotonic()

    def check(self) -> None:
        now = time.monotonic()
        stood = now - self.mark - WATCH_EVERY_S
        self.mark = now
        if stood >= BLOCK_WARN_S:
            log.warning(
                "an engine blocked the event loop: every session waited meanwhile; run"
                " blocking code with `await anyio.to_thread.run_sync(...)`",
                engine=self.engine,
                blocked_s=round(stood, 2),
            )

    async def run(self) -> None:
        while True:
            await anyio.sleep_until(self.mark + WATCH_EVERY_S)
            self.check()


class PythonEngine:
    """The operator's engine, with a watch on the event loop while it runs."""

    def __init__(self, inner: Any, reference: str, context_window: int) -> None:
        self.inner: Engine = inner
        self.name = str(getattr(inner, "name", "") or reference)
        self.accepts_steering = bool(getattr(inner, "accepts_steering", False))
        self.context_window = int(getattr(inner, "context_window", 0) or context_window)

    @property
    def workspace(self) -> str | None:
        """The folder the engine reports it works in, if it reports one."""
        found = getattr(self.inner, "workspace", None)
        return found if isinstance(found, str) and found else None

    async def run(self, request: TurnRequest, io: TurnIO) -> EngineResult:
        watch = _Watch(self.name)
        failure: Exception | None = None
        result: object = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch.run)
            try:
                result = await self.inner.run(request, io)
            except Exception as exc:  # re-raised below, outside the group
                failure = exc
            watch.check()  # a block after its last await, too
            tg.cancel_scope.cancel()
        if failure is not None:
            raise failure
        if not isinstance(result, EngineResult):
            raise EngineError(
                f"the agent {self.name} returned a {type(result).__name__}, not an EngineResult"
            )
        return result

    async def aclose(self) -> None:
        close = getattr(self.inner, "aclose", None)
        if close is not None:
            await close()
