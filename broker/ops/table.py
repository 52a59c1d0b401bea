"""Operator ops: one small async function per op, looked up by name.

Each op validates its arguments (`invalid`), maps ledger lookups that miss to
`not_found`, and returns plain JSON data. Before that, the peer's role is checked
against the op's (broker/ops/roles.py): one above it answers `forbidden` and is
audited; an op that changes something is audited by its first write (ledger/audit.py).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from broker.connection import Connection
from broker.logfollow import LEVEL_ORDER, Follower
from broker.mailbox.registry import MAX_ACTOR_RESTARTS, Mailboxes
from broker.ops.audit import Audited, AuditOps
from broker.ops.erasure import ErasureOps
from broker.ops.files import FileOps
from broker.ops.names import NameOps
from broker.ops.proposals import ProposalOps
from broker.ops.resume import ResumeOps
from broker.ops.routes import RouteOps
from broker.ops.state import StateOps, hand_bridges
from broker.ops.store import StoreOps
from broker.ops.threads import ThreadOps
from broker.ops.timers import TimerOps
from broker.ops.workers import WorkerOps
from broker.recall_indexer import semantic
from broker.retention import Retention
from broker.timers import Timers
from broker.tools.recall import MODES
from core.session_state import EVENT_TYPES
from ledger.port.errors import LedgerLookupError
from ledger.port.protocols import LedgerPort
from plumbing import logs
from plumbing.encoder import EncoderUnavailable
from plumbing.ids import now_ms
from wire.frames import ArgSpec, Op, check_args, parse_model
from wire.framing import ProtocolError

log = logs.get("broker.ops")
STUCK_LISTED = 100  # sessions named in `health`'s stuck_items; the problem counts them all

OpFn = Callable[[Connection, dict[str, Any], str | None], Awaitable[Any]]
StateOf = Callable[[str], str]


class Ops:
    def __init__(
        self,
        ledger: LedgerPort,
        state_of: StateOf,
        mailboxes: Mailboxes | None = None,
        timers: Timers | None = None,
    ) -> None:
        self.ledger = ledger
        self.mailboxes = mailboxes
        self.state_of = state_of
        self.started = time.monotonic()
        self.erasure = ErasureOps(ledger, mailboxes, timers)
        self.retention: Retention | None = None  # set by the daemon
        self.table: dict[str, OpFn] = {
            "health": self.health,
            "sessions.list": self.sessions_list,
            "session.show": self.session_show,
            "contact.show": self.contact_show,
            "entity.merge": self.entity_merge,
            "logs.follow": self.logs_follow,
            "session.fork": self.session_fork,
            "agent_send": self.agent_send,
            "session.compact": self.session_compact,
            "events.query": self.events_query,
            "scratchpad.get": self.scratchpad_get,
            "scratchpad.merge": self.scratchpad_merge,
            "recall.search": self.recall_search,
            **TimerOps(ledger, timers).table,
            **FileOps(ledger).table,
            **RouteOps(ledger).table,
            **ThreadOps(ledger, mailboxes).table,
            **ResumeOps(ledger).table,
            **StateOps(ledger).table,
            **WorkerOps(ledger).table,
            **StoreOps(ledger).table,
            **AuditOps(ledger).table,
            **NameOps(ledger).table,
            **ProposalOps(ledger, mailboxes).table,
            **self.erasure.table,
        }
        self.audited = Audited(ledger, lambda: mailboxes.settings if mailboxes else None)

    async def handle(self, conn: Connection, frame: dict[str, Any]) -> None:
        req = frame.get("req")
        if frame["type"] != "op":
            raise ProtocolError(
                "unknown_type",
                f"an operator may not send {frame['type']!r} frames",
                field="type",
                req=req,
            )
        op: Op = parse_model(Op, frame)
        fn = self.table.get(op.op)
        if fn is None:
            raise ProtocolError(
                "invalid",
                f"unknown op {op.op!r}; known: {', '.join(sorted(self.table))}",
                field="op",
                req=req,
            )
        try:
            async with self.audited.run(conn, op.op, op.args, req):
                data = await fn(conn, op.args, req)
        except LedgerLookupError as exc:
            raise ProtocolError(exc.code, str(exc), field=exc.field, req=req) from exc  # type: ignore[arg-type]
        except ProtocolError:
            raise
        except Exception as exc:
            log.exception("op failed", op=op.op, req=req, conn=conn.id)
            raise ProtocolError(
                "internal", f"{op.op} failed: internal error (see the broker log)", req=req
            ) from exc
        if data is not None:
            out: dict[str, Any] = {"type": "result", "ok": True, "data": data}
            if req is not None:
                out["req"] = req
            await conn.send(out)

    async def health(self, conn: Connection, args: dict[str, Any], req: str | None) -> Any:
        """`ok` is the absence of problems: each source below adds its reasons, checked
        afresh on every call (a dead or stopped writer is seen before any write fails)."""
        problems = self.ledger.writer_problems()
        writer = self.ledger.writer_stats()
        now = now_ms()
        stuck_after_ms = (
            int(self.mailboxes.settings.queue.stuck_after_s * 1000) if self.mailboxes else 0
        )
        counts, untouched, unreadable = await self.ledger.health_reads(now - stuck_after_ms)
        settings = self.mailboxes.settings if self.mailboxes is not None else None
        if unreadable is not None:
            problems.append(unreadable)
        stuck = stuck_items(self.mailboxes, untouched, now)
        if stuck:
            problems.append(
                f"{sum(s['items'] for s in stuck)} item(s) in {len(stuck)} session(s) wait"
                " with no actor to run them (see stuck_items)"
            )
        return {
            "ok": not problems,
            "problems": problems,
            "stuck_items": stuck[:STUCK_LISTED],
            "uptime_s": round(time.monotonic() - self.started, 3),
            "sessions": counts.get("sessions"),
            "queued": counts.get("queued"),
            "ledger": self.ledger.backend,
            # The file, for `brokerctl doctor -s` and `backup -s` run from any folder.
            "ledger_path": (
                str(settings.ledger.path.resolve())
                if settings is not None and settings.ledger.kind == "sqlite"
                else None
            ),
            "node_id": settings.node_id if settings is not None else "",
            "runtime": settings.runtime.kind if settings is not None else "local",
            "actors": len(self.mailboxes.actors) if self.mailboxes is not None else 0,
            "writer_queue": writer.queued,
            "writer_pid": writer.pid,
            # Transactions and the jobs they held since start: jobs / commits is
            # the group-commit batch size.
            "writer_commits": writer.commits,
            "writer_jobs": writer.jobs,
            # Kept short by the checkpointer (ledger/writer/checkpoint.py); one that keeps
            # growing means checkpoints fail or a reader holds an old snapshot.
            "wal_bytes": writer.wal_bytes,
            "retention": (self.retention or Retention(self.ledger, 0)).status(),
        }

    async def sessions_list(self, conn: Connection, args: dict[str, Any], req: str | None) -> Any:
        a = check_args(
            args,
            (
                ArgSpec("status", str, False, 32),
                ArgSpec("limit", int, False, minimum=1, maximum=10_000),
            ),
            req,
        )
        rows = await self.ledger.sessions_list(a.get("status"), a.get("limit", 100))
        for row in rows:
            row["state"] = self.state_of(row["label"])
        return rows

    async def session_show(self, conn: Connection, args: dict[str, Any], req: str | None) -> Any:
        a = check_args(
            args,
            (
                ArgSpec("session", str, True),
                ArgSpec("limit", int, False, minimum=1, maximum=10_000),
            ),
            req,
        )
        data = await self.ledger.session_show(a["session"], a.get("limit", 200))
        data["state"] = self.state_of(data["label"])
        return data

    async def contact_show(self, conn: Connection, args: dict[str, Any], req: str | None) -> Any:
        a = check_args(
            args, (ArgSpec("channel", str, True, 32), ArgSpec("sender_id", str, True, 256)), req
        )
        return await self.ledger.contact_show(a["channel"], a["sender_id"])

    async def session_fork(self, conn: Connection, args: dict[str, Any], req: str | None) -> Any:
        a = check_args(
            args, (ArgSpec("turn", str, True, 64), ArgSpec("label", str, False, 200)), req
        )
        now = now_ms()
        label = await self.ledger.fork(a["turn"], a.get("label"), now)
        log.info("session forked", session=label, turn=a["turn"])
        return {"label": label}

    async def agent_send(self, conn: Connection, args: dict[str, Any], req: str | None) -> Any:
        a = check_args(
            args,
            (
                ArgSpec("op", str, True, 16),
                ArgSpec("target", dict, True),
                ArgSpec("task", str, True, 100_000),
                ArgSpec("parent_session", str, False),
            ),
            req,
        )
        if a["op"] != "dispatch":
            raise ProtocolError(
                "invalid", "agent_send supports only op 'dispatch'", field="op", req=req
            )
        if self.mailboxes is None:
            raise ProtocolError("internal", "the mailboxes are not running", req=req)
        done = await self.mailboxes.dispatch(
            parent=a.get("parent_session"),
            parent_turn=None,
            tool_call=None,
            target=a["target"],
            task=a["task"],
        )
        return {"session": done.session, "item": done.item.id, "dispatch": done.dispatch}

    async def session_compact(self, conn: Connection, args: dict[str, Any], req: str | None) -> Any:
        a = check_args(
            args, (ArgSpec("session", str, True), ArgSpec("instructions", str, False, 4000)), req
        )
        label = await self.ledger.resolve_session(a["session"])
        if self.mailboxes is None:
            raise ProtocolError("internal", "the mailboxes are not running", req=req)
        if (await self.ledger.session_show(label, 1))["status"] == "closed":
            raise ProtocolError("conflict", f"{label} is closed", field="session", req=req)
        turn = await self.mailboxes.compact(label, a.get("instructions"))
        if turn is None:
            raise ProtocolError(
                "invalid", f"{label} has no history to compact", field="session", req=req
            )
        return {"turn": turn}

    async def events_query(self, conn: Connection, args: dict[str, Any], req: str | None) -> Any:
        a = check_args(
            args,
            (
                ArgSpec("type", str, False, 16),
                ArgSpec("session", str, False),
                ArgSpec("turn", str, False, 64),
                ArgSpec("text", str, False),
                ArgSpec("limit", int, False, minimum=1, maximum=1000),
            ),
            req,
        )
        if a.get("type") is not None and a["type"] not in EVENT_TYPES:
            raise ProtocolError(
                "invalid", f"type must be one of {', '.join(EVENT_TYPES)}", field="type", req=req
            )
        return await self.ledger.events_query(
            kind=a.get("type"),
            session=a.get("session"),
            turn=a.get("turn"),
            text=a.get("text"),
            limit=a.get("limit", 100),
        )

    async def scratchpad_get(self, conn: Connection, args: dict[str, Any], req: str | None) -> Any:
        a = check_args(args, (ArgSpec("session", str, True),), req)
        return await self.ledger.scratchpad_get(a["session"])

    async def scratchpad_merge(
        self, conn: Connection, args: dict[str, Any], req: str | None
    ) -> Any:
        a = check_args(args, (ArgSpec("session", str, True), ArgSpec("patch", dict, True)), req)
        now = now_ms()
        merged = await self.ledger.scratchpad_merge(a["session"], a["patch"], now)
        if self.mailboxes is not None:  # the session's next turn shows it
            self.mailboxes.scratchpad_merged(a["session"], merged, now)
        return merged

    async def logs_follow(self, conn: Connection, args: dict[str, Any], req: str | None) -> Any:
        a = check_args(
            args, (ArgSpec("session", str, False), ArgSpec("level", str, False, 16)), req
        )
        level = a.get("level", "info")
        if level not in LEVEL_ORDER:
            raise ProtocolError(
                "invalid", f"level must be one of {', '.join(LEVEL_ORDER)}", field="level", req=req
            )
        follower = Follower(conn, a.get("session"), level)
        assert conn.tg is not None
        conn.tg.start_soon(follower.run)
        return {"following": True, "session": a.get("session"), "level": level}

    async def entity_merge(self, conn: Connection, args: dict[str, Any], req: str | None) -> Any:
        a = check_args(args, (ArgSpec("from", str, True, 64), ArgSpec("into", str, True, 64)), req)
        result = await self.ledger.merge_entities(a["from"], a["into"], now_ms())
        hand_bridges(self.mailboxes, result)
        log.info(
            "entities merged",
            src=a["from"],
            into=a["into"],
            canonical=result.canonical,
            primary=result.primary,
        )
        return {
            "canonical": result.canonical,
            "primary": result.primary,
            "aliases": [{"alias": al, "session": s} for al, s in result.aliases],
        }

    async def recall_search(self, conn: Connection, args: dict[str, Any], req: str | None) -> Any:
        """Full-text search of the archive: one session (label or alias) or all of them."""
        a = check_args(
            args,
            (
                ArgSpec("query", str, True, 1000),
                ArgSpec("session", str, False),
                ArgSpec("limit", int, False, minimum=1, maximum=200),
                ArgSpec("neighbours_before", int, False, minimum=0, maximum=5),
                ArgSpec("neighbours_after", int, False, minimum=0, maximum=5),
                ArgSpec("mode", str, False),
            ),
            req,
        )
        cfg = self.mailboxes.settings.recall if self.mailboxes is not None else None
        mode = a.get("mode", "words")
        if mode not in MODES:
            raise ProtocolError(
                "invalid", f"mode must be one of {', '.join(MODES)}", field="mode", req=req
            )
        vector = None
        if mode != "words":
            try:
                vector = await semantic(cfg.model_dir if cfg else "auto").encode_query(a["query"])
            except EncoderUnavailable as exc:
                raise ProtocolError("invalid", str(exc), field="mode", req=req) from exc
        try:
            hits = await self.ledger.recall_search(
                a["query"], a.get("session"), a.get("limit", 20), mode, vector
            )
        except ValueError as exc:
            raise ProtocolError("invalid", str(exc), field="query", req=req) from exc
        before = a.get("neighbours_before", cfg.neighbours_before if cfg else 1)
        after = a.get("neighbours_after", cfg.neighbours_after if cfg else 1)
        around = await self.ledger.recall_neighbours(
            [(h.turn, h.session) for h in hits], before, after
        )
        keys = ("session", "turn", "role", "at", "snippet", "score")
        return [
            {
                **{k: getattr(h, k) for k in keys},
                "neighbours": [
                    {"turn": n.turn, "offset": n.offset, "said": n.said, "answered": n.answered}
                    for n in around.get(h.turn, ())
                ],
            }
            for h in hits
        ]


def stuck_items(
    mailboxes: Mailboxes | None, rows: list[tuple[str, int, int]], now: int
) -> list[dict[str, Any]]:
    """Sessions whose queued or running items no live actor holds, for longer than
    `queue.stuck_after_s`: acked work that will not run until something changes.

    A live session's items are handed to its actor the moment they commit, and
    an actor leaves only when idle, so an open item without one is stranded:
    its actor failed (and is waiting to restart, or gave up), or it was never
    handed over. The bound leaves room for an actor's restart back-off (5 s at
    most) and for an item committed just before this look.
    """
    if mailboxes is None or mailboxes.forward is not None:
        # Another runtime holds the items (a Temporal workflow, perhaps on another
        # node); it hands open items over again itself (runtime/temporal/runtime.py).
        return []
    out = []
    for label, count, oldest in sorted(rows, key=lambda row: row[2]):  # longest first
        if label in mailboxes.actors:
            continue
        failures = mailboxes.failures_of(label)
        if failures > MAX_ACTOR_RESTARTS:
            why = f"its actor failed {failures} times and is not restarted"
        elif failures:
            why = f"its actor failed {failures} time(s) and restarts after a back-off"
        elif mailboxes.storage_stopped(label):
            why = "the ledger's storage stopped its actor, which restarts after a back-off"
        else:
            why = "no actor was handed them"
        out.append(
            {
                "session": label,
                "items": count,
                "waiting_s": round((now - oldest) / 1000, 1),
                "why": why,
            }
        )
    return out
