"""Traces leave the daemon through a process of their own.

Why a process: making a turn's spans, encoding them for OTLP and posting them
is Python work per span and per attribute, and in the daemon's process it would
be its event loop's time and its GIL, and a collector that answers slowly would
hold them. So the hooks only note what happened as small tuples
(`TraceShipper`, in the daemon); once a second the notes go down a pipe to the
exporter child (`main`), which makes the spans (tracing.py) and sends them, one
request a shipment. The notes are plain tuples of strings and numbers, so they
travel in marshal's encoding, the cheapest the daemon can make; a shipment
holding anything marshal cannot encode (an engine's own object in a model
call's event) travels pickled instead.

The daemon never waits on it: notes past `MAX_PENDING` are dropped and
counted, a pipe that is full waits only the shipping task, and a child that
died is logged once and traces stop, nothing else. The child stops when the
pipe closes (the daemon stopped, or died), after sending what it holds.
"""

from __future__ import annotations

import json
import marshal
import os
import pickle
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, BinaryIO

import anyio
import anyio.abc

from broker.observe.hub import Observer
from broker.observe.notes import as_facts, facts
from ledger.port.records import TurnRecord
from plumbing import gc_policy, logs

if TYPE_CHECKING:
    from broker.config import Settings
    from broker.observe.tracing import Tracing

log = logs.get("broker.observe")
SHIP_EVERY_S = 1.0
MAX_PENDING = 100_000  # notes waiting for the next shipment; past it they are dropped
STOP_TIMEOUT_S = 5.0
BAD_NOTES_EVERY_S = 60.0
_HEADER = struct.Struct("!QB")  # a shipment's size, and how it is encoded
_MARSHAL, _PICKLE = 0, 1


class TraceShipper(Observer):
    """The daemon's side: the hooks' notes, shipped to the exporter child."""

    def __init__(self, settings: Settings) -> None:
        t = settings.tracing
        self.config = {
            "endpoint": t.otlp_endpoint,
            "capture_content": t.capture_content,
            "service": settings.server_name,
            "instance": settings.node_id or settings.server_name,
        }
        self.capture = t.capture_content
        self.pending: list[tuple[Any, ...]] = []
        self.dropped = 0

    def _note(self, note: tuple[Any, ...]) -> None:
        if len(self.pending) < MAX_PENDING:
            self.pending.append(note)
        else:
            self.dropped += 1

    def acked(self, filed_at: float, acked_at: float, session: str, item: str) -> None:
        now = time.time_ns()
        self._note(("ingest", now - int((acked_at - filed_at) * 1e9), now, session, item))

    def engine_call(self, turn: str, began_ms: int, ended_ms: int) -> None:
        self._note(("engine_call", turn, began_ms, ended_ms))

    def tool_call(self, turn: str, name: str, began_ms: int, ended_ms: int, status: str) -> None:
        self._note(("tool_call", turn, name, began_ms, ended_ms, status))

    def turn(self, rec: TurnRecord, written: str) -> None:
        self._note(("turn", facts(rec, self.capture), written))

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Start the child, then ship the notes until cancelled; then the last ones."""
        command = [sys.executable, "-m", "broker.observe.trace_export", json.dumps(self.config)]
        process = await anyio.open_process(
            command, stdin=subprocess.PIPE, stdout=None, stderr=None, start_new_session=True
        )
        task_status.started()
        alive = True
        try:
            while alive:
                await anyio.sleep(SHIP_EVERY_S)
                alive = await self._ship(process)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(STOP_TIMEOUT_S):
                if alive:
                    await self._ship(process)
                assert process.stdin is not None
                await process.stdin.aclose()
                await process.wait()
            if process.returncode is None:
                process.kill()

    async def _ship(self, process: anyio.abc.Process) -> bool:
        if self.dropped:
            log.warning("trace notes dropped: the exporter did not keep up", dropped=self.dropped)
            self.dropped = 0
        if not self.pending:
            return True
        batch, self.pending = self.pending, []
        data = frame(batch)
        assert process.stdin is not None
        try:
            await process.stdin.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            log.error("the trace exporter stopped; no more traces are sent", error=str(exc))
            self.pending = []
            return False
        return True


def frame(notes: list[tuple[Any, ...]]) -> bytes:
    """A shipment of notes as it goes down the pipe."""
    try:
        data, how = marshal.dumps(notes), _MARSHAL
    except ValueError:  # an object marshal does not know
        data, how = pickle.dumps(notes, protocol=pickle.HIGHEST_PROTOCOL), _PICKLE
    return _HEADER.pack(len(data), how) + data


def notes_of(how: int, data: bytes) -> list[tuple[Any, ...]]:
    """A shipment's notes, from the bytes `frame` made."""
    notes: list[tuple[Any, ...]] = marshal.loads(data) if how == _MARSHAL else pickle.loads(data)
    return notes


# -- the child ----------------------------------------------------------------


def main(argv: list[str]) -> int:
    from broker.observe.tracing import Tracing  # the `tracing` extra, in this process only

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the daemon's to handle; it closes the pipe
    config = json.loads(argv[1])
    tracing = Tracing.open(
        config["endpoint"], config["capture_content"], config["service"], config["instance"]
    )
    gc_policy.tune()
    try:
        serve(sys.stdin.buffer, tracing)
    finally:
        tracing.shutdown()  # sends what it holds, bounded by the exporter's timeout
    return 0


def serve(shipments: BinaryIO, tracing: Tracing) -> None:
    """Make and send the spans of each shipment until the stream ends. A note that
    cannot be made into spans costs only its own (logged at most once a minute)."""
    replay = handlers(tracing)
    failed, why, said_at = 0, "", -BAD_NOTES_EVERY_S
    while True:
        header = shipments.read(_HEADER.size)
        if len(header) < _HEADER.size:
            return
        size, how = _HEADER.unpack(header)
        for kind, *args in notes_of(how, shipments.read(size)):
            try:
                replay[kind](*args)
            except Exception as exc:
                failed, why = failed + 1, f"{kind}: {exc!r}"
        tracing.flush()
        if failed and time.monotonic() >= said_at + BAD_NOTES_EVERY_S:
            log.error("trace notes made no spans", notes=failed, last=why)
            failed, said_at = 0, time.monotonic()


def handlers(tracing: Tracing) -> dict[str, Callable[..., None]]:
    """What takes each kind of note the daemon ships."""

    def turn(values: tuple[Any, ...], written: str) -> None:
        tracing.turn(as_facts(values), written)

    return {
        "ingest": tracing.ingest,
        "engine_call": tracing.engine_call,
        "tool_call": tracing.tool_call,
        "turn": turn,
    }


if __name__ == "__main__":
    os.nice(5)  # behind the daemon and its writer when the CPU is short
    sys.exit(main(sys.argv))
