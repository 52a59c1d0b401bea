"""The pure and shell pieces of threads, resets and `item.cancel`: the queue machine's
`Cancel`, the lifecycle passing it through, the `[reset]` config and its per-route
override (bad values refused, naming the key), `/reset` as `/new` and the carry-over
text. (The actor's side of a cancel racing its turns: tests/integration/test_threads.py.)"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from broker.config import ConfigError, load_rules, load_settings
from broker.mailbox.commands import is_command, parse
from broker.mailbox.thread_start import ThreadRequest
from core import lifecycle as lc
from core.queue_machine import (
    Arrived,
    Cancel,
    Drop,
    Item,
    Limits,
    StartTurn,
    State,
    TurnEnded,
    WakeAt,
    handle,
)
from core.resets import ResetPolicy
from ledger import threads
from ledger.db import load_migrations, migrate
from policies.model import Delivery, Rule, decide

REPO = Path(__file__).resolve().parents[2]


def item(seq: int, mode: str = "followup") -> Item:
    return Item(f"m{seq}", seq, mode, "person")  # type: ignore[arg-type]


def feed(state: State, *events: object, now: float = 0.0) -> tuple[State, list[object]]:
    actions: list[object] = []
    for event in events:
        state, step = handle(state, event, now)  # type: ignore[arg-type]
        actions.extend(step)
    return state, actions


# -- the queue machine's Cancel --------------------------------------------------


def test_cancel_takes_a_waiting_item_out_of_the_backlog() -> None:
    state, _ = feed(State(Limits()), Arrived(item(1)), Arrived(item(2)), Arrived(item(3)))
    state, actions = feed(state, Cancel("m2"))
    assert actions == [Drop(item(2), "cancelled")]
    assert [i.id for i in state.backlog] == ["m3"]
    state, actions = feed(state, TurnEnded(1, "completed"))
    assert actions == [StartTurn(2, (item(3),), "turn")]  # m2 never runs


def test_cancel_leaves_a_running_or_unknown_item_alone() -> None:
    state, _ = feed(State(Limits()), Arrived(item(1)), Arrived(item(2)))
    for gone in ("m1", "nobody"):
        after, actions = feed(state, Cancel(gone))
        assert (after, actions) == (state, [])


def test_cancelling_the_last_collect_item_disarms_its_deadline() -> None:
    state, actions = feed(State(Limits(debounce_s=5)), Arrived(item(1, "collect")), now=1)
    assert actions == [WakeAt(6)]
    state, actions = feed(state, Cancel("m1"), now=2)
    assert actions == [Drop(item(1, "collect"), "cancelled"), WakeAt(None)]
    assert state.collect_deadline is None and not state.backlog


def test_the_lifecycle_passes_cancel_through() -> None:
    queue, _ = feed(State(Limits()), Arrived(item(1)), Arrived(item(2)))
    state = lc.State.initial(queue, idle_s=30, now=0)
    state, actions = lc.handle(state, Cancel("m2"), 1)
    assert actions == (Drop(item(2), "cancelled"),)
    assert not state.queue.backlog


# -- a cut decided by a message waits for that message's turn (lifecycle) ----------


def lc_feed(state: lc.State, *events: lc.Event) -> tuple[lc.State, list[lc.Action]]:
    actions: list[lc.Action] = []
    for event in events:
        state, step = lc.handle(state, event, 0.0)
        actions.extend(step)
    return state, actions


def finish_turn(state: lc.State) -> tuple[lc.State, list[lc.Action]]:
    """Run the open turn to its commit; the cut and the next opening, if any."""
    state, actions = lc_feed(
        state, lc.Planned(False, False), lc.EngineDone(False), lc.TurnCommitted("completed")
    )
    return state, [a for a in actions if isinstance(a, lc.OpenTurn | lc.StartNewThread)]


def test_items_waiting_before_the_deciding_message_finish_on_the_old_thread() -> None:
    state = lc.State.initial(State(Limits()), idle_s=30, now=0)
    state, actions = lc_feed(state, Arrived(item(1)), Arrived(item(2)))  # 1 runs, 2 waits
    state, actions = lc_feed(state, lc.NewThread(from_seq=3), Arrived(item(3)))
    assert actions == [] and state.pending_new
    state, actions = finish_turn(state)
    assert actions == [lc.OpenTurn(StartTurn(2, (item(2),), "turn"))]  # no cut yet
    state, actions = finish_turn(state)
    assert actions == [lc.StartNewThread(), lc.OpenTurn(StartTurn(3, (item(3),), "turn"))]
    assert not state.pending_new and state.pending_from == 0


def test_a_deciding_message_cuts_at_once_when_nothing_older_waits() -> None:
    state = lc.State.initial(State(Limits()), idle_s=30, now=0)
    state, actions = lc_feed(state, lc.NewThread(from_seq=7), Arrived(item(7)))
    assert actions == [lc.StartNewThread(), lc.OpenTurn(StartTurn(1, (item(7),), "turn"))]


def test_an_explicit_new_meanwhile_cuts_at_the_next_turn() -> None:
    state = lc.State.initial(State(Limits()), idle_s=30, now=0)
    state, _ = lc_feed(state, Arrived(item(1)), Arrived(item(2)))
    state, _ = lc_feed(state, lc.NewThread(from_seq=3), lc.NewThread())
    state, actions = finish_turn(state)
    assert actions == [lc.StartNewThread(), lc.OpenTurn(StartTurn(2, (item(2),), "turn"))]


def test_no_cut_under_a_manual_compaction() -> None:
    state = lc.State.initial(State(Limits()), idle_s=30, now=0)
    state, actions = lc_feed(state, lc.CompactRequested())
    assert actions == [lc.Compact("manual")]
    state, actions = lc_feed(state, lc.NewThread(), Arrived(item(1)))
    assert actions == []  # the turn waits for the compaction, the cut for the turn
    state, actions = lc_feed(state, lc.Compacted(True))
    assert actions == [lc.StartNewThread(), lc.OpenTurn(StartTurn(1, (item(1),), "turn"))]


# -- [reset] and the route rules ----------------------------------------------------


@pytest.mark.parametrize(
    ("reset", "key"),
    [
        ({"daily_at": "25:00"}, "reset.daily_at"),
        ({"daily_at": "4am"}, "reset.daily_at"),
        ({"timezone": "Europe/Nowhere"}, "reset.timezone"),
        ({"idle_s": -1}, "reset.idle_s"),
        ({"max_turns": -3}, "reset.max_turns"),
    ],
)
def test_a_bad_reset_key_names_itself(reset: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(None, reset=reset)
    assert key in str(caught.value)


def test_a_bad_reset_key_in_a_route_rule_names_the_rule() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(None, routes=[{"name": "night", "reset": {"daily_at": "9:5"}}])
    assert "routes.0.reset.daily_at (rule 'night')" in str(caught.value)
    settings = load_settings(None, routes=[{"name": "night", "reset": {"timezone": "Mars/Base"}}])
    with pytest.raises(ConfigError) as caught:
        load_rules(settings)
    assert "'night'" in str(caught.value) and "reset.timezone" in str(caught.value)


def test_brokerd_exits_78_on_a_bad_reset_key(tmp_path: Path) -> None:
    config = tmp_path / "broker.toml"
    config.write_text('[reset]\ndaily_at = "noon"\n')
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("BROKER_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-m", "broker", "--check-config", "--config", str(config)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 78, done
    assert "reset.daily_at" in done.stderr


def test_a_route_rule_overrides_the_reset_policy_key_by_key() -> None:
    defaults = ResetPolicy(idle_s=3600, daily_at="04:00", timezone="Europe/Berlin")
    rules = (
        Rule.model_validate(
            {"name": "night", "match": {"channel": ["sms"]}, "reset": {"idle_s": 60}}
        ),
        Rule.model_validate(
            {"name": "off", "match": {"channel": ["irc"]}, "reset": {"idle_s": 0, "daily_at": ""}}
        ),
    )
    sms = decide(rules, Delivery("sms", "dm", "+1"), frozenset(), defaults)
    assert sms.reset == defaults._replace(idle_s=60)
    assert sms.spec.reset == sms.reset
    other = decide(rules, Delivery("chat", "dm", "a"), frozenset(), defaults)
    assert other.spec.reset == defaults
    off = decide(rules, Delivery("irc", "dm", "a"), frozenset(), defaults)
    assert off.spec.reset is None  # nothing active: the writer only notes the activity


# -- chat commands and the carry-over ------------------------------------------------


def test_reset_is_new() -> None:
    assert parse("/reset") == parse("/new")
    assert parse("/RESET please") is not None and parse("/RESET please").name == "new"  # type: ignore[union-attr]
    assert is_command("  /reset")


def test_only_an_automatic_rollover_carries_over() -> None:
    assert ThreadRequest(2, "idle").carries and ThreadRequest(2, "daily").carries
    assert not ThreadRequest(None, "new").carries and not ThreadRequest(3, "operator").carries


# -- migration 0009 on a ledger with `/new` from before it ----------------------------


def test_threads_from_before_the_migration_are_listed() -> None:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    for migration in load_migrations()[:8]:
        conn.executescript(
            f"BEGIN;\n{migration.sql}\nPRAGMA user_version = {migration.version};\nCOMMIT;"
        )
    conn.execute(
        "INSERT INTO sessions (label, kind, origin, created_at, updated_at, turns, head_turn_id)"
        " VALUES ('s', 'dm', 'inbound', 1, 1, 5, 't5')"
    )
    conn.executemany(
        "INSERT INTO session_history (session_label, turn_id, prev_turn_id, reason, changed_at)"
        " VALUES ('s', NULL, ?, 'new_thread', ?)",
        [("t2", 10), ("t4", 20)],
    )
    assert "0010_threads" in migrate(conn)
    listed = threads.list_threads(conn, "s")
    assert [(t["thread"], t["reason"], t["head"], t["turns"], t["ended_at"]) for t in listed] == [
        (1, "first", "t2", None, 10),  # how many turns it had is not known
        (2, "new", "t4", None, 20),
        (3, "new", "t5", 0, None),  # counted from the migration on
    ]
