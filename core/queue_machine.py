"""Queue modes of one session as a pure state machine: ``handle(state, event, now)``.

No I/O, no clock (``now`` is passed in, in seconds), no mutation: every type is
immutable (events and actions are records, ``core.records``; the state, which
changes on every event, is made of named tuples) and ``handle`` returns the next state
with the actions the shell must perform, in order. An event that is illegal in the
current state raises ``IllegalTransition``; the caller keeps the old state, so nothing
changes.

At most one turn runs, and nothing is reordered, run twice or lost. ``StartTurn`` is
only emitted while no turn runs, and a turn ends only by a ``TurnEnded`` carrying its
number. The backlog and every ``StartTurn`` are in ``seq`` order; items leave the
backlog from its head (dispatch, cap drops) or all at once (interrupt), and an item
that arrived late (two hand-off paths resolved by one commit) joins it at its seq's
place. Engines consume steered items in order, so ``steer_taken`` names a prefix of
them and the rest go back to the backlog, ahead of anything that arrived later. An
item is in a second ``StartTurn`` only when the first turn was aborted on purpose for
an interrupt: then the whole turn re-runs, steered items included, since its work is
thrown away. Every arrived item is in exactly one place: waiting (``backlog``),
running (``running.items`` / ``running.steered``), done, or dropped (a ``Drop`` action
was emitted for it).

``Steer`` goes only into a running turn whose engine can take steering, that is not
being aborted, and only while the backlog is empty. The machine is idle with a
non-empty backlog only while collect items wait out their quiet period (every waiting
item is ``collect``, and ``collect_deadline`` is set and was announced by ``WakeAt``),
or in a rehydrated ``State.initial`` until the shell sends ``Resume``; while a turn
runs no deadline is armed. ``limits.cap`` bounds the backlog when an item arrives:
items of the running turn never count and are never dropped; ``old``/``summarize``
drop the oldest waiting items, ``new`` refuses the newcomer, except an ``interrupt``
or ``steer`` newcomer, which is never refused (the oldest waiting item goes instead,
"cap:old").

Choices where the protocol leaves room:

- A ``TurnEnded(aborted)`` the machine did not ask for (engine timeout, shell abort)
  counts as ``failed``: the items are done, nothing re-runs.
- An interrupt-aborted turn that completes or fails anyway (the engine finished first) is
  done; the next turn still runs everything waiting as one batch, as the interrupt asked.
- ``Stop`` during an interrupt abort turns it into a stop: a second ``AbortTurn`` with
  reason "stop" tells the shell, and the inputs are cancelled, not re-run. ``Stop`` while
  idle or already stopping does nothing. A stopped turn drops everything steered into
  it too, taken or not.
- ``Configure`` drops nothing and leaves an armed deadline alone; the new limits apply
  from the next arrival on.
- Rehydration: ``State.initial(limits, backlog)`` then ``Resume``, which starts the
  backlog at once as a finished turn would (no new quiet period), except that an
  ``interrupt`` item among the waiting ones starts everything up to it as one turn, as
  it did before the restart: an interrupt always joins what waited before it into its
  turn (the aborted turn's inputs and the backlog), so without this a crash between the
  interrupt and that turn's commit would split its batch into several turns.
- ``Tick`` before the deadline, or with none armed, is ignored (timers may be stale).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Literal, NamedTuple, TypeAlias, assert_never

from core.backlog import Backlog
from core.records import record

QueueMode: TypeAlias = Literal["interrupt", "steer", "followup", "collect", "queue"]
DropPolicy: TypeAlias = Literal["old", "new", "summarize"]
Source: TypeAlias = Literal["person", "worker", "timer", "operator"]
Outcome: TypeAlias = Literal["completed", "failed", "aborted"]
AbortReason: TypeAlias = Literal["interrupt", "stop"]
TurnKind: TypeAlias = Literal["turn", "queue_batch", "worker_result"]

QUEUE_MODES: tuple[QueueMode, ...] = ("interrupt", "steer", "followup", "collect", "queue")
_MODE_NAMED: dict[str, QueueMode] = {m: m for m in QUEUE_MODES}
_NEVER_REFUSED: frozenset[QueueMode] = frozenset({"interrupt", "steer"})
_WAITS_WHILE_BUSY: frozenset[QueueMode] = frozenset({"followup", "queue", "collect"})
_DEFAULT_BY_SOURCE: dict[Source, QueueMode] = {
    "person": "interrupt",
    "worker": "followup",
    "timer": "followup",
    "operator": "followup",
}


class IllegalTransition(Exception):
    """The event is not legal in the current state; the state is unchanged."""


class ModeRefused(ValueError):
    """A message asked for a queue mode its route does not allow (or that does not exist)."""

    def __init__(self, requested: str, allowed: Collection[str]) -> None:
        self.requested = requested
        self.allowed = frozenset(allowed)
        super().__init__(f"queue mode {requested!r} is not allowed (allowed: {sorted(allowed)})")


class Item(NamedTuple):
    id: str
    seq: int  # arrival order within the session, strictly increasing
    mode: QueueMode
    source: Source


@record
class Limits:
    debounce_s: float = 0.0
    cap: int | None = None
    drop: DropPolicy = "old"

    def __post_init__(self) -> None:
        if self.debounce_s < 0:
            raise ValueError(f"debounce_s must be >= 0, got {self.debounce_s}")
        if self.cap is not None and self.cap < 1:
            raise ValueError(f"cap must be None or >= 1, got {self.cap}")


class Running(NamedTuple):
    turn_no: int
    items: tuple[Item, ...]
    steerable: bool = False  # as last reported by an arrival during this turn
    abort: AbortReason | None = None  # why an abort was requested, if one was
    steered: tuple[Item, ...] = ()

    @property
    def aborting(self) -> bool:
        return self.abort is not None


_EMPTY: Backlog[Item] = Backlog()


class State(NamedTuple):
    limits: Limits
    running: Running | None = None
    backlog: Backlog[Item] = _EMPTY
    collect_deadline: float | None = None
    dropped_note: tuple[Item, ...] = ()
    next_turn_no: int = 1
    last_seq: int | None = None

    @classmethod
    def initial(
        cls, limits: Limits, backlog: Iterable[Item] = (), *, next_turn_no: int = 1
    ) -> State:
        """Idle state holding the items that were waiting at a crash; send ``Resume`` next."""
        items = _by_seq(backlog)
        if len({i.seq for i in items}) != len(items):
            raise ValueError("rehydrated items must have distinct seq numbers")
        last = items[-1].seq if items else None
        return cls(limits=limits, backlog=Backlog(items), next_turn_no=next_turn_no, last_seq=last)


# Events


@record
class Arrived:
    item: Item
    steerable: bool = False  # can the running turn's engine take steering? (ignored if idle)


@record
class TurnEnded:
    turn_no: int
    outcome: Outcome
    steer_taken: tuple[str, ...] = ()  # ids of steered items the engine consumed


@record
class Tick:
    """The clock reached a wake-up requested by ``WakeAt``."""


@record
class Stop:
    """``/stop``: abort the running turn and cancel its inputs."""


@record
class Configure:
    limits: Limits


@record
class Resume:
    """Start work on whatever waits, now (after rehydration); no-op while a turn runs."""


@record
class Cancel:
    """``item.cancel``: a waiting item leaves the backlog (``Drop`` "cancelled"); an
    item that is not waiting (running, steered, gone) is left alone."""

    item_id: str


Event: TypeAlias = Arrived | TurnEnded | Tick | Stop | Configure | Resume | Cancel


# Actions


@record
class StartTurn:
    turn_no: int
    items: tuple[Item, ...]
    kind: TurnKind
    dropped_note: tuple[Item, ...] = ()  # dropped under "summarize" since the last StartTurn


@record
class AbortTurn:
    turn_no: int
    reason: AbortReason


@record
class Steer:
    turn_no: int
    item: Item


@record
class Drop:
    item: Item
    reason: str  # "cap:old" | "cap:new" | "cap:summarize" | "stopped" | "cancelled"


@record
class WakeAt:
    """Deliver ``Tick`` at/after ``deadline``; emitted whenever ``collect_deadline`` changes.
    ``None`` cancels; a later ``WakeAt`` supersedes earlier ones."""

    deadline: float | None


Action: TypeAlias = StartTurn | AbortTurn | Steer | Drop | WakeAt
_Step: TypeAlias = tuple[State, list[Action]]


def handle(state: State, event: Event, now: float) -> tuple[State, tuple[Action, ...]]:
    """Apply one event; return the next state and the actions to perform, in order."""
    match event:
        case Arrived():
            new, actions = _arrived(state, event, now)
        case TurnEnded():
            new, actions = _turn_ended(state, event)
        case Tick():
            deadline = state.collect_deadline
            due = state.running is None and deadline is not None and now >= deadline
            new, actions = _dispatch(state) if due else (state, [])
        case Stop():
            new, actions = _stop(state)
        case Configure():
            new, actions = state._replace(limits=event.limits), []
        case Resume():
            new, actions = _resume(state) if state.running is None else (state, [])
        case Cancel():
            new, actions = _cancel(state, event.item_id)
        case _:
            assert_never(event)
    return new, tuple(actions)


def resolve_mode(
    requested: str | None,
    allowed: Collection[str] | None,
    session_override: QueueMode | None,
    route_default: QueueMode | None,
    source: Source,
) -> QueueMode:
    """The message's own mode (if allowed), else the session override, else the route
    default, else the default for its source. ``allowed=None`` allows every mode; it
    restricts only what a message may ask for, not the configured fallbacks."""
    if requested is not None:
        mode = _MODE_NAMED.get(requested)
        if mode is None or (allowed is not None and mode not in allowed):
            raise ModeRefused(requested, QUEUE_MODES if allowed is None else allowed)
        return mode
    if session_override is not None:
        return session_override
    if route_default is not None:
        return route_default
    return _DEFAULT_BY_SOURCE[source]


def _arrived(state: State, event: Arrived, now: float) -> _Step:
    item = event.item
    if state.last_seq is not None and item.seq <= state.last_seq:
        return _late(state, item)
    running = state.running
    if running is None:
        return _arrived_idle(state._replace(last_seq=item.seq), item, now)
    if running.steerable != event.steerable:
        running = running._replace(steerable=event.steerable)
    waits = running.aborting or item.mode in _WAITS_WHILE_BUSY
    state = state._replace(running=running, last_seq=item.seq)
    return _enqueue(state, item) if waits else _arrived_busy(state, running, item)


def _late(state: State, item: Item) -> _Step:
    """An item that reached the actor after one of a higher seq (both were
    committed together and handed over by different tasks) waits in the backlog at
    its seq's place, whatever its mode; while idle, the backlog's head starts."""
    running = state.running
    held = (*state.backlog, *(running.items + running.steered if running else ()))
    if any(i.id == item.id for i in held):
        raise IllegalTransition(f"item {item.id} arrived twice")
    state = state._replace(backlog=Backlog(_by_seq((*state.backlog, item))))
    return (state, []) if running is not None else _dispatch(state)


def _arrived_idle(state: State, item: Item, now: float) -> _Step:
    if item.mode == "collect":
        return _collect_while_idle(state, item, now)
    if item.mode == "interrupt":  # everything waiting is older: one turn, arrival order
        return _start(state, (*state.backlog, item), rest=_EMPTY)
    if not state.backlog:
        return _start(state, (item,), rest=_EMPTY)
    state, actions = _dispatch(state)  # flush the waiting collect items first
    state, more = _enqueue(state, item)
    return state, actions + more


def _collect_while_idle(state: State, item: Item, now: float) -> _Step:
    """A collect arrival while idle: it waits out the quiet period, which starts again."""
    state, actions = _enqueue(state, item)
    if not state.backlog or state.backlog[-1] is not item:  # refused by the cap
        return state, actions
    if state.limits.debounce_s <= 0:
        state, more = _dispatch(state)
        return state, actions + more
    deadline = now + state.limits.debounce_s
    return state._replace(collect_deadline=deadline), [*actions, WakeAt(deadline)]


def _arrived_busy(state: State, running: Running, item: Item) -> _Step:
    """An arrival that acts on the running turn: a steer, or an interrupt."""
    if item.mode == "steer" and running.steerable and not state.backlog:
        steered = running._replace(steered=(*running.steered, item))
        return state._replace(running=steered), [Steer(running.turn_no, item)]
    # interrupt, or a steer that cannot be steered without reordering: abort the turn
    state = state._replace(running=running._replace(abort="interrupt"))
    state, actions = _enqueue(state, item)
    return state, [AbortTurn(running.turn_no, "interrupt"), *actions]


def _turn_ended(state: State, event: TurnEnded) -> _Step:
    running = state.running
    if running is None or event.turn_no != running.turn_no:
        now_running = "no turn runs" if running is None else f"turn {running.turn_no} runs"
        raise IllegalTransition(f"TurnEnded for turn {event.turn_no}, but {now_running}")
    left = running.steered[_taken_count(running, event.steer_taken) :]
    idle = state._replace(running=None)
    aborted = event.outcome == "aborted"
    if running.abort == "interrupt":  # the whole turn re-runs, with all that waits
        redo = running.items + running.steered if aborted else left
        batch = _by_seq((*redo, *state.backlog))
        return _start(idle, batch, rest=_EMPTY) if batch else (idle, [])
    if running.abort == "stop" and aborted:
        drops: list[Action] = [Drop(i, "stopped") for i in running.items + running.steered]
        idle, actions = _dispatch(idle)
        return idle, drops + actions
    # completed, failed, or aborted without our asking: done; unsteered items wait again
    if not left:
        return _dispatch(idle)
    return _dispatch(idle._replace(backlog=Backlog(_by_seq((*left, *state.backlog)))))


def _taken_count(running: Running, taken: tuple[str, ...]) -> int:
    if not taken:
        return 0  # the empty prefix always is one
    steered_prefix = {i.id for i in running.steered[: len(taken)]}
    if len(set(taken)) != len(taken) or set(taken) != steered_prefix:
        raise IllegalTransition(
            f"steer_taken {taken} is not a prefix of the items steered into turn "
            f"{running.turn_no}: {[i.id for i in running.steered]}"
        )
    return len(taken)


def _stop(state: State) -> _Step:
    running = state.running
    if running is None or running.abort == "stop":
        return state, []
    return state._replace(running=running._replace(abort="stop")), [
        AbortTurn(running.turn_no, "stop")
    ]


def _cancel(state: State, item_id: str) -> _Step:
    backlog = state.backlog
    found = next((n for n, i in enumerate(backlog) if i.id == item_id), None)
    if found is None:
        return state, []
    rest = Backlog((*backlog[:found], *backlog[found + 1 :]))
    actions: list[Action] = [Drop(backlog[found], "cancelled")]
    if not rest and state.collect_deadline is not None:  # nothing left to wait for
        actions.append(WakeAt(None))
        return state._replace(backlog=rest, collect_deadline=None), actions
    return state._replace(backlog=rest), actions


def _resume(state: State) -> _Step:
    backlog = state.backlog
    last = max((n for n, i in enumerate(backlog) if i.mode == "interrupt"), default=None)
    if last is None:
        return _dispatch(state)
    return _start(state, tuple(backlog[: last + 1]), rest=backlog[last + 1 :])


def _dispatch(state: State) -> _Step:
    """While idle, start the backlog's head: a run of collect items, or one item."""
    backlog = state.backlog
    if not backlog:
        cancel: list[Action] = [WakeAt(None)] if state.collect_deadline is not None else []
        return state._replace(collect_deadline=None), cancel
    n = 1
    if backlog[0].mode == "collect":
        while n < len(backlog) and backlog[n].mode == "collect":
            n += 1
    return _start(state, tuple(backlog[:n]), rest=backlog[n:])


def _start(state: State, items: tuple[Item, ...], *, rest: Backlog[Item]) -> _Step:
    if state.running is not None:  # at most one turn; unreachable unless this module is wrong
        raise IllegalTransition(f"cannot start a turn while turn {state.running.turn_no} runs")
    actions: list[Action] = [WakeAt(None)] if state.collect_deadline is not None else []
    turn_no = state.next_turn_no
    actions.append(StartTurn(turn_no, items, _kind(items), state.dropped_note))
    new = state._replace(
        running=Running(turn_no, items),
        backlog=rest,
        collect_deadline=None,
        dropped_note=(),
        next_turn_no=turn_no + 1,
    )
    return new, actions


def _enqueue(state: State, item: Item) -> _Step:
    """Append ``item`` to the backlog, keeping it within ``limits.cap``."""
    limits = state.limits
    backlog = state.backlog.append(item)
    if limits.cap is None or len(backlog) <= limits.cap:
        return state._replace(backlog=backlog), []
    if limits.drop == "new" and item.mode not in _NEVER_REFUSED:
        return state, [Drop(item, "cap:new")]
    victims, kept = tuple(backlog[: -limits.cap]), backlog[-limits.cap :]
    note = state.dropped_note
    if limits.drop == "summarize":
        note, reason = note + victims, "cap:summarize"
    else:
        reason = "cap:old"
    return state._replace(backlog=kept, dropped_note=note), [Drop(v, reason) for v in victims]


def _kind(items: tuple[Item, ...]) -> TurnKind:
    if len(items) > 1:
        return "queue_batch"
    return "worker_result" if items[0].source == "worker" else "turn"


def _by_seq(items: Iterable[Item]) -> tuple[Item, ...]:
    return tuple(sorted(items, key=lambda i: i.seq))
