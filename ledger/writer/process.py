"""The ledger's writer connection in a process of its own.

The writer's transactions are mostly SQLite's C code, which runs without the GIL, but
every statement takes the GIL back when it returns; in the daemon's process the event
loop holds the GIL whenever it has work, so under load the writer mostly waited for
it (docs/performance.md). In its own process the writer has its own GIL; the daemon's
event loop only pickles a batch, writes it to the socket and later reads the outcomes
back, with no thread of its own in between. Frames on the socket are an 8-byte length
and a pickle: the parent sends a list of jobs, the child answers with a list of
outcomes in the same order.

The child runs the same `Transactor` as the thread writer (one batch is one
transaction, jobs fail alone, outcomes come back only after the COMMIT) and keeps the
writer-side caches with its connection. It never outlives the daemon: it asks the
kernel for SIGKILL when its parent dies and stops when the socket to it closes; it
ignores SIGINT, SIGTERM and SIGHUP, which are the daemon's to handle, and the daemon
stops it by closing the socket after its last batch.

If the child dies, every waiting and later job fails with `WriterDied` and the writer
stops, which stops the daemon: a batch in flight may or may not have committed, and
only a restart (with its recovery) can tell; nothing was acked for it, so nothing
acked is lost. The death is seen when it happens, not when a batch comes back:
`exited` waits on a pidfd (opened at spawn, before anything can reap the child and
free its pid), so an idle daemon stops too, and `problem` tells `health` whether the
child runs, on every call.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import signal
import socket
import sqlite3
import struct
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from typing import cast

import anyio

from ledger.db import Synchronous
from ledger.port.cipher import Key
from ledger.port.errors import WriterDied
from ledger.writer.jobs import JobSpec, Outcome
from ledger.writer.transactor import open_transactor
from plumbing import gc_policy, logs, redact
from plumbing.rawsock import SocketReader, send_all

_HEADER = struct.Struct("!Q")
_PR_SET_PDEATHSIG = 1
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
LOST_WAIT_S = 0.5  # for a child whose socket broke to be seen ending
EXIT_POLL_S = 0.1  # how often `exited` looks without a pidfd (not Linux 5.3+)
# A batch unanswered this long: the child is wedged (a stuck disk, a debugger).
# A healthy child answers in milliseconds; a full batch with FULL sync in well under 1 s.
STALLED_S = 5.0


class UnpicklableJob(TypeError):
    """A job the writer process cannot be sent (a closure, or an argument pickle refuses)."""


class RemoteJobError(Exception):
    """A job raised an exception that could not be sent back from the writer process."""


def _send(sock: socket.socket, payload: bytes) -> None:
    sock.sendall(_HEADER.pack(len(payload)) + payload)


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            return None
        got += k
    return bytes(buf)


def _recv(sock: socket.socket) -> bytes | None:
    """One frame, or None at end of stream."""
    header = _recv_exact(sock, _HEADER.size)
    if header is None:
        return None
    return _recv_exact(sock, _HEADER.unpack(header)[0])


class ProcessLink:
    """The daemon's side of the writer process: a `BatchLink` over the socket.

    The event loop writes each pickled batch to the socket and reads the
    outcomes back itself: no thread in between, and with two batches in
    flight the child finds the next one waiting when it commits.
    """

    depth = 2

    def __init__(self, proc: subprocess.Popen[bytes], sock: socket.socket) -> None:
        self.proc = proc
        self._sock: socket.socket | None = sock
        self._reader: SocketReader | None = None  # from `start`, in the event loop
        self._inbuf = bytearray()  # bytes read and not yet a whole frame
        # Per batch sent and not answered: its size and the jobs pickle refused.
        self._sent: deque[tuple[int, dict[int, BaseException]]] = deque()
        self._sent_at: deque[float] = deque()  # when each of those was sent (`problem`)
        self._pidfd = _pidfd(proc.pid)  # now, while the pid is surely the child's

    @property
    def pid(self) -> int:
        return self.proc.pid

    @classmethod
    def spawn(
        cls,
        path: Path,
        synchronous: Synchronous,
        log: tuple[str, str] = ("info", "json"),
        key: Key | None = None,
    ) -> ProcessLink:
        """Start the writer process. Call from the thread that lives as long as
        the daemon (its main thread): the kernel's parent-death signal follows
        the thread that started the child, not the process. A key goes to the
        child as the first frame on the socket, never in its arguments, which
        anyone on the machine may list."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        package_root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (package_root, env.get("PYTHONPATH", "")) if p
        )
        try:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "ledger.writer.process",
                    str(theirs.fileno()),
                    str(os.getpid()),
                    str(path),
                    synchronous,
                    *log,
                    "keyed" if key is not None else "plain",
                ],
                pass_fds=[theirs.fileno()],
                env=env,
                stdin=subprocess.DEVNULL,
            )
        finally:
            theirs.close()
        if key is not None:
            _send(ours, key.secret.encode("utf-8"))
        return cls(proc, ours)

    async def start(self) -> None:
        """Wait until the child has opened the ledger; raise WriterDied if it could not."""
        assert self._sock is not None and self._reader is None, "started twice"
        self._sock.setblocking(False)
        self._reader = SocketReader(self._sock)
        try:
            with anyio.fail_after(START_TIMEOUT_S):
                data = await self._frame()
        except (TimeoutError, WriterDied) as exc:
            await self._kill()
            raise WriterDied(f"the ledger writer process did not start: {exc}") from exc
        if data is None:
            await self._kill()
            raise WriterDied(
                f"the ledger writer process exited at start (status {self.proc.poll()})"
            )
        kind, detail = pickle.loads(data)
        if kind != "ready":
            await self._kill()
            raise WriterDied(f"the ledger writer process could not open the ledger: {detail}")

    async def send(self, jobs: list[JobSpec]) -> None:
        assert self._reader is not None, "not started"
        if self._sock is None:
            raise WriterDied("the link to the ledger writer process is closed")
        refused: dict[int, BaseException] = {}
        try:
            # Plain tuples: pickle handles them in C, named tuples call back into Python.
            payload = pickle.dumps([tuple(job) for job in jobs], pickle.HIGHEST_PROTOCOL)
        except Exception:
            payload, refused = _dump_separately(jobs)
        self._sent.append((len(jobs), refused))
        self._sent_at.append(time.monotonic())
        if not payload:
            return  # nothing the child could be sent; `receive` answers from `refused`
        try:
            # All or nothing, as BatchLink asks: send_all finishes a started frame.
            await send_all(self._sock, _HEADER.pack(len(payload)), payload)
        except _GONE as exc:
            raise await self._lost(exc) from exc

    async def receive(self) -> list[Outcome]:
        size, refused = self._sent[0]
        if refused and len(refused) == size:  # nothing was sent for this batch
            self._sent.popleft()
            self._sent_at.popleft()
            return [(None, refused[i]) for i in range(size)]
        reply = await self._frame()  # cancel-safe: a frame is taken whole or not at all
        self._sent.popleft()
        self._sent_at.popleft()
        if reply is None:
            raise await self._lost(None)
        outcomes: list[Outcome] = pickle.loads(reply)
        if not refused:
            return outcomes
        it = iter(outcomes)
        return [(None, refused[i]) if i in refused else next(it) for i in range(size)]

    async def _frame(self) -> bytes | None:
        """One frame, or None at end of stream."""
        assert self._reader is not None
        buf = self._inbuf
        try:
            while True:
                if len(buf) >= _HEADER.size:
                    end = _HEADER.size + _HEADER.unpack_from(buf)[0]
                    if len(buf) >= end:
                        frame = bytes(buf[_HEADER.size : end])
                        del buf[:end]
                        return frame
                buf += await self._reader.receive()
        except anyio.EndOfStream:
            return None
        except _GONE as exc:
            raise await self._lost(exc) from exc

    async def _lost(self, exc: BaseException | None) -> WriterDied:
        """The socket to the child broke or ended: say how the child ended, waiting a
        moment for it (a killed child's socket closes as it exits), so the one log
        line names the cause, not the symptom."""
        # Polled: the pidfd is the watcher's (`exited`), and one fd has one waiter.
        with anyio.move_on_after(LOST_WAIT_S):
            while self.proc.poll() is None:  # noqa: ASYNC110 - a process exit sets no event
                await anyio.sleep(0.01)
            return WriterDied(f"the ledger writer process {_ending(self.proc.returncode)}")
        if exc is None:
            return WriterDied("the ledger writer process closed its end of the link")
        return WriterDied(f"the ledger writer process is unreachable: {exc!r}")

    async def exited(self) -> str:
        """Return once the child has ended, with how it ended."""
        while self.proc.poll() is None:
            if self._pidfd is None:
                await anyio.sleep(EXIT_POLL_S)
            else:
                await anyio.wait_readable(self._pidfd)  # readable once the child ended
        return _ending(self.proc.returncode)

    def problem(self) -> str | None:
        """Why the child cannot write now, or None when it runs and answers.

        A child stopped by SIGSTOP is alive but answers nothing until SIGCONT;
        so is one stuck in the kernel. Both are problems, not deaths: nothing
        is lost, and the writes go on when it does.
        """
        code = self.proc.poll()
        if code is not None:
            return f"the ledger writer process {_ending(code)}"
        state = _process_state(self.proc.pid)
        if state in ("Z", "X"):  # its main thread is gone, its others are on the way
            return "the ledger writer process is exiting"
        if state in ("T", "t"):
            return "the ledger writer process is stopped (SIGSTOP or a debugger); writes wait"
        if self._sent_at:
            waited = time.monotonic() - self._sent_at[0]
            if waited > STALLED_S:
                return f"the ledger writer process has not answered a batch for {waited:.0f} s"
        return None

    async def aclose(self) -> None:
        """Stop the child after its last batch: it sees the socket close and exits."""
        await self._close_socket()
        try:
            await anyio.to_thread.run_sync(self.proc.wait, STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            await self._kill()
        finally:
            self._close_pidfd()

    def _close_pidfd(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    async def _close_socket(self) -> None:
        if self._reader is not None:
            self._reader.close()  # before the socket (plumbing/rawsock.py)
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    async def _kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        await anyio.to_thread.run_sync(self.proc.wait)
        await self._close_socket()
        self._close_pidfd()


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # not Linux 5.3+: `exited` polls instead
        return None


def _ending(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with status {returncode}"


def _process_state(pid: int) -> str:
    """The state letter of /proc/PID/stat (R, S, D, T, Z...), "" where there is none."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return ""
    return stat.rsplit(b")", 1)[1].split()[0].decode()


_GONE = (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream)


def _dump_separately(jobs: list[JobSpec]) -> tuple[bytes, dict[int, BaseException]]:
    """Pickle the jobs that can be; the others fail alone (jobs.py)."""
    ok: list[JobSpec] = []
    refused: dict[int, BaseException] = {}
    for i, job in enumerate(jobs):
        try:
            pickle.dumps(job, pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            name = getattr(job.fn, "__qualname__", repr(job.fn))
            err = UnpicklableJob(
                f"ledger job {name} cannot be sent to the writer process ({exc}); "
                "jobs must be module-level functions with picklable arguments"
            )
            refused[i] = err
        else:
            ok.append(job)
    return (
        pickle.dumps([tuple(job) for job in ok], pickle.HIGHEST_PROTOCOL) if ok else b""
    ), refused


# -- the child ------------------------------------------------------------------


def _sendable(outcome: Outcome) -> Outcome:
    """An outcome the parent can unpickle: odd exceptions become RemoteJobError."""
    value, error = outcome
    try:
        if error is not None:
            pickle.loads(pickle.dumps(error, pickle.HIGHEST_PROTOCOL))
        else:
            pickle.dumps(value, pickle.HIGHEST_PROTOCOL)
        return outcome
    except Exception as exc:
        if error is not None:
            return (None, RemoteJobError(f"{type(error).__name__}: {error}"))
        return (None, RemoteJobError(f"the job's result cannot be sent back: {exc}"))


def _dump_outcomes(outcomes: list[Outcome]) -> bytes:
    if all(error is None for _, error in outcomes):
        try:
            return pickle.dumps(outcomes, pickle.HIGHEST_PROTOCOL)
        except Exception:
            pass
    return pickle.dumps([_sendable(o) for o in outcomes], pickle.HIGHEST_PROTOCOL)


def _die_with_parent(parent: int) -> None:
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before we asked
        os._exit(1)


def serve(sock: socket.socket, path: str, synchronous: Synchronous, key: Key | None = None) -> int:
    try:
        transactor = open_transactor(path, synchronous, key)
    except Exception as exc:
        _send(sock, pickle.dumps(("error", f"{type(exc).__name__}: {exc}")))
        return 1
    _send(sock, pickle.dumps(("ready", os.getpid())))
    try:
        while (data := _recv(sock)) is not None:
            jobs = [JobSpec(*job) for job in pickle.loads(data)]
            _send(sock, _dump_outcomes(transactor.execute(jobs)))
    except (BrokenPipeError, ConnectionResetError):
        pass  # the daemon is gone
    finally:
        transactor.close()
    return 0


def configure_logging(
    conn: sqlite3.Connection,
    level: str,
    fmt: str,
    secrets: tuple[str, ...] = (),
    patterns: tuple[str, ...] = (),
) -> None:
    """A job: log from here on at `level` in `fmt`, redacting the configuration's
    secrets and patterns as the daemon does. Run in the writer process, where the
    daemon's own `logs.configure` and `redact.configure` do not reach."""
    redact.configure(secrets, patterns)
    logs.configure(level, fmt)


def main(argv: list[str]) -> int:
    fd, parent, path, synchronous, level, fmt, keyed = argv
    _die_with_parent(int(parent))
    logs.configure(level, fmt)  # the same lines on the same stderr as the daemon's
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    if synchronous not in ("NORMAL", "FULL"):
        raise SystemExit(f"bad synchronous mode {synchronous!r}")
    sock = socket.socket(fileno=int(fd))
    key = None
    if keyed == "keyed":
        secret = _recv(sock)
        if secret is None:
            return 1  # the daemon is gone
        key = Key(secret.decode("utf-8"))
    gc_policy.tune()
    return serve(sock, path, cast(Synchronous, synchronous), key)


if __name__ == "__main__":
    # Run the imported module, not this `__main__` copy: the exceptions it
    # pickles must name `ledger.writer.process`, which the daemon can load.
    from ledger.writer import process as writer_process

    sys.exit(writer_process.main(sys.argv[1:]))
