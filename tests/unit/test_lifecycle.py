"""The turn-lifecycle machine, stepped synchronously on a fake clock: examples per
rule, then random runs played against a shell that answers every action, with the
rules checked after each step."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core import lifecycle as lc
from core import queue_machine as m

IDLE_S = 10.0
Pick = Callable[[Sequence[Any]], Any]


def item(seq: int, mode: m.QueueMode = "followup") -> m.Item:
    return m.Item(f"i{seq}", seq, mode, "person")


def fresh(debounce_s: float = 0.0, now: float = 0.0) -> lc.State:
    return lc.State.initial(m.State(m.Limits(debounce_s=debounce_s)), IDLE_S, now)


def feed(state: lc.State, *events: lc.Event, now: float = 0.0) -> tuple[lc.State, list[lc.Action]]:
    actions: list[lc.Action] = []
    for event in events:
        state, step = lc.handle(state, event, now)
        actions.extend(step)
    return state, actions


def opened(seq: int = 1) -> lc.State:
    state, actions = feed(fresh(), m.Arrived(item(seq)))
    assert [type(a) for a in actions] == [lc.OpenTurn]
    return state


# A turn's path: open, plan, begin, call, commit


def test_a_turn_opens_plans_begins_calls_and_commits() -> None:
    state, actions = feed(fresh(), m.Arrived(item(1)))
    assert actions == [lc.OpenTurn(m.StartTurn(1, (item(1),), "turn"))]
    assert state.phase == "turn"
    state, actions = feed(state, lc.Planned(compaction_due=False, over_budget=False))
    assert actions == [lc.Begin(), lc.CallEngine()]
    state, actions = feed(state, lc.EngineDone(overflowed=False))
    assert actions == [lc.Commit()]
    state, actions = feed(state, lc.TurnCommitted("completed"))
    assert actions == [] and state.phase == "idle" and state.quiet


def test_the_next_turn_opens_only_once_the_last_is_committed() -> None:
    state, _ = feed(opened(), m.Arrived(item(2)), lc.Planned(False, False))
    state, actions = feed(state, lc.EngineDone(False))
    assert actions == [lc.Commit()]  # item 2 waits for the commit
    state, actions = feed(state, lc.TurnCommitted("completed"))
    assert actions == [lc.OpenTurn(m.StartTurn(2, (item(2),), "turn"))]


def test_a_turn_over_budget_begins_and_fails_without_the_engine() -> None:
    _, actions = feed(opened(), lc.Planned(compaction_due=False, over_budget=True))
    assert actions == [lc.Begin(), lc.Refuse(), lc.Commit()]


# compactions come first


def test_a_proactive_compaction_runs_before_the_turn_begins() -> None:
    state, actions = feed(opened(), lc.Planned(compaction_due=True, over_budget=False))
    assert actions == [lc.Compact("proactive")]
    state, actions = feed(state, lc.Compacted(committed=True))
    assert actions == [lc.Plan()]
    # Planned again: still "due" (the count is an estimate), but compacted once is enough.
    state, actions = feed(state, lc.Planned(compaction_due=True, over_budget=False))
    assert actions == [lc.Begin(), lc.CallEngine()]


def test_a_proactive_compaction_that_did_not_commit_still_lets_the_turn_begin() -> None:
    state, _ = feed(opened(), lc.Planned(True, False))
    _, actions = feed(state, lc.Compacted(committed=False), lc.Planned(True, False))
    assert actions == [lc.Plan(), lc.Begin(), lc.CallEngine()]


def test_an_overflow_compacts_and_begins_again_once() -> None:
    state, _ = feed(opened(), lc.Planned(False, False))
    state, actions = feed(state, lc.EngineDone(overflowed=True))
    assert actions == [lc.Compact("reactive")]
    state, actions = feed(state, lc.Compacted(committed=True), lc.Planned(False, False))
    assert actions == [lc.Plan(), lc.Begin(), lc.CallEngine()]
    _, actions = feed(state, lc.EngineDone(overflowed=True))
    assert actions == [lc.Commit()]  # the second overflow is the turn's outcome


def test_an_overflow_whose_compaction_did_not_commit_is_the_outcome() -> None:
    state, _ = feed(opened(), lc.Planned(False, False), lc.EngineDone(True))
    _, actions = feed(state, lc.Compacted(committed=False))
    assert actions == [lc.Commit()]


def test_the_second_attempt_may_compact_proactively_again() -> None:
    state, _ = feed(opened(), lc.Planned(True, False), lc.Compacted(True), lc.Planned(True, False))
    state, _ = feed(state, lc.EngineDone(True), lc.Compacted(True))
    _, actions = feed(state, lc.Planned(True, False))
    assert actions == [lc.Compact("proactive")]


# manual compactions between turns


def test_a_manual_compaction_while_idle_starts_at_once_and_defers_a_turn() -> None:
    state, actions = feed(fresh(), lc.CompactRequested())
    assert actions == [lc.Compact("manual")] and state.phase == "compacting"
    state, actions = feed(state, m.Arrived(item(1)))
    assert actions == [] and state.deferred is not None
    state, actions = feed(state, lc.Compacted(committed=True))
    assert actions == [lc.OpenTurn(m.StartTurn(1, (item(1),), "turn"))]


def test_a_manual_compaction_asked_for_during_a_turn_runs_after_its_commit() -> None:
    state, actions = feed(opened(), lc.CompactRequested(), lc.CompactRequested())
    assert actions == []
    state, _ = feed(state, m.Arrived(item(2)), lc.Planned(False, False), lc.EngineDone(False))
    state, actions = feed(state, lc.TurnCommitted("completed"))
    assert actions == [lc.Compact("manual")]  # one compaction answers both requests
    assert state.deferred == m.StartTurn(2, (item(2),), "turn")
    _, actions = feed(state, lc.Compacted(True))
    assert actions == [lc.OpenTurn(m.StartTurn(2, (item(2),), "turn"))]


def test_a_request_made_during_a_manual_compaction_runs_right_after_it() -> None:
    state, _ = feed(fresh(), lc.CompactRequested(), lc.CompactRequested())
    state, actions = feed(state, lc.Compacted(True))
    assert actions == [lc.Compact("manual")] and not state.quiet
    state, actions = feed(state, lc.Compacted(True))
    assert actions == [] and state.quiet


# /new


def test_new_between_turns_applies_at_once() -> None:
    state, actions = feed(fresh(), lc.NewThread())
    assert actions == [lc.StartNewThread()] and not state.pending_new


def test_new_during_a_turn_applies_before_the_next_turn_opens() -> None:
    state, actions = feed(opened(), lc.NewThread(), m.Arrived(item(2)))
    assert actions == [] and state.pending_new
    state, _ = feed(state, lc.Planned(False, False), lc.EngineDone(False))
    state, actions = feed(state, lc.TurnCommitted("completed"))
    assert actions == [lc.StartNewThread(), lc.OpenTurn(m.StartTurn(2, (item(2),), "turn"))]
    assert not state.pending_new


# draining


def test_no_turn_opens_while_draining() -> None:
    state, actions = feed(fresh(), lc.Drain(), m.Arrived(item(1)))
    assert actions == [] and state.turn is None


# waking and retiring, on a fake clock


def test_an_idle_actor_retires_after_idle_s_and_not_before() -> None:
    state = fresh(now=100.0)
    assert lc.wake_at(state) == 100.0 + IDLE_S
    _, actions = feed(state, lc.Woke(), now=100.0 + IDLE_S - 0.001)
    assert actions == []
    _, actions = feed(state, lc.Woke(), now=100.0 + IDLE_S)
    assert actions == [lc.Retire()]


@given(st.floats(0, 1e6, allow_nan=False), st.floats(0.001, 1e5, allow_nan=False))
def test_a_wake_up_at_the_idle_deadline_retires_whatever_the_rounding(
    last: float, idle_s: float
) -> None:
    # At `wake_at` exactly the shell sends `Woke`; were it not enough (last + idle_s
    # rounded one way, now - last the other), the shell's loop would wake forever.
    state = lc.State.initial(m.State(m.Limits()), idle_s, last)
    _, actions = lc.handle(state, lc.Woke(), lc.wake_at(state))
    assert actions == (lc.Retire(),)


def test_an_event_between_turns_is_activity_and_a_wake_up_is_not() -> None:
    state, _ = feed(fresh(), lc.Woke(), now=5.0)
    assert lc.wake_at(state) == IDLE_S
    state, _ = feed(state, m.Configure(m.Limits()), now=5.0)
    assert lc.wake_at(state) == 5.0 + IDLE_S


def test_a_busy_actor_never_retires_and_sleeps_without_a_deadline() -> None:
    state = opened()
    assert lc.wake_at(state) == math.inf
    _, actions = feed(state, lc.Woke(), now=1e9)
    assert actions == []


def test_collect_items_wait_their_quiet_period_then_run_as_one_turn() -> None:
    state, actions = feed(fresh(debounce_s=0.3), m.Arrived(item(1, "collect")), now=1.0)
    assert actions == [m.WakeAt(1.3)] and lc.wake_at(state) == 1.3
    state, _ = feed(state, m.Arrived(item(2, "collect")), now=1.2)
    assert lc.wake_at(state) == pytest.approx(1.5)
    state, actions = feed(state, lc.Woke(), now=1.4)
    assert actions == []  # stale: the quiet period started again at 1.2
    state, actions = feed(state, lc.Woke(), now=1.5)
    start = m.StartTurn(1, (item(1, "collect"), item(2, "collect")), "queue_batch")
    assert actions == [m.WakeAt(None), lc.OpenTurn(start)]


def test_a_waiting_compaction_request_keeps_the_actor_alive() -> None:
    state, _ = feed(opened(), lc.CompactRequested())
    state, _ = feed(state, lc.Planned(False, False), lc.EngineDone(False))
    assert not state.quiet


# Illegal events change nothing


@pytest.mark.parametrize(
    "event",
    [
        lc.Planned(False, False),
        lc.EngineDone(False),
        lc.TurnCommitted("completed"),
        lc.Compacted(True),
    ],
)
def test_a_turn_step_with_no_turn_is_illegal(event: lc.Event) -> None:
    with pytest.raises(lc.IllegalTransition):
        lc.handle(fresh(), event, 0.0)


def test_a_step_out_of_order_is_illegal() -> None:
    with pytest.raises(lc.IllegalTransition):
        lc.handle(opened(), lc.EngineDone(False), 0.0)  # it has not been planned


# Random runs against a shell that answers every action


@dataclass
class Shell:
    """Plays the actor: answers the machine's actions, and checks the rules."""

    state: lc.State = field(default_factory=lambda: fresh(debounce_s=0.5))
    now: float = 0.0
    seq: int = 0
    answer: str | None = None  # what the running turn waits for
    manual_running: bool = False
    began: set[int] = field(default_factory=set)
    committed: set[int] = field(default_factory=set)
    compacting_for: int | None = None  # the turn a compaction runs for
    retired: bool = False

    def send(self, event: lc.Event) -> None:
        self.state, actions = lc.handle(self.state, event, self.now)
        for action in actions:
            self.perform(action)
        self.check()

    def perform(self, action: lc.Action) -> None:
        turn = self.state.turn
        match action:
            case lc.OpenTurn():
                assert not self.manual_running, "a turn opened beside a manual compaction"
                assert self.answer is None, "two turns at once"
                self.answer = "plan"
            case lc.Plan():
                self.answer = "plan"
            case lc.Compact(trigger="manual"):
                assert turn is None and not self.manual_running
                self.manual_running = True
            case lc.Compact():
                assert turn is not None
                self.compacting_for = turn.start.turn_no
                self.answer = "compacted"
            case lc.Begin():
                assert turn is not None and self.compacting_for is None
                self.began.add(turn.start.turn_no)
            case lc.CallEngine():
                self.answer = "call"
            case lc.Commit():
                self.answer = "commit"
            case lc.Retire():
                self.retired = True

    def check(self) -> None:
        state = self.state
        assert not (state.turn is not None and state.compacting), "one thing at a time"
        if state.turn is not None:
            assert state.queue.running is not None
            assert state.queue.running.turn_no == state.turn.start.turn_no
        assert state.deferred is None or state.compacting
        if self.retired:
            assert state.quiet, "retired with work waiting"

    def respond(self, pick: Pick) -> None:
        """Answer what is outstanding; `pick` chooses among the possible answers,
        the plain one (no compaction, nothing over budget, completed) first."""
        if self.manual_running and pick([True, False]):
            self.manual_running = False
            self.send(lc.Compacted(pick([True, False])))
            return
        answer, self.answer = self.answer, None
        if answer == "plan":
            self.send(lc.Planned(pick([False, True]), pick([False] * 9 + [True])))
        elif answer == "compacted":
            self.compacting_for = None
            self.send(lc.Compacted(pick([True, False])))
        elif answer == "call":
            self.send(lc.EngineDone(pick([False, True])))
        elif answer == "commit":
            turn = self.state.turn
            assert turn is not None
            self.committed.add(turn.start.turn_no)
            self.send(lc.TurnCommitted(pick(["completed", "failed", "aborted"])))
        else:
            self.answer = answer


CHOICES = ["arrive", "answer", "answer", "stop", "compact", "new", "wait"]


@st.composite
def runs(draw: st.DrawFn) -> Shell:
    shell = Shell()
    for _ in range(draw(st.integers(1, 60))):
        if shell.retired:
            break
        choice = draw(
            st.sampled_from(["arrive", "answer", "answer", "stop", "compact", "new", "wait"])
        )
        if choice == "arrive":
            shell.seq += 1
            mode = draw(st.sampled_from(m.QUEUE_MODES))
            shell.send(m.Arrived(item(shell.seq, mode), steerable=False))
        elif choice == "answer":
            shell.respond(lambda options: draw(st.sampled_from(options)))
        elif choice == "stop":
            shell.send(m.Stop())
        elif choice == "compact":
            shell.send(lc.CompactRequested())
        elif choice == "new":
            shell.send(lc.NewThread())
        else:
            shell.now += draw(st.sampled_from([0.1, 0.5, IDLE_S]))
            if shell.now >= lc.wake_at(shell.state):
                shell.send(lc.Woke())
    return shell


@settings(max_examples=300, deadline=None)
@given(runs())
def test_random_runs_keep_every_rule(shell: Shell) -> None:
    # Checked inside, at every step: one turn at a time, never beside a manual
    # compaction; a compaction for a turn ends before it begins; retired only when
    # quiet. And every turn that began was committed or still runs.
    running = shell.state.turn.start.turn_no if shell.state.turn is not None else None
    assert shell.began <= shell.committed | {running}


def test_an_actor_left_alone_finishes_its_work_and_retires() -> None:
    shell = Shell()
    for n in range(1, 4):
        shell.seq = n
        shell.send(m.Arrived(item(n, "collect")))
    shell.send(lc.CompactRequested())
    for _ in range(50):  # answer everything, waking when the machine asks to
        if shell.retired:
            break
        if shell.answer is not None or shell.manual_running:
            shell.respond(lambda options: options[0])
        else:
            shell.now = max(shell.now, lc.wake_at(shell.state))
            shell.send(lc.Woke())
    assert shell.retired and shell.state.quiet
    assert shell.committed == {1}  # the three collect items ran as one turn


# progress saves


def test_a_save_is_due_at_the_first_delta_of_each_period() -> None:
    due, saved = 1.0, []
    for now in [0.0, 0.5, 0.9, 1.0, 1.5, 2.2, 2.3, 2.4, 3.2]:
        next_due = lc.save_due(due, now, 1.0)
        if next_due is not None:
            due = next_due
            saved.append(now)
    assert saved == [1.0, 2.2, 3.2]
