"""The last bound on a test (tests/watchdog.py): a teardown that hangs after the
test's timeout fired ends the run with the stacks, instead of holding CI."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]
REPO = Path(__file__).resolve().parents[2]

STUCK = """
import time

import pytest


@pytest.fixture
def stuck():
    yield
    while True:  # deaf to everything, as the SDK call was
        try:
            time.sleep(10)
        except BaseException:
            pass


@pytest.mark.timeout(1)
def test_slow(stuck):
    time.sleep(5)


def test_never_reached():
    pass
"""


def run_watched(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, source: str, grace_s: str
) -> pytest.RunResult:
    """`source` as a test file, run in a pytest of its own with the watchdog on."""
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.setenv("TEST_WATCHDOG_GRACE_S", grace_s)
    pytester.makeconftest('pytest_plugins = ["tests.watchdog"]')
    pytester.makepyfile(source)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=60)


def test_a_teardown_hung_past_the_timeout_stops_the_run_with_every_stack(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = run_watched(pytester, monkeypatch, STUCK, grace_s="1.5")
    assert result.ret == 3
    err = result.stderr.str()
    assert "test_slow still running" in err and "teardown included" in err
    assert "in stuck" in err  # the hung fixture's frame, from the dump
    assert "test_never_reached" not in result.stdout.str()


def test_a_test_within_its_bound_is_left_alone(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    quick = "import time, pytest\n@pytest.mark.timeout(1)\ndef test_quick():\n    time.sleep(0.5)\n"
    result = run_watched(pytester, monkeypatch, quick, grace_s="0.2")
    result.assert_outcomes(passed=1)
