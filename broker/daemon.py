"""The daemon: wires the ledger, router, ingress, ops and server under one task group.

One root task group owns everything; "ready" is announced only after the ledger is
migrated, the writer runs and the socket listens. On stop the listener closes first,
then the rest is cancelled; the ledger writer finishes every job already handed to it
before the ledger closes (ledger/writer/group_commit.py), so no acked write is cut
short. Every failure before "ready" becomes one `StartupError` with its sysexits
status (`exit_status`), and after it a lost writer becomes `LedgerLost`; the decision
is made outside any `except*` block, as some Python 3.11 releases wrap an exception
raised inside one in a group.
"""

from __future__ import annotations

import errno
import signal
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.abc

from broker import systemd
from broker.cluster_push import follower_for
from broker.config import (
    ConfigError,
    Settings,
    configure_redaction,
    load_rules,
    load_settings,
    secrets_of,
)
from broker.connection import Connection
from broker.deliveries import Deliveries
from broker.endpoints import Endpoints
from broker.engines.factory import build_engine
from broker.idle_close import IdleCloser
from broker.ingress import Ingress
from broker.mailbox.registry import Mailboxes
from broker.mcp.tools import McpTools
from broker.observe.http import EndpointError
from broker.ops.table import Ops
from broker.recall_indexer import semantic
from broker.retention import Retention
from broker.router import Router
from broker.runtime import RuntimeUnreachable
from broker.server import AlreadyRunning, Server
from broker.timers import Timers, TimerWheel
from broker.titler import Titler
from ledger.api.errors import LedgerInUse
from ledger.api.owner import claim as claim_ledger
from ledger.db import damaged, is_damage
from ledger.inspect import FailureKind, storage_failure
from ledger.port.errors import (
    LedgerError,
    LedgerNotWritable,
    LedgerUnreachable,
    LedgerWriteFailed,
    WriterClosed,
    WriterDied,
    WriterStuck,
)
from ledger.sqlite.store import Ledger
from plumbing import logs
from wire.frames import Hello

log = logs.get("broker.daemon")
_E = TypeVar("_E", bound=BaseException)


FLUSH_AT_STOP_S = 2.0  # for replies already posted to clients when the daemon stops


# sysexits.h: what a start-up failure exits with (README, "Operating the broker").
EX_UNAVAILABLE = 69  # another daemon serves the socket
EX_SOFTWARE = 70  # a failure of the broker itself (the log has the traceback)
EX_CANTCREAT = 73  # a file or directory cannot be created
EX_IOERR = 74  # another I/O error
EX_DATAERR = 65  # the ledger is damaged or too new
EX_NOPERM = 77  # not allowed to read or write the ledger or the socket
EX_CONFIG = 78  # a configured address, file or engine that cannot be used


class StartupError(Exception):
    """The daemon cannot start; the message says why in one sentence."""

    def __init__(self, message: str, status: int = EX_SOFTWARE) -> None:
        super().__init__(message)
        self.status = status


class LedgerLost(Exception):
    """The running daemon lost its ledger writer and stopped; a restart recovers."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status  # the daemon's exit status


class Daemon:
    def __init__(self, settings: Settings, config_path: Path | None = None) -> None:
        self.settings = settings
        self.config_path = config_path
        self._stop = anyio.Event()
        self.ledger: Ledger | None = None
        self.server: Server | None = None
        self.mailboxes: Mailboxes | None = None
        self.router: Router | None = None
        self.ingress: Ingress | None = None
        self.started = False

    async def reload(self) -> None:
        """SIGHUP: re-read the config and apply what can change live.

        An invalid new config is refused with a logged reason and the old one
        stays in force. Keys that need a restart keep their old values.
        """
        try:
            new = await anyio.to_thread.run_sync(self._load_config)
        except ConfigError as exc:
            log.error("reload refused; the old configuration stays in force", reason=str(exc))
            return
        merged, pending = merge_live(self.settings, new)
        rules = load_rules(merged)  # validated by _load_config already
        self.settings = merged
        if self.router is not None:
            self.router.update(
                rules,
                frozenset((o.channel, o.sender_id) for o in merged.owners),
                merged.reset.policy(),
            )
        if self.server is not None:
            self.server.apply_auth(merged)
        if self.ingress is not None:
            self.ingress.settings = merged
        if self.mailboxes is not None:
            self.mailboxes.reconfigure(merged)
        configure_redaction(merged)
        logs.configure(merged.log_level, merged.log_format)
        if self.ledger is not None:
            self._configure_writer_logging(self.ledger, merged)
            try:
                self.ledger.snapshot_max_bytes = merged.snapshots.max_bytes
            except WriterClosed as exc:
                log.error("the ledger writer keeps its old snapshots.max_bytes", error=str(exc))
        if pending:
            log.warning("reloaded; these settings take effect after a restart", keys=pending)
        else:
            log.info("reloaded", rules=len(rules))

    @staticmethod
    def _configure_writer_logging(ledger: Ledger, settings: Settings) -> None:
        try:
            ledger.configure_logging(
                settings.log_level,
                settings.log_format,
                tuple(secrets_of(settings)),
                tuple(settings.logging.redact),
            )
        except WriterClosed as exc:
            log.error("the ledger writer keeps its old log level", error=str(exc))

    def _load_config(self) -> Settings:
        settings = load_settings(self.config_path)
        load_rules(settings)
        return settings

    def healthy(self) -> bool:
        """For the systemd watchdog: a wedged event loop stops the pings by itself."""
        return True

    def stop(self) -> None:
        self._stop.set()

    def state_of(self, label: str) -> str:
        return self.mailboxes.state_of(label) if self.mailboxes is not None else "idle"

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[Daemon] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        s = self.settings
        # Own the ledger's writes before anything writes it: a library Store
        # (ledger/api/owner.py) then refuses the file and names this socket.
        if s.ledger.kind == "postgres":  # many nodes share it: PostgreSQL keeps order
            await self._run_on_ledger(task_status)
            return
        s.ledger.path.parent.mkdir(parents=True, exist_ok=True)
        with claim_ledger(s.ledger.path, socket=str(s.socket_path)):
            await self._run_on_ledger(task_status)

    def _open_ledger(self) -> AbstractAsyncContextManager[Ledger]:
        s = self.settings
        if s.ledger.kind == "postgres":
            from ledger import postgres  # psycopg is needed only here (the `postgres` extra)

            assert s.ledger.dsn is not None  # LedgerSettings checks it
            return postgres.open(
                s.ledger.dsn,
                readers=s.ledger.readers,
                write_fail_exit_s=s.ledger.write_fail_exit_s,
                writer_queue=s.ledger.writer_queue,
                writer_wait_s=s.ledger.writer_wait_s,
            )
        return Ledger.open(
            s.ledger.path,
            s.ledger.synchronous,
            readers=s.ledger.readers,
            writer=s.ledger.writer,
            log=(s.log_level, s.log_format),
            write_fail_exit_s=s.ledger.write_fail_exit_s,
            check_s=s.ledger.check_s,
            writer_queue=s.ledger.writer_queue,
            writer_wait_s=s.ledger.writer_wait_s,
            key=s.ledger.key(),
        )

    async def _run_on_ledger(self, task_status: anyio.abc.TaskStatus[Daemon]) -> None:
        s = self.settings
        async with self._open_ledger() as ledger:
            self.ledger = ledger
            ledger.snapshot_max_bytes = s.snapshots.max_bytes
            self._configure_writer_logging(ledger, s)  # its redaction knows our secrets
            if not ledger.check_finished:
                log.warning(
                    "the ledger's integrity check stopped at its time bound; the part it"
                    " covered is sound (brokerctl doctor checks all of it)",
                    check_s=s.ledger.check_s,
                )
            if ledger.migrations_applied:
                log.info("ledger migrated", applied=ledger.migrations_applied, path=ledger.location)
            router = Router(
                load_rules(s),
                frozenset((o.channel, o.sender_id) for o in s.owners),
                resets=s.reset.policy(),
            )
            self.router = router
            deliveries = Deliveries(ledger)
            follower = follower_for(s, ledger, deliveries)  # a cluster's replies
            engine = build_engine(s.engine)
            mailboxes = Mailboxes(s, ledger, engine, router, deliveries)
            self.mailboxes = mailboxes
            ingress = Ingress(s, ledger, router, mailboxes.on_committed)
            self.ingress = ingress
            ingress.frame_handlers["delivered"] = deliveries.on_delivered
            ingress.heard_from = deliveries.heard_from
            runtime = await _sessions_runtime(s, mailboxes, ingress)
            timers: Timers = (
                TimerWheel(ledger, mailboxes.post) if runtime is None else runtime.timers()
            )
            mailboxes.timers_changed = timers.changed  # the agents' `schedule` tool
            titler = Titler.build(s.titles, s.engines, ledger)
            mailboxes.ports.commits.on_written = titler.offer
            ops = Ops(ledger, self.state_of, mailboxes, timers)

            async def on_hello(conn: Connection, hello: Hello) -> None:
                if hello.role == "adapter":
                    ingress.attach(conn)
                    # Beside the frames it reads: a long backlog goes at the
                    # adapter's pace, and its confirmations must be read meanwhile.
                    assert conn.tg is not None
                    conn.tg.start_soon(deliveries.adapter_connected, conn)

            async def on_close(conn: Connection) -> None:
                if conn.role == "adapter":
                    ingress.detach(conn)
                    deliveries.adapter_gone(conn)

            server = Server(s, ingress.handle, ops.handle, on_hello, on_close)
            self.server = server
            # Before the socket: an endpoint that cannot start leaves nothing behind.
            endpoints = await Endpoints.open(self, ledger, mailboxes, ops)
            try:
                listener = await server.open_listener()
            except BaseException:
                await endpoints.aclose()
                raise
            async with anyio.create_task_group() as tg, endpoints:
                await endpoints.start(tg)
                if s.mcp.servers:  # the servers connect in the background
                    mcp = McpTools(s, self.config_path.parent if self.config_path else None)
                    mailboxes.mcp = mcp
                    await tg.start(mcp.run)
                if runtime is not None:  # before the backlog: it is handed to the runtime
                    await tg.start(runtime.run)
                # Rehydrate the backlog before the socket takes new work.
                await tg.start(mailboxes.run)
                # Acks and hand-offs of committed messages (ingress.py).
                await tg.start(ingress.run)
                await tg.start(deliveries.record_confirmations)
                if follower is not None:
                    await tg.start(follower.run)
                # After the backlog: due times missed while down fire first thing.
                await tg.start(timers.run)
                await tg.start(titler.run)
                await tg.start(semantic(s.recall.model_dir).run, ledger)
                await tg.start(server.serve, listener)
                tg.start_soon(ops.erasure.resume)  # one a stop cut off
                ops.retention = Retention(ledger, s.retention.keep_days, router)
                await tg.start(ops.retention.run)  # expires at start, in the background
                await tg.start(IdleCloser(ledger, lambda: self.settings).run)
                log.info(
                    "ready",
                    socket=str(s.socket_path),
                    ledger=ledger.location,
                    synchronous=s.ledger.synchronous,
                    engine=s.engine.kind,
                )
                systemd.ready(f"serving on {s.socket_path}")
                interval = systemd.watchdog_interval()
                if interval is not None:
                    tg.start_soon(systemd.watchdog_pinger, interval, self.healthy)
                self.started = True
                task_status.started(self)
                await self._stop.wait()
                log.info("stopping", grace_s=s.shutdown_grace_s)
                systemd.stopping(f"stopping: up to {s.shutdown_grace_s:g} s for running turns")
                systemd.extend_timeout(s.shutdown_grace_s + FLUSH_AT_STOP_S + 10)
                server.stop_accepting()
                ingress.accepting = False
                timers.stop()
                await mailboxes.drain(s.shutdown_grace_s)
                with anyio.move_on_after(FLUSH_AT_STOP_S):
                    await server.flush_all()
                tg.cancel_scope.cancel()
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await mailboxes.aclose_engines()
        log.info("stopped")


async def _sessions_runtime(s: Settings, mailboxes: Mailboxes, ingress: Ingress) -> Any:
    """`[runtime] kind = "temporal"`: the node's Temporal runtime, installed (None: local).
    Imported only then: `temporalio` is the optional extra `temporal`."""
    if s.runtime.kind != "temporal":
        return None
    from broker.runtime.temporal.runtime import TemporalRuntime, connect

    runtime = TemporalRuntime(s, mailboxes, await connect(s.runtime))
    runtime.install()
    ingress.runtime_failure = runtime.failure
    log.info("sessions run on Temporal", address=s.runtime.address, queue=s.runtime.task_queue)
    return runtime


RESTART_ONLY = (
    "socket_path",
    "socket_mode",
    "ledger",
    "server_name",
    "policies_file",
    "runtime",
    "node_id",
    "metrics",
    "tracing",
    "console",
)
ENGINE_LIVE = frozenset({"timeout_s"})


def merge_live(old: Settings, new: Settings) -> tuple[Settings, list[str]]:
    """`new` with the keys that need a restart kept from `old`; and those keys, if changed."""
    keep: dict[str, object] = {key: getattr(old, key) for key in RESTART_ONLY}
    pending = [key for key in RESTART_ONLY if getattr(old, key) != getattr(new, key)]
    engine_changed = [
        f"engine.{key}"
        for key in type(old.engine).model_fields
        if key not in ENGINE_LIVE and getattr(old.engine, key) != getattr(new.engine, key)
    ]
    if engine_changed:
        keep["engine"] = old.engine.model_copy(update={"timeout_s": new.engine.timeout_s})
        pending += engine_changed
    return new.model_copy(update=keep), pending


async def watch_signals(
    daemon: Daemon,
    scope: anyio.CancelScope,
    *,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """SIGHUP reloads. The first SIGTERM/SIGINT stops cleanly; a second one cancels everything."""
    # Installed before READY: an unhandled SIGHUP would kill the daemon, which
    # systemd counts as a clean exit and would not restart.
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        task_status.started()
        async for signum in signals:
            if signum == signal.SIGHUP:
                log.info("signal received", signal="SIGHUP")
                systemd.reloading()
                try:
                    await daemon.reload()
                finally:
                    systemd.ready()
                continue
            if daemon._stop.is_set():
                log.warning("second signal, forcing exit", signal=signal.Signals(signum).name)
                scope.cancel()
                return
            log.info("signal received", signal=signal.Signals(signum).name)
            daemon.stop()


async def run_until_signalled(settings: Settings, config_path: Path | None = None) -> None:
    daemon = Daemon(settings, config_path)
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(watch_signals, daemon, tg.cancel_scope)
            await daemon.run()
            tg.cancel_scope.cancel()
    except BaseException as exc:  # decided below, outside the handler
        failure = _failure(exc, daemon.started, settings.ledger.path)
        if failure is None:
            raise
    else:
        return
    if isinstance(failure, LedgerLost):
        # Nothing can be written any more: stop rather than accept work that
        # cannot be acked. What was acked is in the ledger; a restart recovers.
        if failure.status == EX_IOERR:
            log.critical(
                "the ledger could not write; exiting for a restart",
                error=str(failure),
                status=failure.status,
            )
        else:
            log.critical("ledger writer died; stopping", error=str(failure))
    raise failure


def _failure(exc: BaseException, started: bool, ledger: Path) -> StartupError | LedgerLost | None:
    """What the CLI reports for `exc`; None to let it through as it is (a bug at run time,
    a second signal)."""
    leaves = [e for e in _leaves(exc) if isinstance(e, Exception)]
    died = next((e for e in leaves if isinstance(e, WriterDied)), None)
    if started:
        if died is None:
            return None
        # Storage unwritable for `write_fail_exit_s`: EX_IOERR, which systemd restarts on.
        status = EX_IOERR if isinstance(died, WriterStuck) else 1
        return _caused(LedgerLost(str(died), status), died)
    if not leaves:
        return None
    first = died or leaves[0]
    status = exit_status(first)
    if status == EX_SOFTWARE:
        log.critical("start-up failed", exc_info=first)  # a bug: keep its traceback in the log
    reason = str(first) or type(first).__name__
    if status == EX_DATAERR and not isinstance(first, LedgerError):
        # Damage found past the check at start (crash recovery read a damaged page).
        reason = str(damaged(ledger, [reason]))
    return _caused(StartupError(reason, status), first)


def _caused(failure: _E, cause: BaseException) -> _E:
    failure.__cause__ = cause
    return failure


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


_STORAGE_STATUS: dict[FailureKind, int] = {
    "permission": EX_NOPERM,
    "io": EX_IOERR,
    "damage": EX_DATAERR,
    "cannot_open": EX_CANTCREAT,
}
_ERRNO_STATUS = {
    errno.EACCES: EX_NOPERM,
    errno.EPERM: EX_NOPERM,
    errno.ENOENT: EX_CANTCREAT,
    errno.ENOTDIR: EX_CANTCREAT,
    errno.EROFS: EX_CANTCREAT,
    errno.EEXIST: EX_CANTCREAT,
}


def exit_status(exc: BaseException) -> int:
    """The sysexits status of a start-up failure (README: the table under Operating)."""
    if isinstance(exc, LedgerNotWritable):
        return EX_NOPERM
    if isinstance(exc, ConfigError):  # an engine's factory, say
        return EX_CONFIG
    if isinstance(exc, LedgerInUse | LedgerUnreachable):
        return EX_UNAVAILABLE
    if isinstance(exc, LedgerError):
        return EX_DATAERR  # damaged, or a schema newer than this broker
    if isinstance(exc, LedgerWriteFailed) and not isinstance(exc, WriterDied):
        # Crash recovery's first write; the cause does not survive the trip from the
        # writer process, so its message tells damage from other failures.
        damage = is_damage(exc.__cause__) or any(w in str(exc) for w in _DAMAGE_WORDS)
        return EX_DATAERR if damage else EX_IOERR
    kind = storage_failure(exc)
    if kind is not None:
        return _STORAGE_STATUS[kind]
    if isinstance(exc, AlreadyRunning | RuntimeUnreachable):
        return EX_UNAVAILABLE
    if isinstance(exc, EndpointError):
        return EX_CONFIG
    if isinstance(exc, OSError):
        return _ERRNO_STATUS.get(exc.errno or 0, EX_IOERR)
    return EX_SOFTWARE


_DAMAGE_WORDS = ("database disk image is malformed", "file is not a database")


def backend_options(backend: str) -> dict[str, Any]:
    if backend != "asyncio":
        return {}
    try:
        import uvloop  # noqa: F401
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return {}
    return {"use_uvloop": True}
