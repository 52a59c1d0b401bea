"""The queue-mode machine, stepped synchronously: examples per rule, then random runs
checked against a ledger of every item's fate."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.queue_machine import (
    QUEUE_MODES,
    AbortReason,
    AbortTurn,
    Action,
    Arrived,
    Configure,
    Drop,
    DropPolicy,
    Event,
    IllegalTransition,
    Item,
    Limits,
    ModeRefused,
    Outcome,
    QueueMode,
    Resume,
    Source,
    StartTurn,
    State,
    Steer,
    Stop,
    Tick,
    TurnEnded,
    WakeAt,
    handle,
    resolve_mode,
)

SOURCES: tuple[Source, ...] = ("person", "worker", "timer", "operator")
DROPS: tuple[DropPolicy, ...] = ("old", "new", "summarize")


def it(seq: int, mode: QueueMode = "followup", source: Source = "person") -> Item:
    return Item(f"m{seq}", seq, mode, source)


def feed(state: State, *events: Event, now: float = 0.0) -> tuple[State, list[Action]]:
    """Apply events in order at one instant; return the final state and all actions."""
    actions: list[Action] = []
    for event in events:
        state, step = handle(state, event, now)
        actions.extend(step)
    return state, actions


def busy(limits: Limits | None = None, first: Item | None = None) -> State:
    """A state running turn 1 with one followup item (seq 1)."""
    state, actions = feed(State(limits or Limits()), Arrived(first or it(1)))
    assert [type(a) for a in actions] == [StartTurn]
    return state


# idle + followup/queue/steer/interrupt starts a turn now


@pytest.mark.parametrize("mode", ["followup", "queue", "steer", "interrupt"])
def test_idle_arrival_starts_a_turn_now(mode: QueueMode) -> None:
    state, actions = feed(State(Limits(debounce_s=5)), Arrived(it(1, mode), steerable=True))
    assert actions == [StartTurn(1, (it(1, mode),), "turn")]
    assert state.running is not None
    assert state.running.turn_no == 1
    assert state.backlog == ()
    assert state.next_turn_no == 2


def test_single_worker_item_is_a_worker_result() -> None:
    _, actions = feed(State(Limits()), Arrived(it(1, source="worker")))
    assert actions == [StartTurn(1, (it(1, source="worker"),), "worker_result")]


def test_idle_interrupt_takes_waiting_collect_items_into_one_turn() -> None:
    state = State(Limits(debounce_s=5))
    state, _ = feed(state, Arrived(it(1, "collect")), Arrived(it(2, "collect")))
    state, actions = feed(state, Arrived(it(3, "interrupt")), now=1)
    items = (it(1, "collect"), it(2, "collect"), it(3, "interrupt"))
    assert actions == [WakeAt(None), StartTurn(1, items, "queue_batch")]
    assert state.backlog == ()
    assert state.collect_deadline is None


@pytest.mark.parametrize("mode", ["followup", "queue", "steer"])
def test_idle_arrival_flushes_waiting_collect_items_first(mode: QueueMode) -> None:
    state = State(Limits(debounce_s=5))
    state, _ = feed(state, Arrived(it(1, "collect")), Arrived(it(2, "collect")))
    state, actions = feed(state, Arrived(it(3, mode)), now=1)
    assert actions == [
        WakeAt(None),
        StartTurn(1, (it(1, "collect"), it(2, "collect")), "queue_batch"),
    ]
    assert state.backlog == (it(3, mode),)
    state, actions = feed(state, TurnEnded(1, "completed"))
    assert actions == [StartTurn(2, (it(3, mode),), "turn")]


# idle + collect debounces


def test_collect_waits_for_a_quiet_period_pushed_out_by_each_arrival() -> None:
    state = State(Limits(debounce_s=5))
    state, actions = feed(state, Arrived(it(1, "collect")), now=0)
    assert actions == [WakeAt(5)]
    state, actions = feed(state, Arrived(it(2, "collect")), now=3)
    assert actions == [WakeAt(8)]
    assert state.collect_deadline == 8
    state, actions = feed(state, Tick(), now=7.9)  # early (stale timer): nothing
    assert actions == []
    assert state.running is None
    state, actions = feed(state, Tick(), now=8)
    items = (it(1, "collect"), it(2, "collect"))
    assert actions == [WakeAt(None), StartTurn(1, items, "queue_batch")]
    assert state.collect_deadline is None


def test_collect_without_debounce_starts_at_once() -> None:
    _, actions = feed(State(Limits(debounce_s=0)), Arrived(it(1, "collect")))
    assert actions == [StartTurn(1, (it(1, "collect"),), "turn")]


def test_tick_with_nothing_due_is_ignored() -> None:
    state = State(Limits(debounce_s=1))
    assert feed(state, Tick(), now=100) == (state, [])
    running = busy()
    assert feed(running, Tick(), now=100) == (running, [])


# busy + followup/queue/collect waits


@pytest.mark.parametrize("mode", ["followup", "queue", "collect"])
def test_busy_arrival_waits_in_the_backlog(mode: QueueMode) -> None:
    state, actions = feed(busy(Limits(debounce_s=5)), Arrived(it(2, mode), steerable=True))
    assert actions == []
    assert state.backlog == (it(2, mode),)
    assert state.collect_deadline is None  # no quiet period while a turn runs


# busy + interrupt aborts; while aborting everything waits


def test_busy_interrupt_aborts_the_turn_and_waits() -> None:
    state, actions = feed(busy(), Arrived(it(2, "interrupt")))
    assert actions == [AbortTurn(1, "interrupt")]
    assert state.running is not None
    assert state.running.aborting
    assert state.backlog == (it(2, "interrupt"),)


@pytest.mark.parametrize("mode", QUEUE_MODES)
def test_while_aborting_every_arrival_just_waits(mode: QueueMode) -> None:
    state, _ = feed(busy(), Arrived(it(2, "interrupt")))
    state, actions = feed(state, Arrived(it(3, mode), steerable=True))
    assert actions == []
    assert state.backlog == (it(2, "interrupt"), it(3, mode))


# steer


def test_steer_goes_to_a_steerable_turn_with_an_empty_backlog() -> None:
    state, actions = feed(busy(), Arrived(it(2, "steer"), steerable=True))
    assert actions == [Steer(1, it(2, "steer"))]
    assert state.running is not None
    assert state.running.steered == (it(2, "steer"),)
    assert state.backlog == ()


def test_steer_into_an_unsteerable_turn_acts_as_interrupt() -> None:
    state, actions = feed(busy(), Arrived(it(2, "steer"), steerable=False))
    assert actions == [AbortTurn(1, "interrupt")]
    assert state.backlog == (it(2, "steer"),)


def test_steer_behind_waiting_items_acts_as_interrupt() -> None:
    state, _ = feed(busy(), Arrived(it(2, "followup")))
    state, actions = feed(state, Arrived(it(3, "steer"), steerable=True))
    assert actions == [AbortTurn(1, "interrupt")]
    assert state.backlog == (it(2), it(3, "steer"))


# what runs when a turn ends


def test_interrupted_turn_reruns_with_steered_items_and_the_backlog() -> None:
    state, _ = feed(
        busy(),
        Arrived(it(2, "steer"), steerable=True),
        Arrived(it(3, "followup")),
        Arrived(it(4, "interrupt")),
        Arrived(it(5, "collect")),
    )
    state, actions = feed(state, TurnEnded(1, "aborted", steer_taken=("m2",)))
    items = (it(1), it(2, "steer"), it(3), it(4, "interrupt"), it(5, "collect"))
    assert actions == [StartTurn(2, items, "queue_batch")]
    assert state.backlog == ()


def test_interrupt_of_a_turn_that_completes_anyway_batches_the_backlog() -> None:
    state, _ = feed(busy(), Arrived(it(2)), Arrived(it(3, "interrupt")))
    state, actions = feed(state, TurnEnded(1, "completed"))
    assert actions == [StartTurn(2, (it(2), it(3, "interrupt")), "queue_batch")]


def test_completed_turn_returns_unsteered_items_in_order() -> None:
    state, _ = feed(
        busy(),
        Arrived(it(2, "steer"), steerable=True),
        Arrived(it(3, "steer"), steerable=True),
        Arrived(it(4, "steer"), steerable=True),
        Arrived(it(5, "followup")),
    )
    state, actions = feed(state, TurnEnded(1, "completed", steer_taken=("m2",)))
    assert actions == [StartTurn(2, (it(3, "steer"),), "turn")]
    assert state.backlog == (it(4, "steer"), it(5))


def test_backlog_dispatch_runs_collect_runs_together_and_others_alone() -> None:
    state, _ = feed(
        busy(),
        Arrived(it(2, "collect")),
        Arrived(it(3, "collect")),
        Arrived(it(4, "queue", "worker")),
        Arrived(it(5, "followup")),
        Arrived(it(6, "collect")),
    )
    starts: list[Action] = []
    for turn_no in (1, 2, 3, 4):
        state, actions = feed(state, TurnEnded(turn_no, "failed" if turn_no == 2 else "completed"))
        starts.extend(actions)
    assert starts == [
        StartTurn(2, (it(2, "collect"), it(3, "collect")), "queue_batch"),
        StartTurn(3, (it(4, "queue", "worker"),), "worker_result"),
        StartTurn(4, (it(5),), "turn"),
        StartTurn(5, (it(6, "collect"),), "turn"),
    ]
    state, actions = feed(state, TurnEnded(5, "completed"))
    assert actions == []
    assert state.running is None
    assert state.backlog == ()


# stop


def test_stop_cancels_the_turn_and_its_steered_items_then_dispatches() -> None:
    state, _ = feed(busy(), Arrived(it(2, "steer"), steerable=True))
    state, actions = feed(state, Stop())
    assert actions == [AbortTurn(1, "stop")]
    state, actions = feed(state, Arrived(it(3)), Arrived(it(4)))
    assert actions == []
    state, actions = feed(state, TurnEnded(1, "aborted"))
    assert actions == [
        Drop(it(1), "stopped"),
        Drop(it(2, "steer"), "stopped"),
        StartTurn(2, (it(3),), "turn"),
    ]
    assert state.backlog == (it(4),)


def test_stop_while_idle_or_already_stopping_does_nothing() -> None:
    idle, _ = feed(State(Limits(debounce_s=5)), Arrived(it(1, "collect")))
    assert feed(idle, Stop()) == (idle, [])
    stopping, _ = feed(busy(), Stop())
    assert feed(stopping, Stop()) == (stopping, [])


def test_stop_during_an_interrupt_abort_cancels_instead_of_rerunning() -> None:
    state, _ = feed(busy(), Arrived(it(2, "interrupt")))
    state, actions = feed(state, Stop())
    assert actions == [AbortTurn(1, "stop")]  # the reason changes: cancel, do not re-run
    state, actions = feed(state, TurnEnded(1, "aborted"))
    assert actions == [Drop(it(1), "stopped"), StartTurn(2, (it(2, "interrupt"),), "turn")]


def test_stopped_turn_that_completes_anyway_is_done() -> None:
    state, _ = feed(busy(), Stop(), Arrived(it(2)))
    state, actions = feed(state, TurnEnded(1, "completed"))
    assert actions == [StartTurn(2, (it(2),), "turn")]


# an abort nobody asked for counts as a failure


def test_unrequested_abort_counts_as_failed() -> None:
    state, _ = feed(busy(), Arrived(it(2)), Arrived(it(3)))
    state, actions = feed(state, TurnEnded(1, "aborted"))
    assert actions == [StartTurn(2, (it(2),), "turn")]  # no re-run of m1, no batch
    assert state.backlog == (it(3),)


# the cap


def test_cap_old_drops_the_oldest_waiting_item() -> None:
    state = busy(Limits(cap=2, drop="old"))
    state, actions = feed(state, Arrived(it(2)), Arrived(it(3)), Arrived(it(4)))
    assert actions == [Drop(it(2), "cap:old")]
    assert state.backlog == (it(3), it(4))
    assert state.running is not None
    assert state.running.items == (it(1),)  # the running turn's items are never dropped


def test_cap_new_refuses_the_newcomer() -> None:
    state = busy(Limits(cap=2, drop="new"))
    state, actions = feed(state, Arrived(it(2)), Arrived(it(3)), Arrived(it(4, "collect")))
    assert actions == [Drop(it(4, "collect"), "cap:new")]
    assert state.backlog == (it(2), it(3))


@pytest.mark.parametrize("mode", ["interrupt", "steer"])
def test_cap_new_never_refuses_an_interrupt(mode: QueueMode) -> None:
    state = busy(Limits(cap=2, drop="new"))
    state, actions = feed(state, Arrived(it(2)), Arrived(it(3)), Arrived(it(4, mode)))
    assert actions == [AbortTurn(1, "interrupt"), Drop(it(2), "cap:old")]
    assert state.backlog == (it(3), it(4, mode))


def test_cap_summarize_attaches_dropped_items_to_the_next_turn_once() -> None:
    state = busy(Limits(cap=1, drop="summarize"))
    state, actions = feed(state, Arrived(it(2)), Arrived(it(3)), Arrived(it(4)))
    assert actions == [Drop(it(2), "cap:summarize"), Drop(it(3), "cap:summarize")]
    assert state.dropped_note == (it(2), it(3))
    state, actions = feed(state, TurnEnded(1, "completed"), Arrived(it(5)))
    assert actions == [StartTurn(2, (it(4),), "turn", dropped_note=(it(2), it(3)))]
    state, actions = feed(state, TurnEnded(2, "completed"))
    assert actions == [StartTurn(3, (it(5),), "turn")]  # the note went out once


def test_cap_applies_to_collect_items_waiting_while_idle() -> None:
    state = State(Limits(debounce_s=5, cap=1, drop="new"))
    state, actions = feed(state, Arrived(it(1, "collect")), now=0)
    assert actions == [WakeAt(5)]
    state, actions = feed(state, Arrived(it(2, "collect")), now=1)
    assert actions == [Drop(it(2, "collect"), "cap:new")]  # refused: the deadline stays
    assert state.collect_deadline == 5


def test_configure_replaces_limits_and_drops_nothing() -> None:
    state, _ = feed(busy(), Arrived(it(2)), Arrived(it(3)))
    state, actions = feed(state, Configure(Limits(cap=1, drop="old")))
    assert actions == []
    assert state.limits == Limits(cap=1, drop="old")
    assert state.backlog == (it(2), it(3))
    state, actions = feed(state, Arrived(it(4)))
    assert actions == [Drop(it(2), "cap:old"), Drop(it(3), "cap:old")]


def test_limits_reject_a_cap_below_one_and_negative_debounce() -> None:
    with pytest.raises(ValueError, match="cap"):
        Limits(cap=0)
    with pytest.raises(ValueError, match="debounce"):
        Limits(debounce_s=-1)


# Illegal events raise and change nothing


def test_turn_ended_while_idle_is_illegal() -> None:
    with pytest.raises(IllegalTransition, match="no turn runs"):
        handle(State(Limits()), TurnEnded(1, "completed"), 0)


def test_turn_ended_for_a_stale_turn_is_illegal() -> None:
    state, _ = feed(busy(), TurnEnded(1, "completed"), Arrived(it(2)))
    with pytest.raises(IllegalTransition, match="turn 2 runs"):
        handle(state, TurnEnded(1, "completed"), 0)


def test_an_item_that_arrives_twice_is_illegal() -> None:
    with pytest.raises(IllegalTransition, match="twice"):
        handle(busy(), Arrived(it(1)), 0)
    state, _ = feed(busy(), Arrived(it(3)))
    with pytest.raises(IllegalTransition, match="twice"):
        handle(state, Arrived(it(3)), 0)


# an item committed with a later one but handed over after it


@pytest.mark.parametrize("mode", QUEUE_MODES)
def test_a_late_item_waits_at_its_seq_place_while_a_turn_runs(mode: QueueMode) -> None:
    state, actions = feed(busy(), Arrived(it(3)), Arrived(it(5)), Arrived(it(2, mode)))
    assert actions == []  # never an interrupt or a steer: it is older than what waits
    assert [i.seq for i in state.backlog] == [2, 3, 5] and state.last_seq == 5
    state, actions = feed(state, TurnEnded(1, "completed"))
    assert [a.items for a in actions if isinstance(a, StartTurn)] == [(it(2, mode),)]


def test_a_late_item_while_idle_starts_the_backlogs_head() -> None:
    state, _ = feed(busy(), Arrived(it(3)), TurnEnded(1, "completed"))  # turn 2 runs m3
    state, _ = feed(state, TurnEnded(2, "completed"))
    state, actions = feed(state, Arrived(it(2)))
    assert [a.items for a in actions if isinstance(a, StartTurn)] == [(it(2),)]
    assert state.last_seq == 3


@pytest.mark.parametrize("taken", [("m3",), ("m2", "m2"), ("m9",), ("m2", "m3", "m4")])
def test_steer_taken_must_be_a_prefix_of_the_steered_items(taken: tuple[str, ...]) -> None:
    state, _ = feed(
        busy(),
        Arrived(it(2, "steer"), steerable=True),
        Arrived(it(3, "steer"), steerable=True),
    )
    with pytest.raises(IllegalTransition, match="prefix"):
        handle(state, TurnEnded(1, "completed", steer_taken=taken), 0)


# Rehydration


def test_rehydrated_backlog_runs_in_seq_order_after_resume() -> None:
    waiting = [it(7, "followup"), it(3, "collect"), it(5, "collect"), it(4, "collect")]
    state = State.initial(Limits(debounce_s=5), waiting, next_turn_no=10)
    assert state.backlog == (it(3, "collect"), it(4, "collect"), it(5, "collect"), it(7))
    state, actions = feed(state, Resume())
    assert actions == [
        StartTurn(10, (it(3, "collect"), it(4, "collect"), it(5, "collect")), "queue_batch")
    ]
    assert feed(state, Resume()) == (state, [])  # no-op while a turn runs
    state, actions = feed(state, TurnEnded(10, "completed"))
    assert actions == [StartTurn(11, (it(7),), "turn")]
    with pytest.raises(IllegalTransition):  # a rehydrated item cannot arrive again
        handle(state, Arrived(it(7)), 0)
    state, actions = feed(state, Arrived(it(6)))  # late: it waits its turn
    assert actions == [] and [i.seq for i in state.backlog] == [6]


def test_rehydrated_interrupt_starts_everything_before_it_as_one_turn() -> None:
    """Before the restart, the interrupt had asked for one turn with the aborted turn's
    inputs and the backlog; after it, that is still one turn. Items that arrived after
    the interrupt wait for the next turn, as they would have."""
    waiting = [it(1), it(2, "collect"), it(3, "interrupt"), it(4), it(5, "collect")]
    state, actions = feed(State.initial(Limits(debounce_s=5), waiting), Resume())
    assert actions == [StartTurn(1, (it(1), it(2, "collect"), it(3, "interrupt")), "queue_batch")]
    assert state.backlog == (it(4), it(5, "collect"))
    state, actions = feed(state, TurnEnded(1, "completed"))
    assert actions == [StartTurn(2, (it(4),), "turn")]


def test_rehydration_rejects_duplicate_seq() -> None:
    with pytest.raises(ValueError, match="distinct"):
        State.initial(Limits(), [it(1), Item("other", 1, "followup", "person")])


# resolve_mode


def test_resolve_mode_prefers_the_message_own_mode_when_allowed() -> None:
    assert resolve_mode("collect", None, "queue", "steer", "person") == "collect"
    assert resolve_mode("steer", {"steer", "queue"}, "queue", None, "worker") == "steer"


def test_resolve_mode_refuses_a_disallowed_or_unknown_mode() -> None:
    with pytest.raises(ModeRefused) as info:
        resolve_mode("interrupt", ["followup"], "queue", None, "person")
    assert info.value.requested == "interrupt"
    assert info.value.allowed == frozenset({"followup"})
    with pytest.raises(ModeRefused):
        resolve_mode("shout", None, None, None, "person")


def test_resolve_mode_falls_back_override_then_route_then_source() -> None:
    assert resolve_mode(None, ["followup"], "queue", "steer", "person") == "queue"
    assert resolve_mode(None, None, None, "steer", "person") == "steer"
    assert resolve_mode(None, None, None, None, "person") == "interrupt"
    for source in ("worker", "timer", "operator"):
        assert resolve_mode(None, None, None, None, source) == "followup"


# Random runs against a ledger of fates


@dataclass(frozen=True)
class ArriveCmd:
    mode: QueueMode
    source: Source
    steerable: bool


@dataclass(frozen=True)
class EndCmd:
    outcome: Outcome
    take: int


@dataclass(frozen=True)
class TickCmd:
    advance: float


@dataclass(frozen=True)
class StopCmd:
    pass


@dataclass(frozen=True)
class ConfigureCmd:
    limits: Limits


@dataclass(frozen=True)
class ResumeCmd:
    pass


@dataclass(frozen=True)
class StaleEndCmd:
    pass


Cmd = ArriveCmd | EndCmd | TickCmd | StopCmd | ConfigureCmd | ResumeCmd | StaleEndCmd

limits_st = st.builds(
    Limits,
    debounce_s=st.sampled_from([0.0, 0.5, 2.0, 5.0]),
    cap=st.none() | st.integers(1, 4),
    drop=st.sampled_from(DROPS),
)
arrive_st = st.builds(
    ArriveCmd, st.sampled_from(QUEUE_MODES), st.sampled_from(SOURCES), st.booleans()
)
end_st = st.builds(
    EndCmd,
    st.sampled_from(("completed", "completed", "failed", "aborted", "aborted")),
    st.integers(0, 3),
)
# Weighted by hand: st.one_of picks branches evenly, and arrivals should dominate.
_CMD_WEIGHTS: dict[str, tuple[int, st.SearchStrategy[Cmd]]] = {
    "arrive": (10, arrive_st),
    "end": (5, end_st),
    "tick": (3, st.builds(TickCmd, st.floats(0, 6, allow_nan=False))),
    "stop": (1, st.builds(StopCmd)),
    "configure": (1, st.builds(ConfigureCmd, limits_st)),
    "resume": (1, st.builds(ResumeCmd)),
    "stale": (1, st.builds(StaleEndCmd)),
}
cmd_st: st.SearchStrategy[Cmd] = st.sampled_from(
    [name for name, (weight, _) in _CMD_WEIGHTS.items() for _ in range(weight)]
).flatmap(lambda name: _CMD_WEIGHTS[name][1])
cmds_st = st.lists(cmd_st, min_size=15, max_size=60)


@dataclass
class Ledger:
    """Drives the machine like a shell would and checks every action against the fates
    of the items so far: every item acked ends in exactly one fate. Fates: waiting,
    running, steered, ending (turn aborted by stop, Drop expected), done, dropped."""

    state: State
    now: float = 0.0
    last_seq: int = 0
    wake: float | None = None
    fate: dict[str, str] = field(default_factory=dict)
    starts: dict[str, int] = field(default_factory=dict)
    rerun: set[str] = field(default_factory=set)
    turn: StartTurn | None = None
    steered: list[Item] = field(default_factory=list)
    abort: AbortReason | None = None
    last_turn_no: int = 0
    final_seqs: list[int] = field(default_factory=list)
    summarized: set[str] = field(default_factory=set)
    noted: set[str] = field(default_factory=set)
    arriving: Item | None = None
    items: dict[str, Item] = field(default_factory=dict)
    batch_ok: bool = False  # this step may start everything waiting as one turn
    resuming: bool = False  # this step is a Resume while idle

    @classmethod
    def rehydrated(cls, limits: Limits, waiting: Sequence[tuple[QueueMode, Source]]) -> Ledger:
        items = [Item(f"m{n}", n, mode, src) for n, (mode, src) in enumerate(waiting, start=1)]
        ledger = cls(State.initial(limits, reversed(items)), last_seq=len(items))
        ledger.fate.update((i.id, "waiting") for i in items)
        ledger.items.update((i.id, i) for i in items)
        ledger.step(Resume())
        return ledger

    def step(self, event: Event) -> tuple[Action, ...]:
        before = self.state
        self.state, actions = handle(self.state, event, self.now)
        self.observe(event)
        for action in actions:
            self.apply(action, event)
        self.check(event, before)
        self.arriving, self.batch_ok, self.resuming = None, False, False
        return actions

    def observe(self, event: Event) -> None:
        match event:
            case Arrived(item=item):
                assert item.id not in self.fate
                self.fate[item.id] = "waiting"
                self.items[item.id] = item
                self.arriving = item
                self.batch_ok = self.turn is None and item.mode == "interrupt"
            case TurnEnded():
                self.batch_ok = self.abort == "interrupt"
                self.end_turn(event)
            case Resume():
                self.resuming = self.turn is None
            case _:
                pass

    def end_turn(self, event: TurnEnded) -> None:
        assert self.turn is not None
        everything = [*self.turn.items, *self.steered]
        if event.outcome == "aborted" and self.abort == "interrupt":
            self.set_fates(everything, "running", "steered", to="waiting")
            self.rerun.update(i.id for i in everything)
        elif event.outcome == "aborted" and self.abort == "stop":
            self.set_fates(everything, "running", "steered", to="ending")
        else:
            taken = self.steered[: len(event.steer_taken)]
            for done in (*self.turn.items, *taken):
                assert self.fate[done.id] in ("running", "steered")
                self.fate[done.id] = "done"
                assert not self.final_seqs or done.seq > self.final_seqs[-1], "reordered"
                self.final_seqs.append(done.seq)
            self.set_fates(self.steered[len(taken) :], "steered", to="waiting")
        self.turn, self.steered, self.abort = None, [], None

    def set_fates(self, items: Sequence[Item], *was: str, to: str) -> None:
        for i in items:
            assert self.fate[i.id] in was, (i.id, self.fate[i.id], was)
            self.fate[i.id] = to

    def apply(self, action: Action, event: Event) -> None:
        match action:
            case StartTurn():
                self.start(action)
            case AbortTurn(turn_no=turn_no, reason=reason):
                assert self.turn is not None
                assert turn_no == self.turn.turn_no
                assert self.abort is None or (self.abort, reason) == ("interrupt", "stop")
                assert reason == "interrupt" or isinstance(event, Stop)
                self.abort = reason
            case Steer(turn_no=turn_no, item=item):
                assert self.turn is not None
                assert turn_no == self.turn.turn_no
                assert self.abort is None
                assert self.waiting() == {item.id}, "steer only with an empty backlog"
                assert item.mode == "steer"
                self.fate[item.id] = "steered"
                self.steered.append(item)
            case Drop():
                self.drop(action)
            case WakeAt(deadline=deadline):
                self.wake = deadline

    def start(self, turn: StartTurn) -> None:
        assert self.turn is None, "a turn started while another runs"
        assert turn.turn_no > self.last_turn_no
        seqs = [i.seq for i in turn.items]
        assert seqs == sorted(seqs)
        assert len(set(seqs)) == len(seqs)
        assert turn.items
        waiting = sorted((self.items[k] for k in self.waiting()), key=lambda i: i.seq)
        if self.batch_ok:
            expected = waiting
        elif self.resuming:
            expected = resumed_run(waiting)
        else:
            expected = head_run(waiting)
        assert list(turn.items) == expected
        for i in turn.items:
            assert self.fate[i.id] == "waiting"
            if self.starts.get(i.id, 0):
                assert i.id in self.rerun, f"{i.id} ran twice without an interrupt"
            self.rerun.discard(i.id)
            self.starts[i.id] = self.starts.get(i.id, 0) + 1
            self.fate[i.id] = "running"
        single_worker = len(turn.items) == 1 and turn.items[0].source == "worker"
        kind = (
            "queue_batch" if len(turn.items) > 1 else "worker_result" if single_worker else "turn"
        )
        assert turn.kind == kind
        for noted in turn.dropped_note:
            assert noted.id in self.summarized
            assert noted.id not in self.noted, "note sent twice"
            self.noted.add(noted.id)
        self.turn, self.last_turn_no = turn, turn.turn_no

    def drop(self, action: Drop) -> None:
        item, reason = action.item, action.reason
        policy = self.state.limits.drop
        if reason == "stopped":
            assert self.fate[item.id] == "ending"
        else:
            assert self.fate[item.id] == "waiting"
            assert reason == f"cap:{policy}" or (reason == "cap:old" and policy == "new")
        if reason == "cap:new":
            assert item is self.arriving
            assert item.mode not in ("interrupt", "steer")
        if reason == "cap:summarize":
            self.summarized.add(item.id)
        self.fate[item.id] = "dropped"

    def waiting(self) -> set[str]:
        return {k for k, v in self.fate.items() if v == "waiting"}

    def check(self, event: Event, before: State) -> None:
        state = self.state
        assert set(self.fate.values()) <= {"waiting", "running", "steered", "done", "dropped"}
        assert not self.rerun, "an interrupted turn's items were not re-run at once"
        assert {i.id for i in state.backlog} == self.waiting()
        seqs = [i.seq for i in state.backlog]
        assert seqs == sorted(seqs)
        assert state.collect_deadline == self.wake
        if self.turn is None:
            assert state.running is None
            assert all(i.mode == "collect" for i in state.backlog)
            assert bool(state.backlog) == (self.wake is not None), "idle items need a wake-up"
        else:
            assert state.running is not None
            assert state.running.turn_no == self.turn.turn_no
            assert state.running.items == self.turn.items
            assert state.running.steered == tuple(self.steered)
            assert state.running.abort == self.abort
            assert self.wake is None
        cap = state.limits.cap
        if isinstance(event, Arrived) and cap is not None:
            assert len(state.backlog) <= max(cap, len(before.backlog))
            if state.limits.drop != "new":
                assert len(state.backlog) <= cap

    def run(self, cmd: Cmd) -> None:
        match cmd:
            case ArriveCmd(mode=mode, source=source, steerable=steerable):
                self.last_seq += 1
                item = Item(f"m{self.last_seq}", self.last_seq, mode, source)
                self.step(Arrived(item, steerable))
            case EndCmd(outcome=outcome, take=take):
                self.end(outcome, take)
            case TickCmd(advance=advance):
                self.now += advance
                self.step(Tick())
            case StopCmd():
                stopping = self.turn is None or self.abort == "stop"
                expected = () if stopping else (AbortTurn(self.last_turn_no, "stop"),)
                assert self.step(Stop()) == expected
            case ConfigureCmd(limits=limits):
                assert self.step(Configure(limits)) == ()
            case ResumeCmd():
                self.step(Resume())
            case StaleEndCmd():
                self.illegal(TurnEnded(self.last_turn_no + 1, "completed"))

    def end(self, outcome: Outcome, take: int) -> None:
        if self.turn is None:
            self.illegal(TurnEnded(self.last_turn_no, outcome))
            return
        taken = tuple(i.id for i in self.steered[:take])
        self.step(TurnEnded(self.turn.turn_no, outcome, taken))

    def illegal(self, event: Event) -> None:
        before = self.state
        with pytest.raises(IllegalTransition):
            handle(self.state, event, self.now)
        assert self.state is before

    def quiesce(self) -> None:
        for _ in range(10_000):
            if self.turn is not None:
                self.step(
                    TurnEnded(self.turn.turn_no, "completed", tuple(i.id for i in self.steered))
                )
            elif self.wake is not None:
                self.now = max(self.now, self.wake)
                self.step(Tick())
            else:
                break
        assert self.state.running is None
        assert self.state.backlog == ()
        assert self.state.dropped_note == ()
        assert set(self.fate.values()) <= {"done", "dropped"}
        assert self.noted == self.summarized, "a summarized drop never reached a turn"
        assert len(self.fate) == self.last_seq


def head_run(waiting: list[Item]) -> list[Item]:
    """What a dispatch takes: the head item, or the whole run of collect items at the head."""
    if not waiting or waiting[0].mode != "collect":
        return waiting[:1]
    n = next((k for k, i in enumerate(waiting) if i.mode != "collect"), len(waiting))
    return waiting[:n]


def resumed_run(waiting: list[Item]) -> list[Item]:
    """What a Resume takes: everything up to the last interrupt item, else a dispatch."""
    cut = max((k for k, i in enumerate(waiting) if i.mode == "interrupt"), default=None)
    return head_run(waiting) if cut is None else waiting[: cut + 1]


@settings(max_examples=200, deadline=None)
@given(limits=limits_st, cmds=cmds_st)
def test_random_runs_keep_every_invariant(limits: Limits, cmds: list[Cmd]) -> None:
    ledger = Ledger(State(limits))
    for cmd in cmds:
        ledger.run(cmd)
    ledger.quiesce()


@settings(max_examples=60, deadline=None)
@given(
    limits=limits_st,
    waiting=st.lists(st.tuples(st.sampled_from(QUEUE_MODES), st.sampled_from(SOURCES)), max_size=5),
    cmds=cmds_st,
)
def test_random_runs_after_rehydration_keep_every_invariant(
    limits: Limits, waiting: list[tuple[QueueMode, Source]], cmds: list[Cmd]
) -> None:
    ledger = Ledger.rehydrated(limits, waiting)
    assert (ledger.turn is None) == (not waiting)
    for cmd in cmds:
        ledger.run(cmd)
    ledger.quiesce()


def test_the_ledger_notices_a_reordering() -> None:
    """The checker itself must fail on a broken trace (guards against a vacuous model)."""
    ledger = Ledger(State(Limits()))
    ledger.run(ArriveCmd("followup", "person", False))
    ledger.run(ArriveCmd("followup", "person", False))
    ledger.final_seqs.append(99)  # pretend a later item already ran
    with pytest.raises(AssertionError, match="reordered"):
        ledger.run(EndCmd("completed", 0))
