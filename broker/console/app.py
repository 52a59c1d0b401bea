"""The web console: server-rendered pages over the ledger's readers, and a few actions.

Every request passes the token guard first (guard.py). Pages only read, on the
ledger's reader connections, never the writer. Actions go through the same op
functions the socket's operators call, so they check their arguments and
change the ledger exactly as `brokerctl` would; a `read` token gets 403 for
them, and erasure needs `admin` and is offered only when this broker has the
`entity.erase` op. The running turn streams to its page (live.py). It serves
on the daemon's own event loop, and everything the pages use (templates,
style, script) ships in this package.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import socket
from collections import deque
from collections.abc import MutableMapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast
from urllib.parse import parse_qs, quote, urlsplit

import anyio
import anyio.abc
import sniffio
from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from broker.console import tree
from broker.console.guard import TokenGuard
from broker.console.live import LiveTurns
from broker.console.tokens import Role, TokenFileError, Tokens, allows, load
from broker.observe.http import EndpointError, is_unix, unlink_stale
from broker.ops.roles import target_of
from broker.ops.table import stuck_items
from ledger.port.errors import LedgerLookupError
from plumbing import logs
from plumbing.ids import now_ms
from wire.framing import ProtocolError

if TYPE_CHECKING:
    from broker.config import Settings
    from broker.connection import Connection
    from broker.mailbox.registry import Mailboxes
    from broker.ops.table import Ops
    from ledger.port.protocols import LedgerPort

log = logs.get("broker.console")
PAGE = 100  # sessions a page
TURNS_SHOWN = 500  # of a session's latest turns
LOG_TAIL = 200
STATIC = Path(__file__).parent / "static"
ACTIONS: dict[str, tuple[str, Role]] = {  # form action -> (op, role needed)
    "fork": ("session.fork", "operate"),
    "reset": ("session.reset", "operate"),
    "compact": ("session.compact", "operate"),
    "cancel": ("item.cancel", "operate"),
    "erase": ("entity.erase", "admin"),
}


class DaemonView(Protocol):
    settings: Settings

    def state_of(self, label: str) -> str: ...


class _Caller:
    """What an op sees of the console as its caller (ops take a connection)."""

    id = "console"
    role = "operator"
    channel = None
    closed = False

    def __init__(self, role: Role) -> None:
        self.console_role = role


def _when(ms: int | None) -> str:
    if not ms:
        return ""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _q(value: object) -> str:
    return quote(str(value), safe="")


class Console:
    def __init__(
        self,
        daemon: DaemonView,
        ledger: LedgerPort,
        mailboxes: Mailboxes,
        ops: Ops,
        tokens: Tokens,
        sock: socket.socket,
    ) -> None:
        self.daemon = daemon
        self.ledger = ledger
        self.mailboxes = mailboxes
        self.ops = ops
        self.tokens = tokens
        self.sock = sock
        self.live = LiveTurns()  # an observer of the hooks (broker/endpoints.py installs it)
        self.log_tail: deque[dict[str, Any]] = deque(maxlen=LOG_TAIL)
        self.env = Environment(
            loader=PackageLoader("broker.console", "templates"),
            autoescape=select_autoescape(default=True),
        )
        self.env.filters["when"] = _when
        self.env.filters["q"] = _q
        self.app = Starlette(
            routes=[
                Route("/", self.sessions_page),
                Route("/session", self.session_page),
                Route("/turn", self.turn_page),
                Route("/ops", self.ops_page),
                Route("/stream", self.live.stream),
                Route("/action", self.action, methods=["POST"]),
                Mount("/static", StaticFiles(directory=STATIC), name="static"),
            ]
        )

    # -- start and stop ---------------------------------------------------------

    @classmethod
    async def open(
        cls, daemon: DaemonView, ledger: LedgerPort, mailboxes: Mailboxes, ops: Ops
    ) -> Console:
        """Load the tokens and bind the address, or EndpointError (exit 78)."""
        s = daemon.settings.console
        assert s.token_file is not None  # ConsoleSettings checks it
        try:
            tokens = await anyio.to_thread.run_sync(load, s.token_file)
        except TokenFileError as exc:
            raise EndpointError("console.token_file", str(s.token_file), str(exc)) from exc
        sock = await anyio.to_thread.run_sync(_bind, s.address)
        console = cls(daemon, ledger, mailboxes, ops, tokens, sock)
        logs.add_tap(console._tap)
        return console

    def close(self) -> None:
        logs.remove_tap(self._tap)
        self.sock.close()

    async def serve(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve until cancelled, on the daemon's own event loop."""
        from hypercorn.config import Config

        config = Config()
        config.bind = [f"fd://{self.sock.fileno()}"]
        config.accesslog = None
        config.errorlog = logging.getLogger("broker.console.http")
        config.graceful_timeout = 1.0
        config.include_server_header = False
        stop = anyio.Event()
        app = cast(Any, TokenGuard(self.app, self.tokens))

        async def run(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            # Shielded: hypercorn stops by its shutdown trigger (then it closes its
            # connections within graceful_timeout), not by a cancellation.
            with anyio.CancelScope(shield=True):
                if sniffio.current_async_library() == "trio":
                    from hypercorn.trio import serve as trio_serve

                    status = cast(Any, task_status)  # hypercorn names trio's type; it is anyio's
                    await trio_serve(app, config, shutdown_trigger=stop.wait, task_status=status)
                else:
                    from hypercorn.asyncio import serve as asyncio_serve

                    task_status.started()
                    await asyncio_serve(app, config, shutdown_trigger=stop.wait)

        try:
            async with anyio.create_task_group() as tg:
                await tg.start(run)
                task_status.started()
                try:
                    await anyio.sleep_forever()
                finally:
                    self.live.end_all()  # their streams end first
                    stop.set()
        finally:
            self.close()

    def _page(self, name: str, request: Request, code: int = 200, **values: Any) -> Response:
        role: Role = request.state.role
        html = self.env.get_template(name).render(
            role=role,
            can_operate=allows(role, "operate"),
            server=self.daemon.settings.server_name,
            **values,
        )
        return HTMLResponse(html, status_code=code)

    def _error(self, request: Request, status: int, message: str) -> Response:
        return self._page("error.html", request, status, status=status, message=message)

    # -- pages ------------------------------------------------------------------

    async def sessions_page(self, request: Request) -> Response:
        try:
            page = max(0, int(request.query_params.get("page", "0")))
        except ValueError:
            return self._error(request, 400, "page must be a number")
        sessions = await self.ledger.console_sessions(PAGE + 1, page * PAGE)
        more = len(sessions) > PAGE
        for s in sessions[:PAGE]:
            s["state"] = self.daemon.state_of(s["label"])
        return self._page("sessions.html", request, sessions=sessions[:PAGE], page=page, more=more)

    async def session_page(self, request: Request) -> Response:
        label = request.query_params.get("s", "")
        try:
            session = await self.ledger.console_session(label, TURNS_SHOWN)
            dispatches = await self.ledger.workers_list(label, None)
        except LedgerLookupError:
            return self._error(request, 404, "No such session.")
        rows = tree.rows(session["turns"], session["forks"], session["head"])
        can_erase = (
            "entity.erase" in self.ops.table
            and allows(request.state.role, "admin")
            and session.get("entity")
        )
        return self._page(
            "session.html",
            request,
            s=session,
            rows=rows,
            state=self.daemon.state_of(label),
            workers=dispatches,
            can_erase=can_erase,
            done=request.query_params.get("done"),
        )

    async def turn_page(self, request: Request) -> Response:
        label, turn = request.query_params.get("s", ""), request.query_params.get("t", "")
        try:
            detail = await self.ledger.console_turn(label, turn)
        except LedgerLookupError:
            return self._error(request, 404, "No such turn.")
        for event in detail["events"]:
            event["json"] = json.dumps(event["data"], indent=1, ensure_ascii=False)
        return self._page("turn.html", request, label=label, t=detail)

    async def ops_page(self, request: Request) -> Response:
        settings = self.daemon.settings
        now = now_ms()
        counts, untouched, unreadable = await self.ledger.health_reads(
            now - int(settings.queue.stuck_after_s * 1000)
        )
        timers = [t.as_json() for t in (await self.ledger.list_timers(None))[:200]]
        recent = await self.ledger.console_sessions(200, 0)
        workers = [s for s in recent if s["kind"] == "worker"]
        return self._page(
            "ops.html",
            request,
            counts=counts,
            problem=unreadable,
            stuck=stuck_items(self.mailboxes, untouched, now),
            timers=timers,
            workers=workers,
            actors=len(self.mailboxes.actors),
            logs=list(self.log_tail)[::-1],
        )

    def _tap(self, record: MutableMapping[str, Any]) -> None:
        self.log_tail.append(
            {
                "at": str(record.get("timestamp", "")),
                "level": str(record.get("level", "")),
                "event": str(record.get("event", "")),
                "session": str(record.get("session", "") or ""),
            }
        )

    # -- actions ----------------------------------------------------------------

    async def action(self, request: Request) -> Response:
        origin = request.headers.get("origin")
        if origin and origin != "null" and urlsplit(origin).netloc != request.url.netloc:
            return self._error(request, 403, "An action must come from this console's pages.")
        form = {k: v[-1] for k, v in parse_qs((await request.body()).decode()).items()}
        chosen = ACTIONS.get(form.get("action", ""))
        if chosen is None:
            return self._error(request, 400, "Unknown action.")
        op_name, needed = chosen
        if not allows(request.state.role, needed):
            return self._error(request, 403, f"This needs an {needed} token.")
        op = self.ops.table.get(op_name)
        if op is None:
            return self._error(request, 404, f"This broker has no {op_name} op.")
        label = form.get("session", "")
        args = _args(form.get("action", ""), form, label)
        caller = cast("Connection", _Caller(request.state.role))
        try:  # audited as the op is on the socket, with the token's role and no uid
            async with self.ops.audited.recorded(
                op_name, target_of(op_name, args), None, request.state.role
            ):
                result = await op(caller, args, None)
        except ProtocolError as exc:
            status = 404 if exc.code == "not_found" else 400
            return self._error(request, status, str(exc))
        except LedgerLookupError as exc:  # not_found, or invalid (a confirm that differs)
            return self._error(request, 404 if exc.code == "not_found" else 400, str(exc))
        log.info("console action", action=op_name, session=label, role=request.state.role)
        target = label
        if isinstance(result, dict) and op_name == "session.fork":
            target = str(result.get("label", label))
        if op_name == "entity.erase":
            return RedirectResponse("/?done=erased", status_code=303)
        done = quote(form.get("action", ""), safe="")
        return RedirectResponse(f"/session?s={_q(target)}&done={done}", status_code=303)


def _args(action: str, form: dict[str, str], label: str) -> dict[str, Any]:
    if action == "fork":
        return {"turn": form.get("turn", "")}
    if action == "cancel":
        return {"session": label, "item": form.get("item", "")}
    if action == "erase":
        entity = form.get("entity", "")
        return {"entity": entity, "confirm": form.get("confirm", "")}
    return {"session": label}


def _bind(address: str) -> socket.socket:
    """A listening socket on `address`, or EndpointError naming `console.address`."""
    key = "console.address"
    try:
        if is_unix(address):
            unlink_stale(key, Path(address))
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            _bound(sock, address)
            os.chmod(address, 0o660)
        else:
            host, sep, port = address.rpartition(":")
            if not sep or not port.isdigit():
                raise EndpointError(key, address, 'expected "host:port" or a Unix socket path')
            host = host.strip("[]") or "127.0.0.1"
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            _bound(sock, (host, int(port)))
        sock.listen(128)
        sock.setblocking(False)
        return sock
    except OSError as exc:
        in_use = exc.errno == errno.EADDRINUSE
        reason = "the address is in use" if in_use else (exc.strerror or str(exc))
        raise EndpointError(key, address, reason) from exc


def _bound(sock: socket.socket, where: str | tuple[str, int]) -> None:
    try:
        sock.bind(where)
    except OSError:
        sock.close()
        raise
