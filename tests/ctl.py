"""brokerctl run inside the test process, against a real daemon's socket.

`in_process(...)` gives what `python -m brokerctl ...` would, as a
`subprocess.CompletedProcess`: the same app and argument handling (`main()`'s
`hoist_globals` and default width), its exit status, stdout and stderr. It spares
the suite an interpreter start and brokerctl's imports per call; the tests of the
real entry point (exit codes, completion, `--version`, a changed folder) still
run it as a process.

A call blocks its caller, as `subprocess.run` does, and runs in a thread of its
own, since brokerctl's commands start an event loop and the caller's test may
already be inside one. An exception escaping a command is printed to stderr with
status 1, as the interpreter would.
"""

from __future__ import annotations

import os
import subprocess
import threading
import traceback
from typing import Any, Literal, overload

import anyio
from typer.testing import CliRunner

# main() sets this width when the terminal gives none (brokerctl/main.py).
DEFAULT_COLUMNS = "160"


@overload
def in_process(
    *args: str, env: dict[str, str] | None = ..., text: Literal[True] = True
) -> subprocess.CompletedProcess[str]: ...


@overload
def in_process(
    *args: str, env: dict[str, str] | None = ..., text: Literal[False]
) -> subprocess.CompletedProcess[bytes]: ...


def in_process(*args: str, env: dict[str, str] | None = None, text: bool = True) -> Any:
    """brokerctl's `args` (without the program), in this process; `env` adds to
    the environment for the call. Bytes for stdout and stderr when not `text`."""
    done: list[subprocess.CompletedProcess[Any]] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            done.append(_invoke(list(args), env or {}, text))
        except BaseException as exc:  # handed to the caller's thread
            failed.append(exc)

    thread = threading.Thread(target=run, name="brokerctl", daemon=True)
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return done[0]


_one_at_a_time = threading.Lock()  # the runner swaps sys.stdout and friends


def _invoke(args: list[str], env: dict[str, str], text: bool) -> subprocess.CompletedProcess[Any]:
    import brokerctl.main  # noqa: F401 - its commands register on `app`
    from brokerctl.app import app, console, hoist_globals

    env = {"COLUMNS": os.environ.get("COLUMNS", DEFAULT_COLUMNS), **env}
    with _one_at_a_time:
        # The width a process started with this environment would print at: rich's
        # console otherwise keeps what it read from COLUMNS when it was made.
        pinned = console._width
        console.width = int(env["COLUMNS"])
        try:
            result = CliRunner(env=env).invoke(
                app, hoist_globals(args), prog_name="brokerctl", catch_exceptions=True
            )
        finally:
            console._width = pinned
    stdout, stderr = result.stdout_bytes, result.stderr_bytes
    code = result.exit_code
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        exc = result.exception
        stderr += "".join(traceback.format_exception(exc)).encode()
        code = 1
    argv = ["brokerctl", *args]
    if text:
        return subprocess.CompletedProcess(
            argv, code, stdout.decode(errors="replace"), stderr.decode(errors="replace")
        )
    return subprocess.CompletedProcess(argv, code, stdout, stderr)


async def in_process_async(*args: str, env: dict[str, str] | None = None) -> Any:
    """`in_process` for a caller inside an event loop: the loop goes on meanwhile."""
    return await anyio.to_thread.run_sync(lambda: in_process(*args, env=env))
