"""The session lease an attempt of a turn holds while it runs (ledger/leases.py).

Temporal gives the turn of a node that went silent to another node, and the silent
node may be alive (starved, paused): without more, both attempts would run the
engine at once. So an attempt runs its turn only inside `SessionLease.run`, which
takes the session's lease first, waiting (and heartbeating) until the last holder's
lapsed or was released, renews it every quarter of its time-to-live while the turn
runs (a renewal does not wait for the one before to commit, so a slow writer loses
the lease only past half its time-to-live of delay), and releases it at the end.

The holder acts on its own clock, never past what the ledger granted: the lease
counts as held until a quarter of its time-to-live before the granted expiry, taken
from when the renewal was sent. At that point, or as soon as a renewal is refused
(another attempt took the lease), the turn is cancelled where it stands (its engine
call with it), with no abort written: for the ledger it is a turn cut off, as by a
crash, which the next attempt records as such. A retry cannot take the lease before
it lapsed, which is never before the holder stopped, clocks agreeing within that
quarter. With the time-to-live equal to the heartbeat timeout, a dead node's lease
lapses within one heartbeat timeout of its death, about when Temporal gives its turn
to another node.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from ledger.port import LeasePort
from plumbing import logs
from plumbing.ids import now_ms

T = TypeVar("T")
log = logs.get("broker.runtime.temporal")
BEAT_S = 0.2  # the heartbeat while waiting for the lease, as a turn's
RENEWALS_IN_FLIGHT = 3
FIRST_LOOK_S = 0.025  # a held lease is looked at again this soon, then twice as late


class LeaseLost(Exception):
    """The attempt lost its session's lease: its turn was cancelled where it stood."""


class SessionLease:
    """One attempt's hold on its session's lease."""

    def __init__(
        self,
        ledger: LeasePort,
        session: str,
        holder: str,
        ttl_s: float,
        beat: Callable[[], None],
        wall_ms: Callable[[], int] = now_ms,
    ) -> None:
        self.ledger, self.session, self.ttl_s = ledger, session, ttl_s
        self.holder = f"{holder}~{uuid.uuid4().hex[:8]}"
        self.beat, self.wall_ms = beat, wall_ms
        self.token: int | None = None
        self._refused = False
        self._scope: anyio.CancelScope | None = None
        self._in_flight = 0  # renewals sent and not answered yet

    @property
    def quarter_s(self) -> float:
        return self.ttl_s / 4

    @property
    def ttl_ms(self) -> int:
        return max(1, round(self.ttl_s * 1000))

    @property
    def lost(self) -> bool:
        """True once the turn may no longer run: a renewal refused, or the lease's time
        on this node's clock over."""
        if self._refused:
            return True
        scope = self._scope
        return scope is not None and anyio.current_time() >= scope.deadline

    async def run(self, body: Callable[[], Awaitable[T]]) -> T:
        """`body()` while holding the lease; LeaseLost if it was lost meanwhile."""
        deadline = await self._take()
        result: T | None = None
        failed: Exception | None = None  # raised as it is, not in a group
        try:
            async with anyio.create_task_group() as tg:
                with anyio.CancelScope(deadline=deadline) as scope:
                    self._scope = scope
                    tg.start_soon(self._renewing, scope)
                    try:
                        result = await body()
                    except Exception as exc:
                        failed = exc
                tg.cancel_scope.cancel()
        finally:
            self._release()
        if self._refused or scope.cancelled_caught:
            log.warning("a turn lost its session's lease: cut off", session=self.session)
            raise LeaseLost(f"the lease of session {self.session} was lost") from failed
        if failed is not None:
            raise failed
        return result  # type: ignore[return-value]  # body() returned: result is set

    async def _take(self) -> float:
        """Wait until the lease is this attempt's; the local deadline it is held to."""
        told, step = False, FIRST_LOOK_S
        while True:
            sent = anyio.current_time()
            taking = await self.ledger.take_lease(
                self.session, self.holder, self.wall_ms(), self.ttl_ms
            )
            if taking.taken:
                self.token = taking.token
                return sent + self.ttl_s - self.quarter_s
            if not told:
                told = True
                log.info(
                    "waiting for the session's lease to lapse",
                    session=self.session,
                    holder=taking.holder,
                    for_ms=taking.expires_at - self.wall_ms(),
                )
            # Soon at first (a release may be on its way, lazily), then less often.
            left = max((taking.expires_at - self.wall_ms()) / 1000, 0.0) + 0.01
            wait, step = min(left, step), min(step * 2, self.quarter_s)
            end = anyio.current_time() + wait
            while (left := end - anyio.current_time()) > 0:
                await anyio.sleep(min(BEAT_S, left))
                self.beat()

    async def _renewing(self, scope: anyio.CancelScope) -> None:
        """A renewal every quarter of the time-to-live, each sent without waiting for
        the last to commit (a slow writer delays them all alike), at most
        `RENEWALS_IN_FLIGHT` at once; none once the lease is lost on this node's clock."""
        token = self.token
        assert token is not None
        async with anyio.create_task_group() as tg:
            while True:
                await anyio.sleep(self.quarter_s)
                if self._in_flight < RENEWALS_IN_FLIGHT:
                    self._in_flight += 1
                    tg.start_soon(self._renew, scope, token)

    async def _renew(self, scope: anyio.CancelScope, token: int) -> None:
        sent = anyio.current_time()
        try:
            if self.lost:  # a paused node, resumed: its turn is being cut off, and a
                return  # renewal now would keep the next attempt waiting for nothing
            held = await self.ledger.renew_lease(self.session, token, self.wall_ms(), self.ttl_ms)
        except Exception as exc:  # a storage failure: the deadline decides
            log.warning("a lease's renewal failed", session=self.session, error=str(exc))
            return
        finally:
            self._in_flight -= 1
        if not held:
            self._refused = True
            scope.cancel()
        else:
            scope.deadline = max(scope.deadline, sent + self.ttl_s - self.quarter_s)

    def _release(self) -> None:
        """Let the lease go, lazily: the next taking on this node comes after it in the
        writer's batch. Not waited for; lost (the writer stopped), it lapses by itself."""
        if self.token is None or self._refused:
            return
        try:
            self.ledger.submit_release_lease(self.session, self.token)
        except Exception as exc:
            log.warning("a lease's release failed", session=self.session, error=str(exc))
