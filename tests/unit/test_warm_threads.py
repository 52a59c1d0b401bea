"""The contexts a Temporal node keeps at a session's head (broker/mailbox/warm_threads.py)."""

from __future__ import annotations

from broker.context import TokenCounter
from broker.context.session import SessionContext
from broker.mailbox.warm_threads import WarmThreads


def ctx() -> SessionContext:
    return SessionContext(TokenCounter("cl100k_base"))


def test_a_kept_context_is_taken_once() -> None:
    warm, kept = WarmThreads(), ctx()
    warm.keep("s", "h1", kept)
    assert warm.take("s") == ("h1", kept)
    assert warm.take("s") is None  # one actor holds it at a time


def test_the_next_turn_replaces_the_kept_head() -> None:
    warm, first, second = WarmThreads(), ctx(), ctx()
    warm.keep("s", "h1", first)
    warm.keep("s", "h2", second)
    assert len(warm) == 1
    assert warm.take("s") == ("h2", second)


def test_the_least_recently_used_session_leaves_first() -> None:
    warm = WarmThreads(limit=2)
    warm.keep("a", "h", ctx())
    warm.keep("b", "h", ctx())
    warm.keep("a", "h2", ctx())  # a used again: b is now the oldest
    warm.keep("c", "h", ctx())
    assert warm.take("b") is None
    assert warm.take("a") is not None and warm.take("c") is not None
