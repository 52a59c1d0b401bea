"""Daemons of the test run forked from one process that has already imported them.

A test process starts hundreds of daemons, and each interpreter spent most of its
start importing the daemon's code. Here one server process per test process does
those imports once, with nothing else done, and forks each daemon from that state.
The child runs `broker.__main__` as `python -m broker` would, from its first line,
with the arguments, working directory, environment, `sys.path[0]`, stdout and
stderr that `subprocess.Popen` would have given it: only the imports (and the
offline token encoding, a pure function of its file) are done already. A start that
asks for an environment or a command of its own (a SQLite driver, a wrapper) is a
process of its own, as before.

The server holds no thread and runs no daemon code, so every fork starts from the
same state, the one right after the imports; it reaps its children and reports each
one's exit status on a pipe of that child's own. The test process gets a `Forked`
handle that answers as `Popen` does (pid, poll, wait, returncode, signals): its
signals go through a pidfd opened before the child could be reaped, so a reused pid
is never signalled. The server ends with its test process: its control socket
closes, or the kernel's parent-death signal kills it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pickle
import select
import selectors
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

READY = b"ready"
_MAX_FRAME = 1 << 20
_PR_SET_PDEATHSIG = 1
_REPO = Path(__file__).resolve().parents[1]


class Forked:
    """A daemon forked by the server: the part of `subprocess.Popen` tests use."""

    def __init__(self, args: list[str], pid: int, pidfd: int, status: int) -> None:
        self.args = args
        self.pid = pid
        self.returncode: int | None = None
        self._pidfd: int | None = pidfd
        self._status: int | None = status  # the server writes the exit status here

    def _collect(self, timeout: float | None) -> int | None:
        if self.returncode is not None:
            return self.returncode
        assert self._status is not None
        poller = select.poll()  # not select(): a test process may hold over 1024 files
        poller.register(self._status, select.POLLIN)
        if not poller.poll(None if timeout is None else timeout * 1000):
            return None
        data = b""
        while chunk := os.read(self._status, 64):
            data += chunk
        if not data:  # the server died before its child: nothing can tell the status
            raise RuntimeError(f"the fork server ended before reporting on pid {self.pid}")
        self.returncode = int(data)
        self._close()
        return self.returncode

    def poll(self) -> int | None:
        return self._collect(0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._collect(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is not None or self._pidfd is None:
            return  # ended and reaped, as Popen would not signal it either
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self._pidfd, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def _close(self) -> None:
        for fd in (self._pidfd, self._status):
            if fd is not None:
                os.close(fd)
        self._pidfd = self._status = None

    def __del__(self) -> None:
        with contextlib.suppress(OSError):
            self._close()


class Server:
    """The test process's end of its fork server, started at the first `spawn`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._python_env: dict[str, str] | None = None  # the server's PYTHON* variables

    def suits(self, env: dict[str, str]) -> bool:
        """Whether a child with `env` can be forked: the interpreter read its own
        variables (PYTHON*) at the server's start, so they must be the same."""
        return self._python_env is None or self._python_env == _python_vars(env)

    def _start(self, env: dict[str, str], timeout: float) -> socket.socket:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "tests.prefork", str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                cwd=_REPO,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,  # a daemon's stdout is a file, never a tty
            )
        finally:
            theirs.close()
        ours.settimeout(timeout)
        try:
            ready = ours.recv(_MAX_FRAME)
        except TimeoutError:
            self._proc.kill()
            raise
        if ready != READY:
            self._proc.kill()
            raise RuntimeError(f"the fork server did not start ({ready!r}): see stderr")
        ours.settimeout(None)
        return ours

    def spawn(
        self, args: list[str], cwd: Path, env: dict[str, str], log: Path, timeout: float
    ) -> Forked:
        """`python -m broker *args` in `cwd` with `env`, stdout and stderr appended
        to `log`, forked from the server."""
        with self._lock:
            if self._sock is None:
                self._sock = self._start(env, timeout)
                self._python_env = _python_vars(env)
            assert self.suits(env), "check `suits` first"
            request = {"args": args, "cwd": str(cwd), "env": env, "log": str(log)}
            self._sock.send(pickle.dumps(request))
            message, fds, _, _ = socket.recv_fds(self._sock, _MAX_FRAME, 2)
        reply = pickle.loads(message)
        if "error" in reply:
            for fd in fds:
                os.close(fd)
            raise RuntimeError(f"the fork server could not fork: {reply['error']}")
        pidfd, status = fds
        argv = [sys.executable, "-m", "broker", *args]
        return Forked(argv, reply["pid"], pidfd, status)

    def stop(self) -> None:
        with self._lock:
            if self._sock is not None:
                self._sock.close()  # the server sees the end and exits
                self._sock = None
            if self._proc is not None:
                try:
                    self._proc.wait(10)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait(10)
                self._proc = None


def _python_vars(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith("PYTHON")}


def available() -> bool:
    """Whether this machine can fork daemons this way (pidfds: Linux 5.3 or later)."""
    return hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal")


# The server's side, run as `python -m tests.prefork FD`.


def _preload() -> None:
    """What every daemon imports (and loads) before it serves, done once here."""
    import trio  # noqa: F401 - the event loops' own, imported when the daemon runs
    import uvloop  # noqa: F401

    import broker.daemon_cli  # noqa: F401 - what `python -m broker` imports first
    from broker.context import tokens

    tokens.TokenCounter()  # the default offline encoding, read from its file


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _serve(control: socket.socket) -> dict[str, Any] | None:
    """Fork a child per request until the control socket closes; the request, in
    the child (None in the server, at the end)."""
    children: dict[int, tuple[int, int]] = {}  # pidfd -> (pid, status pipe's write end)
    with selectors.DefaultSelector() as selector:
        selector.register(control, selectors.EVENT_READ)
        while True:
            for key, _ in selector.select():
                if key.fileobj is control:
                    data = control.recv(_MAX_FRAME)
                    if not data:
                        return None
                    request: dict[str, Any] = pickle.loads(data)
                    try:
                        pid = os.fork()
                    except OSError as exc:
                        control.send(pickle.dumps({"error": str(exc)}))
                        continue
                    if pid == 0:  # the selector closes as the `with` ends
                        control.close()
                        for pidfd, (_, write_end) in children.items():
                            os.close(pidfd)
                            os.close(write_end)
                        return request
                    pidfd = os.pidfd_open(pid)
                    read_end, write_end = os.pipe()
                    children[pidfd] = (pid, write_end)
                    selector.register(pidfd, selectors.EVENT_READ)
                    theirs = os.dup(pidfd)
                    try:
                        socket.send_fds(control, [pickle.dumps({"pid": pid})], [theirs, read_end])
                    finally:
                        os.close(theirs)
                        os.close(read_end)
                else:
                    pidfd = int(key.fd)
                    selector.unregister(pidfd)
                    pid, write_end = children.pop(pidfd)
                    _, status = os.waitpid(pid, 0)
                    with contextlib.suppress(BrokenPipeError):
                        os.write(write_end, str(os.waitstatus_to_exitcode(status)).encode())
                    os.close(write_end)
                    os.close(pidfd)


def _become(request: dict[str, Any]) -> None:
    """Turn this fresh child into what `Popen` would have started."""
    log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.close(null)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path[0] = os.getcwd()  # as for `python -m` started in that directory
    sys.argv = ["-m", *request["args"]]
    for name in [m for m in sys.modules if m == "tests" or m.startswith("tests.")]:
        del sys.modules[name]  # not importable from the daemon's directory


def main() -> None:
    control = socket.socket(fileno=int(sys.argv[1]))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() == 1:  # the test process is gone already
        return
    _preload()
    if (threads := _threads()) != 1:  # a fork would copy no thread but the first
        control.send(f"{threads} threads after the imports".encode())
        return
    control.send(READY)
    request = _serve(control)
    if request is None:
        return
    _become(request)
    import runpy

    runpy.run_module("broker", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
