"""systemd integration: readiness and watchdog notifications, socket activation.

Pure stdlib plus anyio; no libsystemd binding.

Outside systemd everything here is a no-op: `notify` returns False when
$NOTIFY_SOCKET is unset or unusable and never raises, and the activation helpers
return None when $LISTEN_FDS is not meant for this process. The activation environment
is consumed once: `listen_fds` unsets $LISTEN_PID, $LISTEN_FDS and $LISTEN_FDNAMES (as
`sd_listen_fds(1)` does) and marks the passed fds close-on-exec, so engine
subprocesses neither inherit the sockets nor believe they were activated. The watchdog
is pinged from the event loop and only while the daemon says it is healthy, so a
wedged loop or a stuck component stops the pings and systemd restarts the daemon
(`WatchdogSec=` in the unit).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable

import anyio
import anyio.abc

from plumbing import logs

__all__ = [
    "ActivationError",
    "activated_listener",
    "extend_timeout",
    "listen_fds",
    "listen_fds_socket",
    "notify",
    "ready",
    "reloading",
    "status",
    "stopping",
    "watchdog",
    "watchdog_interval",
    "watchdog_pinger",
]

log = logs.get("broker.systemd")

SD_LISTEN_FDS_START = 3
_LISTEN_ENV = ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES")


class ActivationError(OSError):
    """systemd passed sockets, but none the broker can serve on.

    An OSError so that the daemon's start-up handling reports it in one line
    ("cannot start: ...") like any other failure to open its socket.
    """


# -- sd_notify --------------------------------------------------------------------


def _notify_address(value: str) -> str | bytes | None:
    if value.startswith("@"):  # abstract namespace
        return b"\0" + os.fsencode(value[1:])
    if value.startswith("/"):
        return value
    return None  # e.g. "vsock:…" (systemd ≥ 254): not for a broker on the host


def notify(state: str) -> bool:
    """Send one sd_notify datagram (newline-separated `KEY=value` lines).

    True when the datagram was handed to the socket named by $NOTIFY_SOCKET;
    False when not under systemd or when sending failed (logged). Never blocks.
    """
    target = os.environ.get("NOTIFY_SOCKET")
    if not target:
        return False
    address = _notify_address(target)
    if address is None:
        log.warning("unsupported NOTIFY_SOCKET, not notifying systemd", notify_socket=target)
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.setblocking(False)
            sock.sendto(state.encode(), address)
    except OSError as exc:
        log.warning(
            "systemd notification failed",
            notify_socket=target,
            state=state.split("\n", 1)[0],
            error=str(exc),
        )
        return False
    return True


def _with_status(state: str, status: str | None) -> str:
    if status is None:
        return state
    return f"{state}\nSTATUS={_one_line(status)}"


def _one_line(text: str) -> str:
    return " ".join(text.splitlines())


def ready(status: str | None = None) -> bool:
    """READY=1: start-up (or a reload) is complete."""
    return notify(_with_status("READY=1", status))


def stopping(status: str | None = None) -> bool:
    """STOPPING=1: shutdown has begun."""
    return notify(_with_status("STOPPING=1", status))


def reloading(status: str | None = None) -> bool:
    """RELOADING=1 with MONOTONIC_USEC (required by systemd ≥ 253); send `ready()` when done."""
    usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    return notify(_with_status(f"RELOADING=1\nMONOTONIC_USEC={usec}", status))


def status(text: str) -> bool:
    """STATUS=…: the one line `systemctl status` shows."""
    return notify(f"STATUS={_one_line(text)}")


def watchdog() -> bool:
    """WATCHDOG=1: one keep-alive ping."""
    return notify("WATCHDOG=1")


def extend_timeout(seconds: float) -> bool:
    """EXTEND_TIMEOUT_USEC: ask for `seconds` more from now in the current start or stop
    phase (it never shortens TimeoutStartSec/TimeoutStopSec; repeat before it runs out)."""
    return notify(f"EXTEND_TIMEOUT_USEC={max(1, round(seconds * 1_000_000))}")


# -- watchdog ---------------------------------------------------------------------


def _parse_int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


def watchdog_interval() -> float | None:
    """The full watchdog interval in seconds ($WATCHDOG_USEC), or None when off.

    None too when $WATCHDOG_PID names another process (the variables were
    inherited) or a value does not parse, as `sd_watchdog_enabled` does. Ping at
    half this interval (`watchdog_pinger` does).
    """
    usec = _parse_int(os.environ.get("WATCHDOG_USEC"))
    if usec is None or usec <= 0:
        return None
    pid = os.environ.get("WATCHDOG_PID")
    if pid is not None and _parse_int(pid) != os.getpid():
        return None
    return usec / 1_000_000


async def watchdog_pinger(interval: float, healthy: Callable[[], bool]) -> None:
    """Ping every `interval / 2` seconds while `healthy()` is true; runs until cancelled.

    While `healthy()` is false (or raises) the pings stop, so systemd restarts
    the daemon once a whole interval passes without one.
    """
    if interval <= 0:
        raise ValueError(f"watchdog interval must be positive, not {interval}")
    period = interval / 2
    was_healthy = True
    next_ping = anyio.current_time()
    while True:
        try:
            ok = healthy()
        except Exception:
            log.exception("health check failed; treating the daemon as unhealthy")
            ok = False
        if ok:
            watchdog()
            if not was_healthy:
                log.info("healthy again, watchdog pings resumed")
        elif was_healthy:
            log.warning("unhealthy, withholding watchdog pings", watchdog_s=interval)
        was_healthy = ok
        next_ping += period
        now = anyio.current_time()
        if next_ping < now:  # the loop was late: keep the spacing rather than burst
            next_ping = now + period
        await anyio.sleep_until(next_ping)


# -- socket activation ------------------------------------------------------------


def listen_fds() -> list[int]:
    """The fds systemd passed to this process (3, 4, …), or [] when not activated.

    Like `sd_listen_fds(1)`: honours $LISTEN_PID, unsets the $LISTEN_* variables
    whatever the outcome and marks each fd close-on-exec. Raises ActivationError
    when the variables are meant for this process but are unusable.
    """
    env = {key: os.environ.pop(key, None) for key in _LISTEN_ENV}
    if env["LISTEN_PID"] is None or env["LISTEN_FDS"] is None:
        return []
    if _parse_int(env["LISTEN_PID"]) != os.getpid():
        return []  # inherited from a parent that was activated
    count = _parse_int(env["LISTEN_FDS"])
    if count is None or count < 0:
        raise ActivationError(f"invalid LISTEN_FDS={env['LISTEN_FDS']!r}")
    fds = list(range(SD_LISTEN_FDS_START, SD_LISTEN_FDS_START + count))
    for fd in fds:
        try:
            os.set_inheritable(fd, False)
        except OSError as exc:
            raise ActivationError(f"LISTEN_FDS={count}, but fd {fd} is not open") from exc
    return fds


def _listening_unix_stream(fd: int) -> socket.socket | None:
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        return None  # not a socket (or a FIFO, Sockets= can pass those too)
    try:
        if (
            sock.family == socket.AF_UNIX
            and sock.type == socket.SOCK_STREAM
            and sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
        ):
            return sock
    except OSError:
        pass
    sock.detach()  # not ours to close
    return None


def listen_fds_socket() -> socket.socket | None:
    """The first listening AF_UNIX stream socket systemd passed, non-blocking.

    None when the process was not socket-activated. Raises ActivationError when
    it was, but no passed fd is such a socket (e.g. a TCP `ListenStream=`). The
    other passed fds are left open and untouched.
    """
    fds = listen_fds()
    if not fds:
        return None
    for fd in fds:
        sock = _listening_unix_stream(fd)
        if sock is not None:
            sock.setblocking(False)
            return sock
    raise ActivationError(
        f"systemd passed fds {fds[0]}..{fds[-1]}, but none is a listening Unix stream socket"
    )


async def activated_listener() -> anyio.abc.SocketListener | None:
    """The socket-activated listener as an anyio listener, or None when not activated.

    The listener owns the socket; closing it closes only this process's copy,
    systemd keeps listening (and queues connections) while the daemon restarts.
    """
    sock = listen_fds_socket()
    if sock is None:
        return None
    if not hasattr(anyio.abc.SocketListener, "from_socket"):  # pragma: no cover - anyio < 4.10
        sock.close()
        raise ActivationError("socket activation needs anyio >= 4.10 (SocketListener.from_socket)")
    return await anyio.abc.SocketListener.from_socket(sock)
