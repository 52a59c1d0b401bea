"""The session lease an attempt of a turn holds while it runs (ledger/leases.py).

Temporal gives the turn of a node that went silent to another node, and the silent
node may be alive (starved, paused): without more, both attempts would run the
engine at once. So an attempt runs its turn only inside `SessionLease.run`, which
takes the session's lease first, waiting until the last holder's lapsed or was
released, renews it every quarter of its time-to-live while the turn runs, and
releases it at the end. Every write the turn submits to the ledger meanwhile carries
the taking's token and is refused once another attempt took the lease
(ledger/port/fencing.py), however long it waited in this node's writer: a refusal
cuts the turn off as a refused renewal does. It heartbeats from its start to its end,
every `BEAT_S`: a turn's steps before its engine call (recording a cut-off turn,
loading its thread) are writes and reads that a busy node's ledger answers slowly, and
an attempt that holds its lease is alive, not silent.

The holder acts on its own clock, never past what the ledger granted: the lease
counts as held until a quarter of its time-to-live before the granted expiry. The
ledger counts a lease from when its write ran, not from when it was sent, and the
holder learns that moment from the expiry it was granted (bounded by when it sent the
write and when the answer came), so a write that waited in a busy writer's queue
costs the holder nothing; only the time from the write to its answer, and a late
renewal, do. Renewals do not wait for each other to commit. At the lease's end on
this clock, or as soon as a renewal is refused (another attempt took the lease), the
turn is cancelled where it stands (its engine call with it), with no abort written:
for the ledger it is a turn cut off, as by a crash, which the next attempt records as
such. A retry cannot take the lease before it lapsed, which is never before the
holder stopped, clocks agreeing within that quarter.

A lease lives one and a half heartbeat timeouts (`lease_ttl_s`), so a live node whose
event loop or writer is late keeps its lease as long as Temporal keeps its turn there
(heartbeats reach the server at most every quarter heartbeat timeout, so a node late
by three quarters of one loses its turn: half the lease's time-to-live), while a dead
node's lease lapses within one and a half heartbeat timeouts of its death.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from ledger.port import LeasePort
from ledger.port.fencing import FENCE, Fence
from plumbing import logs
from plumbing.ids import now_ms

T = TypeVar("T")
log = logs.get("broker.runtime.temporal")
BEAT_S = 0.2  # the heartbeat's pace, as a turn's
RENEWALS_IN_FLIGHT = 3
FIRST_LOOK_S = 0.025  # a held lease is looked at again this soon, then twice as late


def lease_ttl_s(heartbeat_timeout_s: float) -> float:
    """A session lease's time-to-live for a turn with this heartbeat timeout."""
    return 1.5 * heartbeat_timeout_s


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
    ) -> None:
        self.ledger, self.session, self.ttl_s = ledger, session, ttl_s
        self.holder = f"{holder}~{uuid.uuid4().hex[:8]}"
        self.beat = beat
        self.token: int | None = None
        self._refused = False
        self._why = "refused"  # how the ledger refused this taking: a renewal or a write
        self._scope: anyio.CancelScope | None = None
        self._in_flight = 0  # renewals sent and not answered yet
        self._due = 0.0  # when the next renewal is to be sent
        # For the log of a lost lease: the slowest write of the lease (sent to answered,
        # and ran to answered) and the renewing task's latest wake-up past its time.
        self._slowest_s = self._slowest_answer_s = self._latest_s = 0.0

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
        """`body()` while holding the lease; LeaseLost if it was lost meanwhile.
        Heartbeats all along, the taking included."""
        result: T | None = None
        failed: Exception | None = None  # raised as it is, not in a group
        scope: anyio.CancelScope | None = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._beating)
            try:
                sent, deadline = await self._take()
                with anyio.CancelScope(deadline=deadline) as scope:
                    self._scope = scope
                    tg.start_soon(self._renewing, scope, sent)
                    result = await self._fenced(body)
            except Exception as exc:
                failed = exc
            finally:
                tg.cancel_scope.cancel()  # no renewal sent after the release
                self._release()
        if self._refused or (scope is not None and scope.cancelled_caught):
            log.warning(
                "a turn lost its session's lease: cut off",
                session=self.session,
                why=self._why if self._refused else "its time ran out",
                slowest_write_s=round(self._slowest_s, 3),
                slowest_answer_s=round(self._slowest_answer_s, 3),
                latest_renewal_late_s=round(
                    max(self._latest_s, anyio.current_time() - self._due), 3
                ),
                renewals_in_flight=self._in_flight,
            )
            raise LeaseLost(f"the lease of session {self.session} was lost") from failed
        if failed is not None:
            raise failed
        return result  # type: ignore[return-value]  # body() returned: result is set

    async def _fenced(self, body: Callable[[], Awaitable[T]]) -> T:
        """`body()` with every write its tasks submit fenced by this taking
        (ledger/port/fencing.py): one the ledger refuses cuts the turn off."""
        assert self.token is not None
        fence = Fence(self.session, self.token, self._fenced_out)
        reset = FENCE.set(fence)
        try:
            return await body()
        finally:
            fence.active = False
            FENCE.reset(reset)

    def _fenced_out(self) -> None:
        """A write of this taking was refused: another attempt took the lease."""
        self._refused, self._why = True, "a write was fenced"
        if self._scope is not None:
            self._scope.cancel()

    def _granted(self, sent: float, sent_ms: int, expires_at: int) -> float:
        """When, on this node's monotonic clock, the write that granted `expires_at`
        ran: the ledger's clock at it (the expiry less the time-to-live) put on this
        clock, never before the write was sent nor after its answer came."""
        answered = anyio.current_time()
        self._slowest_s = max(self._slowest_s, answered - sent)
        waited_s = (expires_at - self.ttl_ms - sent_ms) / 1000
        ran = sent + min(max(waited_s, 0.0), answered - sent)
        self._slowest_answer_s = max(self._slowest_answer_s, answered - ran)
        return ran

    async def _take(self) -> tuple[float, float]:
        """Wait until the lease is this attempt's; when the taking that won it was sent,
        and the local deadline it is held to."""
        told, step = False, FIRST_LOOK_S
        while True:
            sent, sent_ms = anyio.current_time(), now_ms()
            taking = await self.ledger.take_lease(self.session, self.holder, None, self.ttl_ms)
            if taking.taken:
                self.token = taking.token
                granted = self._granted(sent, sent_ms, taking.expires_at)
                return sent, granted + self.ttl_s - self.quarter_s
            if not told:
                told = True
                log.info(
                    "waiting for the session's lease to lapse",
                    session=self.session,
                    holder=taking.holder,
                    for_ms=taking.expires_at - now_ms(),
                )
            # Soon at first (a release may be on its way, lazily), then less often.
            left = max((taking.expires_at - now_ms()) / 1000, 0.0) + 0.01
            wait, step = min(left, step), min(step * 2, self.quarter_s)
            await anyio.sleep(wait)

    async def _beating(self) -> None:
        """Heartbeats until cancelled; not at once (the SDK sends a turn's first
        beat to the server at once, a round trip a turn shorter than `BEAT_S` does
        without)."""
        while True:
            await anyio.sleep(BEAT_S)
            self.beat()

    async def _renewing(self, scope: anyio.CancelScope, sent: float) -> None:
        """A renewal every quarter of the time-to-live from when the taking was sent
        (so each waits in a busy writer's queue about as long as the write before it,
        and the wait cancels out), each sent without waiting for the last to commit, at
        most `RENEWALS_IN_FLIGHT` at once; none once the lease is lost on this node's
        clock. One that went late is followed by the next half a quarter later."""
        token = self.token
        assert token is not None
        self._due = sent + self.quarter_s
        async with anyio.create_task_group() as tg:
            while True:
                await anyio.sleep_until(self._due)
                now = anyio.current_time()
                self._latest_s = max(self._latest_s, now - self._due)
                if self._in_flight < RENEWALS_IN_FLIGHT:
                    self._in_flight += 1
                    tg.start_soon(self._renew, scope, token)
                self._due = max(self._due + self.quarter_s, now + self.quarter_s / 2)

    async def _renew(self, scope: anyio.CancelScope, token: int) -> None:
        sent, sent_ms = anyio.current_time(), now_ms()
        try:
            if self.lost:  # a paused node, resumed: its turn is being cut off, and a
                return  # renewal now would keep the next attempt waiting for nothing
            expires_at = await self.ledger.renew_lease(self.session, token, None, self.ttl_ms)
        except Exception as exc:  # a storage failure: the deadline decides
            log.warning("a lease's renewal failed", session=self.session, error=str(exc))
            return
        finally:
            self._in_flight -= 1
        if expires_at is None:
            self._refused = True
            scope.cancel()
        else:
            held = self._granted(sent, sent_ms, expires_at) + self.ttl_s - self.quarter_s
            scope.deadline = max(scope.deadline, held)

    def _release(self) -> None:
        """Let the lease go, lazily: the next taking on this node comes after it in the
        writer's batch. Not waited for; lost (the writer stopped), it lapses by itself."""
        if self.token is None or self._refused:
            return
        try:
            self.ledger.submit_release_lease(self.session, self.token)
        except Exception as exc:
            log.warning("a lease's release failed", session=self.session, error=str(exc))
