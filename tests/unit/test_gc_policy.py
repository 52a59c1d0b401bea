"""The collector settings both broker processes run with."""

from __future__ import annotations

import gc
import subprocess
import sys
from collections.abc import Iterator

import pytest

from plumbing import gc_policy


@pytest.fixture
def restore_gc() -> Iterator[None]:
    before = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_tune_freezes_what_exists_and_raises_the_young_threshold(restore_gc: None) -> None:
    oldest = gc.get_threshold()[2]
    gc_policy.tune()
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == (gc_policy.YOUNG_THRESHOLD, gc_policy.MIDDLE_THRESHOLD, oldest)


def test_cycles_are_still_collected_under_the_policy() -> None:
    # In a fresh interpreter, so the test process keeps its own settings.
    code = (
        "import gc, weakref\n"
        "from plumbing import gc_policy\n"
        "gc_policy.tune()\n"
        "class Node: pass\n"
        "a, b = Node(), Node(); a.other, b.other = b, a\n"
        "probe = weakref.ref(a); del a, b\n"
        "alive = probe() is not None\n"
        "keep = [[] for _ in range(gc_policy.YOUNG_THRESHOLD + 10)]\n"  # one young collection
        "print(alive, probe() is None)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True"]  # not at once, but collected
