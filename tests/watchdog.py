"""A last bound on every test, its teardown included.

pytest-timeout's signal method fires once, in the test; a teardown that then hangs
(an SDK call that ignores cancellation did: a Temporal `Replayer` on a one-event
history) would hold a CI run until CI's own limit, 90 minutes later, with nothing
in its log to say where. Past the test's timeout by `GRACE_S`, this writes every
thread's stack and the test's id to stderr and ends the run (exit status 3).
"""

from __future__ import annotations

import faulthandler
import os
import sys
import threading
from collections.abc import Iterator

import pytest

GRACE_S = float(os.environ.get("TEST_WATCHDOG_GRACE_S", "120"))
EXIT_STATUS = 3


def _bound(item: pytest.Item) -> float:
    marker = item.get_closest_marker("timeout")
    if marker is not None:
        given = marker.args[0] if marker.args else marker.kwargs.get("timeout")
        if given is not None:
            return float(given)
    option = item.config.getoption("timeout", None)
    return float(option if option is not None else item.config.getini("timeout") or 0)


def _give_up(config: pytest.Config, nodeid: str, after: float) -> None:
    capture = config.pluginmanager.getplugin("capturemanager")
    if capture is not None:  # else what follows would go to the capture's file, unread
        capture.suspend_global_capture(in_=True)
        out, err = capture.read_global_capture()
        sys.stdout.write(out)
        sys.stderr.write(err)
    sys.stdout.flush()
    sys.stderr.write(
        f"\n*** {nodeid} still running {after:.0f} s after it started, teardown"
        " included: every thread's stack follows, and the run stops here\n"
    )
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    sys.stderr.flush()
    os._exit(EXIT_STATUS)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    bound = _bound(item)
    if bound <= 0:  # no timeout asked for (`--timeout 0`, a debugging session)
        yield
        return
    after = bound + GRACE_S
    timer = threading.Timer(after, _give_up, args=(item.config, item.nodeid, after))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
