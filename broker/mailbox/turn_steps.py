"""The steps of a turn, one per lifecycle action, over the session's facts and the ports.

The actor calls these when the lifecycle machine says so (`OpenTurn`, `Plan`,
`CallEngine`, `Compact`, `Commit`); each does one thing and reports what the machine
needs to hear next. None decides what comes after it.

A compaction, whatever its trigger, changes the session's facts only once it is
committed (compactor.py), and the commit's parent is the head as it is at the commit:
after any compaction the turn ran first. A turn whose context leaves older turns out
looks once, before its first engine call, for a recall hint (core/recall_hint.py): one
line among its notes, counted into its plan, and only when it fits the budget.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from broker.engines.base import Engine
from broker.mailbox import compactor
from broker.mailbox import turn_parts as parts
from broker.mailbox.ports import ActorPorts
from broker.mailbox.running_turn import RunningTurn, Spawn
from broker.mailbox.session_facts import SessionFacts
from broker.recall_indexer import semantic
from broker.workspace import git_state
from core import lifecycle as lc
from core import queue_machine as m
from core import recall_hint
from core import turn_events as te
from ledger.port.records import ItemInfo
from plumbing.ids import new_id, now_ms


class TurnSteps:
    def __init__(self, label: str, ports: ActorPorts, facts: SessionFacts) -> None:
        self.label, self.ports, self.facts = label, ports, facts
        # The actor's task group's `start_soon`, once it runs (running_turn.py).
        self.spawn: Spawn | None = None

    @property
    def engine(self) -> Engine:
        """The engine of the session's persona, else the default engine."""
        return self.ports.engine_for(self.facts.persona)

    def open(
        self,
        start: m.StartTurn,
        items: dict[str, ItemInfo],
    ) -> RunningTurn:
        inputs = [items[i.id] for i in start.items]
        channel = next((i.channel for i in reversed(inputs) if i.channel), None)
        if channel is None and self.facts.route is not None:
            channel = self.facts.route[0]  # a turn with no inbound (a worker result) answers here
        turn_id, label, ports = new_id(), self.label, self.ports
        turn = RunningTurn(
            turn_id, start.turn_no, new_id(), label, channel, ports.send_delta,
            tools=lambda name, args, call: ports.call_tool(label, turn_id, name, args, call),
            start=start, inputs=inputs, clock=ports.clock,
            save_every_s=ports.settings.engine.progress_save_s, save_progress=self.save,
        )  # fmt: skip
        # Made with the turn's id: they become its history block as they are.
        msg = self.facts.ctx.msg
        turn.input_msgs = [msg("user", i.content, i.sender_name, turn.id) for i in inputs]
        # What stays the same for the whole turn, looked up once.
        settings, persona = ports.settings, self.facts.persona
        chosen = parts.persona_of(settings, persona)
        turn.engine = engine = ports.engine_for(persona)
        turn.model = chosen.model if chosen else None
        turn.window = parts.window(settings, persona, engine)
        turn.system = parts.system_prompt(settings, persona, self.facts.kind)
        turn.notes = parts.notes(start, items)
        turn.scratchpad = self.facts.scratchpad
        turn.spawn = self.spawn
        facts = self.facts
        turn.write_events = lambda first, events: ports.write_events(
            turn_id, label, facts.head, first, events
        )  # the head as it is when they are written: after any compaction
        turn.has_room, turn.admit = ports.has_room, ports.admit
        return turn

    def begin(self, turn: RunningTurn) -> None:
        """The turn starts now, after any compaction it needed: its items are running,
        and its inputs are its first event (running_turn.py). Called with room
        in the ledger's queue of writes (actor.py)."""
        turn.started_ms = now_ms()
        self.ports.mark_running(turn.id, [i.id for i in turn.inputs], turn.started_ms)
        if not turn.events.events:  # not again when it begins anew after a compaction
            # Not written on its own (running_turn.py): with the turn's next
            # event, or its commit; after a crash the recovery writes it.
            inputs = [(i.msg_id, i.sender_name or i.sender_id, i.content) for i in turn.inputs]
            turn.events.events.append(("intent", te.intent_payload(inputs)))

    async def save(self, turn: RunningTurn) -> None:
        """Save a streaming turn's output so far (running_turn.py)."""
        if await self.ports.save_progress(turn.id, self.label, "".join(turn.parts)):
            turn.progress_saved = True

    def drop(self, action: m.Drop, items: dict[str, ItemInfo]) -> None:
        """Record an item the queue machine dropped, and forget it."""
        if action.reason == "cap:summarize":  # named in the next turn's note: keep it till then
            item = items.get(action.item.id)
        else:
            item = items.pop(action.item.id, None)
        # A stopped turn's commit recorded it as cancelled; `item.cancel` records its own.
        if action.reason not in ("stopped", "cancelled"):
            self.ports.drop_item(self.label, action.item.id, action.reason, item)

    def plan(self, turn: RunningTurn) -> lc.Planned:
        turn.plan = parts.plan(self.facts.ctx, self.ports.settings, turn, self.facts.persona)
        return lc.Planned(turn.plan.compaction_due, turn.plan.over_budget)

    async def call_engine(self, turn: RunningTurn) -> lc.EngineDone:
        assert turn.engine is not None
        facts = self.facts
        if not turn.snapshot_taken:
            turn.snapshot_taken = True
            await self._start_snapshot(turn)
        if not turn.hint_checked:
            turn.hint_checked = True
            await self._recall_hint(turn)
        offered = self.ports.tool_specs(self.label, facts.kind)
        request = parts.request(self.label, turn, facts.ctx, offered)
        deadline = self.ports.clock() + self.ports.settings.engine.timeout_s
        overflowed = await turn.call(turn.engine, request, deadline)
        if turn.result is not None:
            facts.ctx.last_reported = turn.result.prompt_tokens
        return lc.EngineDone(overflowed)

    async def _start_snapshot(self, turn: RunningTurn) -> None:
        """The turn's start `snapshot` event, after its intent, for a session whose
        turns changed files or whose engine reports a workspace: the ledger fills in the
        files the thread knows as it writes it (ledger/snapshots.py), and the workspace's
        git state is asked here. Not written on its own: it goes with the next event."""
        assert turn.engine is not None
        folder = parts.workspace(self.ports.settings, self.facts.persona, turn.engine)
        if folder is None and not self.facts.files_known:
            return
        payload: dict[str, Any] = {"by": "broker", "snapshot_type": "turn_start"}
        if folder is not None:
            payload.update(await git_state(folder))
        turn.events.add("snapshot", payload)

    async def _recall_hint(self, turn: RunningTurn) -> None:
        """Look once for a recall hint, before the first engine call, if it fits."""
        plan, ctx, settings = turn.plan, self.facts.ctx, self.ports.settings
        persona = parts.persona_of(settings, self.facts.persona)
        summary_mode = persona is not None and persona.context_mode == "summary"
        if plan is None or not (settings.recall.hint or summary_mode):
            return  # a summary-mode context looks for one whatever the setting
        if not plan.dropped_turns and ctx.summary is None:
            return  # the whole thread is in the context: nothing to recall
        said = "\n".join(i.content for i in turn.inputs if i.source == "person")
        if not said:
            return
        shown = plan.messages[: len(plan.messages) - len(turn.input_msgs)]
        query = recall_hint.select(said, "\n".join(m.content for m in shown).lower())
        if query.empty:
            return
        own = tuple(i.msg_id for i in turn.inputs if i.msg_id is not None)
        # No timeout of its own: a reader thread cannot be cancelled, and the read is
        # bounded by its work instead (ledger/recall/hint.py).
        found = await self.ports.recall_hint(self.label, query.terms, own) if query.terms else []
        # A summary-mode context with a model: the hint points at the search by both.
        meaning = summary_mode and semantic(settings.recall.model_dir).usable
        line = recall_hint.hint_line(found, query.refers_back, older_turns=True, meaning=meaning)
        if query.terms:  # the archive was searched: recorded, with the next event
            recalled = {"by": "broker", "terms": list(query.terms), "hits": len(found)}
            turn.events.add("memory_recall", {**recalled, "hinted": line is not None})
        if line is None:
            return
        note = ctx.msg("system", line)
        if plan.tokens + note.tokens <= plan.budget:
            turn.notes += (line,)
            turn.plan = replace(plan, tokens=plan.tokens + note.tokens)

    async def compact(
        self, trigger: lc.Trigger, instructions: str | None = None
    ) -> compactor.Compaction | None:
        settings, facts, engine = self.ports.settings, self.facts, self.engine
        session = compactor.Session(
            self.label, facts.head, facts.ctx, engine,
            parts.window(settings, facts.persona, engine), settings.engine, self.ports.commit_turn,
            parts.compaction_model(settings, facts.persona),
        )  # fmt: skip
        done = await compactor.compact(session, trigger, instructions)
        if done is not None:
            facts.compacted(done)  # committed: only now
        return done

    async def commit(self, turn: RunningTurn) -> m.Outcome:
        facts = self.facts
        assert turn.engine is not None
        rec, outcome, taken, reply = parts.record(
            self.label,
            turn,
            facts.head,
            facts.ctx,
            turn.engine.name,
            facts.route,
            facts.kept_prompt,
        )  # the head now is the parent
        written = await self.ports.commit_turn(rec)
        parts.log_turn(rec, written, turn.channel)
        return facts.committed(rec, written, [*turn.input_msgs, *taken], reply, outcome)
