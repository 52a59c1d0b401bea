"""Counting how often an awaitable suspends its task, for tests of event-loop trips."""

from __future__ import annotations

import types
from collections.abc import Awaitable, Generator
from typing import Any, TypeVar, cast

T = TypeVar("T")


@types.coroutine
def counting_suspensions(awaitable: Awaitable[T], counter: list[int]) -> Generator[Any, Any, T]:
    """Await `awaitable`, counting how often it suspends its task (each suspension is
    a wake-up later: a trip through the event loop)."""
    inner = awaitable.__await__()
    sent: Any = None
    thrown: BaseException | None = None
    while True:
        try:
            yielded = inner.throw(thrown) if thrown is not None else inner.send(sent)
        except StopIteration as stop:
            return cast(T, stop.value)
        counter[0] += 1
        sent, thrown = None, None
        try:
            sent = yield yielded
        except BaseException as exc:  # a cancellation goes on to the awaitable
            thrown = exc
