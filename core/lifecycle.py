"""The turn lifecycle of one session as a pure state machine: ``handle(state, event, now)``.

The queue-mode machine (``core.queue_machine``) decides which items a turn
runs; this one wraps it and decides how and when that turn runs: a compaction first
when the context plan says so, a second attempt after a reactive compaction, manual
compactions between turns, a pending ``/new``, draining at shutdown, idle retirement
and when to wake. No I/O and no clock: ``now`` (seconds) comes in with each event.
``handle`` returns the next state and the actions the shell performs, in order; an
event that is illegal in the current state raises ``IllegalTransition`` and changes
nothing. Events of the queue machine (``Arrived``, ``Tick``, ``Stop``, ``Configure``,
``Resume``, ``Cancel``) are passed through to it, and its actions other than
``StartTurn`` come back out as they are.

One thing at a time: at most one turn runs, and never beside a manual compaction. A
``StartTurn`` due while a manual compaction runs waits (``deferred``) and opens when
the compaction ends; a manual compaction asked for during a turn starts when the turn
is committed. A turn ends for the queue machine (its ``TurnEnded``) only when its
commit is done (``TurnCommitted``), so the next turn cannot overlap the last one's
commit; once ``Drain`` is seen no turn opens, and the items of a ``StartTurn`` stay
queued in the ledger for the next start.

Compactions come first (docs/turns.md): a turn ``Begin``s (its items marked running,
its start time taken) only after any proactive compaction it needed ended; after an
overflow on its first engine call it compacts (reactive) and begins again, once. A
compaction that did not commit is not retried. Likewise ``/new`` never cuts the
thread under a running turn or compaction: between them it applies at once, else
just before the next turn opens; a new thread that a message decided (``from_seq``:
its seq) waits for the turn that runs that message or a later one, so items that
waited before it finish on the old thread.

A turn that streams saves its output so far at the first delta of each
``progress_save_s`` after it began (``save_due``): a quick turn never saves. The
actor retires (``Retire``) only when quiet (no turn, no compaction, none asked for,
nothing waiting or running in the queue machine) and ``idle_s`` passed since its last
event; ``wake_at`` says when the shell must send ``Woke``: the collect deadline, else
the idle deadline when quiet.
"""

from __future__ import annotations

import math
from typing import Literal, NamedTuple, TypeAlias, assert_never

from core import queue_machine as m
from core.queue_machine import IllegalTransition
from core.records import record

Phase: TypeAlias = Literal["idle", "turn", "compacting"]
Trigger: TypeAlias = Literal["proactive", "manual", "reactive"]
# Where a running turn is: before its start, compacting for it, at the engine, committing.
Step: TypeAlias = Literal["planning", "compacting", "calling", "committing"]

__all__ = ["IllegalTransition", "handle", "save_due", "wake_at"]


class Turn(NamedTuple):
    start: m.StartTurn
    step: Step = "planning"
    attempt: int = 0  # 1 after a reactive compaction (one more attempt, not two)
    compacted: bool = False  # this attempt compacted already: plan, then begin
    trigger: Trigger | None = None  # of the compaction running for it


class State(NamedTuple):
    queue: m.State
    idle_s: float
    turn: Turn | None = None
    compacting: bool = False  # a manual compaction runs
    deferred: m.StartTurn | None = None
    compact_waiting: int = 0  # manual compactions asked for and not started
    pending_new: bool = False
    draining: bool = False
    # The last event that could leave the actor quiet. A turn's own steps are not
    # counted one by one: the turn ends in its commit, which is.
    last_activity: float = 0.0
    pending_from: int = 0  # a pending cut waits for a turn with an item of this seq

    @classmethod
    def initial(cls, queue: m.State, idle_s: float, now: float) -> State:
        return cls(queue=queue, idle_s=idle_s, last_activity=now)

    @property
    def phase(self) -> Phase:
        if self.turn is not None:
            return "turn"
        return "compacting" if self.compacting else "idle"

    @property
    def quiet(self) -> bool:
        return (
            self.turn is None
            and not self.compacting
            and not self.compact_waiting
            and not self.queue.backlog
            and self.queue.running is None
        )


# Events (besides the queue machine's own)


@record
class CompactRequested:
    """``/compact`` or ``session.compact``: a manual compaction, between turns."""


@record
class NewThread:
    """``/new``: the next turn starts a fresh thread; with ``from_seq``, the next turn
    that runs an item of that seq or later does."""

    from_seq: int = 0


@record
class Drain:
    """The daemon stops: open no more turns."""


@record
class Planned:
    """The running turn's context was planned."""

    compaction_due: bool
    over_budget: bool


@record
class Compacted:
    """The compaction the last ``Compact`` asked for ended; ``committed``: it moved the head."""

    committed: bool


@record
class EngineDone:
    """The engine call ended; ``overflowed``: a context overflow before any output."""

    overflowed: bool


@record
class TurnCommitted:
    outcome: m.Outcome
    steer_taken: tuple[str, ...] = ()


@record
class Woke:
    """The shell's timer fired (see ``wake_at``): collect deadline, idleness."""


Event: TypeAlias = (
    m.Arrived
    | m.Tick
    | m.Stop
    | m.Configure
    | m.Resume
    | m.Cancel
    | CompactRequested
    | NewThread
    | Drain
    | Planned
    | Compacted
    | EngineDone
    | TurnCommitted
    | Woke
)

# Actions (besides the queue machine's AbortTurn, Steer, Drop, WakeAt)


@record
class OpenTurn:
    """Make the running turn for ``start`` and plan its context (``Planned`` next)."""

    start: m.StartTurn


@record
class Compact:
    """Run a compaction (``Compacted`` next); ``manual`` answers every request waiting."""

    trigger: Trigger


@record
class Plan:
    """Plan the running turn's context again, after its compaction (``Planned`` next)."""


@record
class Begin:
    """The turn starts now, after any compaction it needed: mark its items running."""


@record
class CallEngine:
    """Call the engine (``EngineDone`` next)."""


@record
class Refuse:
    """The turn's inputs do not fit the context window: it fails without an engine call."""


@record
class Commit:
    """Commit the turn's outcome (``TurnCommitted`` next)."""


@record
class StartNewThread:
    """Leave the current thread: the next turn has no parent (``/new``)."""


@record
class Retire:
    """Quiet for ``idle_s``: leave the registry and stop."""


Action: TypeAlias = (
    m.AbortTurn
    | m.Steer
    | m.Drop
    | m.WakeAt
    | OpenTurn
    | Compact
    | Plan
    | Begin
    | CallEngine
    | Refuse
    | Commit
    | StartNewThread
    | Retire
)
# Built once: they carry nothing, and some are emitted on every turn.
PLAN, BEGIN, CALL_ENGINE, REFUSE, COMMIT = Plan(), Begin(), CallEngine(), Refuse(), Commit()
NEW_THREAD, RETIRE, MANUAL = StartNewThread(), Retire(), Compact("manual")
_Step: TypeAlias = tuple[State, tuple[Action, ...]]


def handle(state: State, event: Event, now: float) -> _Step:
    """Apply one event; return the next state and the actions to perform, in order."""
    # The cases in the order of their frequency: the first four make every turn.
    match event:
        case m.Arrived():
            return _queue(state, event, now)
        case Planned():
            return _planned(state, _turn_at(state, "planning"), event)
        case EngineDone():
            return _engine_done(state, _turn_at(state, "calling"), event)
        case TurnCommitted():
            return _committed(state, _turn_at(state, "committing"), event, now)
        case m.Tick() | m.Stop() | m.Configure() | m.Resume() | m.Cancel():
            return _queue(state, event, now)
        case Compacted():
            return _compacted(state, event, now)
        case CompactRequested():
            waiting = state.compact_waiting + 1
            state = state._replace(compact_waiting=waiting, last_activity=now)
            return _compact_if_free(state) if state.phase == "idle" else (state, ())
        case NewThread():
            return _new_thread(state, event.from_seq, now)
        case Drain():
            return state._replace(draining=True, last_activity=now), ()
        case Woke():
            return _woke(state, now)
        case _:
            assert_never(event)


def wake_at(state: State) -> float:
    """When the shell must send ``Woke``: the collect deadline, or when quiet the
    idle deadline; infinity when neither."""
    deadline = state.queue.collect_deadline
    due = math.inf if deadline is None else deadline
    if state.quiet:
        due = min(due, state.last_activity + state.idle_s)
    return due


def save_due(due: float, now: float, every_s: float) -> float | None:
    """A progress save, at a delta: None while ``now`` is before ``due``; else save now, and this
    is when the next save is due."""
    return None if now < due else now + every_s


def _with(state: State, turn: Turn | None, queue: m.State, now: float) -> State:
    """`state` with this turn, queue state and activity time. Built whole, not with
    `_replace` (three times the cost): the path every turn takes copies the state
    five times, and this machine runs per message on the daemon's hot path."""
    s = state
    return State(queue, s.idle_s, turn, s.compacting, s.deferred, s.compact_waiting,
                 s.pending_new, s.draining, now, s.pending_from)  # fmt: skip


def _queue(state: State, event: m.Event, now: float) -> _Step:
    queue, actions = m.handle(state.queue, event, now)
    state = _with(state, state.turn, queue, now)
    if not actions:
        return state, ()
    out: list[Action] = []
    for action in actions:
        if isinstance(action, m.StartTurn):
            state, opened = _open(state, action)
            out.extend(opened)
        else:
            out.append(action)
    return state, tuple(out)


def _open(state: State, start: m.StartTurn) -> _Step:
    if state.draining:
        return state, ()  # draining: no turn opens
    if state.turn is not None:  # one thing at a time; unreachable unless the queue machine is wrong
        raise IllegalTransition(f"turn {start.turn_no} opened while another runs")
    if state.compacting:
        return state._replace(deferred=start), ()
    opened = _with(state, Turn(start), state.queue, state.last_activity)
    if state.pending_new and _cuts_before(start, state.pending_from):
        return opened._replace(pending_new=False, pending_from=0), (NEW_THREAD, OpenTurn(start))
    return opened, (OpenTurn(start),)


def _new_thread(state: State, from_seq: int, now: float) -> _Step:
    older_waits = from_seq > 0 and any(i.seq < from_seq for i in state.queue.backlog)
    if state.phase == "idle" and not older_waits:  # not under a turn or a compaction
        return state._replace(pending_new=False, pending_from=0, last_activity=now), (NEW_THREAD,)
    if state.pending_new:  # two cuts asked for: the one due first
        from_seq = min(from_seq, state.pending_from)
    return state._replace(pending_new=True, pending_from=from_seq, last_activity=now), ()


def _cuts_before(start: m.StartTurn, from_seq: int) -> bool:
    return from_seq == 0 or any(i.seq >= from_seq for i in start.items)


def _turn_at(state: State, step: Step) -> Turn:
    turn = state.turn
    if turn is None or turn.step != step:
        where = "no turn runs" if turn is None else f"the turn is {turn.step}"
        raise IllegalTransition(f"expected a turn {step}, but {where}")
    return turn


def _planned(state: State, turn: Turn, event: Planned) -> _Step:
    if event.compaction_due and not turn.compacted:
        trigger: Trigger = "proactive"
        turn = turn._replace(step="compacting", trigger=trigger)
        return state._replace(turn=turn), (Compact(trigger),)
    step: Step = "committing" if event.over_budget else "calling"
    # Built whole, as in `_with`.
    turn = Turn(turn.start, step, turn.attempt, turn.compacted, turn.trigger)
    state = _with(state, turn, state.queue, state.last_activity)
    return state, (BEGIN, REFUSE, COMMIT) if event.over_budget else (BEGIN, CALL_ENGINE)


def _engine_done(state: State, turn: Turn, event: EngineDone) -> _Step:
    if event.overflowed and turn.attempt == 0:
        turn = turn._replace(step="compacting", trigger="reactive")
        return state._replace(turn=turn), (Compact("reactive"),)
    turn = Turn(turn.start, "committing", turn.attempt, turn.compacted, turn.trigger)
    return _with(state, turn, state.queue, state.last_activity), (COMMIT,)


def _compacted(state: State, event: Compacted, now: float) -> _Step:
    turn = state.turn
    if turn is None:
        if not state.compacting:
            raise IllegalTransition("Compacted, but no compaction runs")
        state = state._replace(compacting=False, last_activity=now)
        deferred = state.deferred
        if deferred is not None:
            return _open(state._replace(deferred=None), deferred)
        return _compact_if_free(state)
    if turn.step != "compacting":
        raise IllegalTransition(f"Compacted, but the turn is {turn.step}")
    if turn.trigger == "proactive":
        turn = turn._replace(step="planning", compacted=True, trigger=None)
        return state._replace(turn=turn), (PLAN,)
    if event.committed:  # reactive: begin again, once
        turn = Turn(turn.start, attempt=1)
        return state._replace(turn=turn), (PLAN,)
    return state._replace(turn=turn._replace(step="committing", trigger=None)), (COMMIT,)


def _committed(state: State, turn: Turn, event: TurnCommitted, now: float) -> _Step:
    state = _with(state, None, state.queue, now)
    state, first = _compact_if_free(state) if state.compact_waiting else (state, ())
    ended = m.TurnEnded(turn.start.turn_no, event.outcome, event.steer_taken)
    state, rest = _queue(state, ended, now)
    return state, first + rest if first else rest


def _compact_if_free(state: State) -> _Step:
    if not state.compact_waiting or state.phase != "idle":
        return state, ()
    return state._replace(compacting=True, compact_waiting=0), (MANUAL,)


def _woke(state: State, now: float) -> _Step:
    deadline = state.queue.collect_deadline
    if deadline is not None and now >= deadline:
        return _queue(state, m.Tick(), now)
    if state.quiet and now >= state.last_activity + state.idle_s:  # as `wake_at` computes it
        return state, (RETIRE,)
    return state, ()
