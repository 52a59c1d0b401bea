"""Helpers for the mailbox integration tests: daemons, an adapter that keeps every
frame it reads, operator ops and ledger queries.

The adapter reads frames on demand (no background task), so the tests run the
same under asyncio and trio: `expect` returns the first frame matching a
predicate and keeps the others for later, so acks, deltas and deliveries that
interleave on one connection never get lost.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import tomllib
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
import orjson

from tests.harness import DaemonProcess
from wire.client import BrokerClient, BrokerError

WAIT = 10.0  # the bound on every single wait for the broker
Frame = dict[str, Any]
Pred = Callable[[Frame], bool]

# A turn long enough to interleave with: up to 4 deltas, 120 ms apart.
SLOW: dict[str, Any] = {"engine": {"chunks": 4, "delay_ms": 120}, "queue": {"debounce_ms": 300}}


def uniq(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:10]}"


# -- daemons --------------------------------------------------------------------


def _toml(value: Any) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return orjson.dumps(value).decode()
    raise TypeError(f"cannot write {value!r} as TOML")


def routes_toml(routes: list[dict[str, Any]]) -> str:
    """Route rules as TOML; `tests.harness.write_config` cannot nest a table in
    an array of tables (`match`, `queue`), so they are appended as text."""
    out: list[str] = []
    for rule in routes:
        out.append("\n[[routes]]")
        out.extend(f"{key} = {_toml(value)}" for key, value in rule.items())
    return "\n".join(out) + "\n"


def add_routes(d: DaemonProcess, routes: list[dict[str, Any]]) -> None:
    with d.config_path.open("a") as fh:
        fh.write(routes_toml(routes))
    tomllib.loads(d.config_path.read_text())


@contextlib.contextmanager
def running_daemon(
    config: dict[str, Any] | None = None,
    *,
    routes: list[dict[str, Any]] | None = None,
    backend: str = "asyncio",
) -> Iterator[DaemonProcess]:
    """A daemon of its own (for module-scoped fixtures), killed at the end."""
    work = Path(tempfile.mkdtemp(prefix="brk-", dir="/tmp"))
    d = DaemonProcess(work, config, backend=backend)
    if routes:
        add_routes(d, routes)
    d.start()
    try:
        yield d
    finally:
        d.kill()
        shutil.rmtree(work, ignore_errors=True)


# -- the wire -------------------------------------------------------------------


class Adapter:
    """An adapter connection that keeps every frame it has read."""

    def __init__(
        self, client: BrokerClient, channel: str, daemon: DaemonProcess | None = None
    ) -> None:
        self.client = client
        self.channel = channel
        self.daemon = daemon
        self.seen: list[Frame] = []  # every frame read, in order
        self._stash: list[Frame] = []  # read but not yet returned by `expect`

    @classmethod
    async def connect(cls, d: DaemonProcess, channel: str) -> Adapter:
        with anyio.fail_after(WAIT):
            client = await BrokerClient.connect(d.socket, role="adapter", channel=channel)
        return cls(client, channel, d)

    async def __aenter__(self) -> Adapter:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.client.aclose()

    async def _read(self) -> Frame:
        frame = await self.client.recv()
        self.seen.append(frame)
        return frame

    async def expect(self, pred: Pred, within: float = WAIT) -> Frame:
        """The first frame (kept or new) matching `pred`; the others are kept."""
        for n, frame in enumerate(self._stash):
            if pred(frame):
                return self._stash.pop(n)
        with anyio.fail_after(within):
            while True:
                frame = await self._read()
                if pred(frame):
                    return frame
                self._stash.append(frame)

    async def read_for(self, seconds: float) -> list[Frame]:
        """Every frame that arrives within `seconds` (kept for `expect` too)."""
        got: list[Frame] = []
        with anyio.move_on_after(seconds):
            while True:
                frame = await self._read()
                self._stash.append(frame)
                got.append(frame)
        return got

    def kept(self) -> list[Frame]:
        return list(self._stash)

    async def send_inbound(
        self,
        msg_id: str,
        text: str,
        sender: str,
        *,
        mode: str | None = None,
        **fields: Any,
    ) -> Frame:
        """Send a DM and wait for its ack; an `error` answer raises BrokerError."""
        req = f"r-{msg_id}"
        frame: Frame = {
            "type": "inbound",
            "req": req,
            "msg_id": msg_id,
            "sender_id": sender,
            "peer_kind": "dm",
            "text": text,
            **fields,
        }
        if mode is not None:
            frame["queue_mode"] = mode
        await self.client.send(frame)
        reply = await self.expect(lambda f: f.get("req") == req)
        if reply["type"] == "error":
            raise BrokerError(reply)
        assert reply["type"] == "ack", reply
        return reply

    async def deliver(
        self,
        *,
        session: str | None = None,
        msg_id: str | None = None,
        status: str | None = None,
        within: float = WAIT,
    ) -> Frame:
        """The next `deliver` (of the session / answering msg_id / with status)."""

        def pred(f: Frame) -> bool:
            return (
                f.get("type") == "deliver"
                and (session is None or f.get("session") == session)
                and (msg_id is None or msg_id in f.get("in_reply_to", ()))
                and (status is None or f.get("status") == status)
            )

        return await self.expect(pred, within)

    async def delta(self, *, session: str | None = None, within: float = WAIT) -> Frame:
        return await self.expect(
            lambda f: f.get("type") == "delta" and (session is None or f["session"] == session),
            within,
        )

    async def turn_runs(self, session: str, within: float = WAIT) -> None:
        """A turn of the session has begun. On one node its first `delta` says so. On
        a pair of nodes (TEST_CLUSTER=2) the turn may run on the other node, whose
        deltas reach only its own adapters (docs/cluster.md, Limits): there the
        ledger says so, an item of the session marked running."""
        d = self.daemon
        if d is None or not d.peers:
            await self.delta(session=session, within=within)
            return

        async def running() -> bool:
            return any(status == "running" for status, _, _ in items(d, session).values())

        await wait_until(running, f"a turn of {session} running", within)

    async def confirm(self, out_id: str) -> None:
        await self.client.send({"type": "delivered", "out_id": out_id})


async def operator(d: DaemonProcess) -> BrokerClient:
    with anyio.fail_after(WAIT):
        return await BrokerClient.connect(d.socket)


async def op(d: DaemonProcess, name: str, **args: Any) -> Any:
    async with await operator(d) as c:
        with anyio.fail_after(WAIT):
            return await c.op(name, **args)


async def show(d: DaemonProcess, session: str) -> dict[str, Any]:
    data: dict[str, Any] = await op(d, "session.show", session=session)
    return data


async def wait_until(check: Callable[[], Awaitable[bool]], what: str, within: float = WAIT) -> None:
    """Poll `check` every 20 ms until it holds (bounded)."""
    try:
        with anyio.fail_after(within):
            while True:
                if await check():
                    return
                await anyio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


async def wait_db(
    d: DaemonProcess, sql: str, args: tuple[Any, ...], expected: Any, within: float = WAIT
) -> None:
    """Poll the ledger until `sql` returns `expected` as its first column of the first row."""

    async def check() -> bool:
        rows = query(d, sql, *args)
        return bool(rows) and rows[0][0] == expected

    await wait_until(check, f"{sql} {args} == {expected!r}", within)


# -- the ledger -----------------------------------------------------------------


def query(d: DaemonProcess, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    conn = d.db()
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def table_counts(d: DaemonProcess, tables: tuple[str, ...]) -> dict[str, int]:
    """Rows in each of `tables`: what a refused request must leave as it was."""
    conn = d.db()
    try:
        return {t: int(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]) for t in tables}
    finally:
        conn.close()


def turns(d: DaemonProcess, session: str) -> list[dict[str, Any]]:
    """Every turn of the session in start order (turn ids are ULIDs), with its inputs."""
    conn = d.db()
    try:
        cur = conn.execute("SELECT * FROM turns WHERE session_label = ? ORDER BY id", (session,))
        names = [c[0] for c in cur.description]  # either SQLite driver's rows, or PostgreSQL's
        rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
        for row in rows:
            row["inputs"] = [
                r[0]
                for r in conn.execute(
                    "SELECT msg_id FROM messages WHERE turn_id = ? AND role = 'user' ORDER BY seq",
                    (row["id"],),
                )
            ]
        return rows
    finally:
        conn.close()


def items(d: DaemonProcess, session: str) -> dict[str, tuple[str, str | None, str | None]]:
    """msg_id -> (status, reason, turn_id) of the session's queue items."""
    rows = query(
        d,
        "SELECT i.msg_id, q.status, q.reason, q.turn_id FROM queue_items q"
        " JOIN inbound i ON i.id = q.inbound_id WHERE q.session_label = ? ORDER BY q.seq",
        session,
    )
    return {r[0]: (r[1], r[2], r[3]) for r in rows}


async def wait_item(
    d: DaemonProcess, session: str, msg_id: str, expected: tuple[str, str | None, str | None]
) -> None:
    """Poll until the queue item of `msg_id` is (status, reason, turn_id); drops and
    command results are written after the ack, so they are not visible at once."""

    async def check() -> bool:
        return items(d, session).get(msg_id) == expected

    await wait_until(check, f"item {msg_id} to be {expected}")


def completed_inputs(d: DaemonProcess, session: str) -> list[list[str]]:
    return [t["inputs"] for t in turns(d, session) if t["status"] == "completed"]


def assert_run_once_in_order(d: DaemonProcess, session: str, msg_ids: list[str]) -> None:
    """Each msg_id is an input of exactly one completed turn, and the completed
    turns, read in order, consume them in arrival order (nothing reordered)."""
    consumed = [m for inputs in completed_inputs(d, session) for m in inputs]
    assert consumed == msg_ids, f"completed turns consumed {consumed}, expected {msg_ids}"
    done = items(d, session)
    completed = {t["id"] for t in turns(d, session) if t["status"] == "completed"}
    for m in msg_ids:
        status, _reason, turn_id = done[m]
        assert status == "done" and turn_id in completed, (m, done[m])


async def settle(adapter: Adapter, session: str, final_msg: str) -> Frame:
    """Wait for the final deliver answering `final_msg`."""
    return await adapter.deliver(session=session, msg_id=final_msg, status="final")
