"""The machine's backlog: an immutable sequence whose versions share one list."""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from core.backlog import Backlog
from core.queue_machine import Arrived, Item, Limits, Resume, State, handle


def item(n: int) -> Item:
    return Item(f"i{n}", n, "collect", "person")


# An operation on some earlier version: append a new item, or keep a slice of it.
ops = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=30),  # which earlier version
        st.sampled_from(["append", "head", "tail", "slice", "step"]),
        st.integers(min_value=-40, max_value=40),
        st.integers(min_value=-40, max_value=40),
    ),
    max_size=120,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(), max_size=10), ops)
def test_every_version_keeps_what_it_saw(
    start: list[int], script: list[tuple[int, str, int, int]]
) -> None:
    versions: list[tuple[Backlog[Item], tuple[Item, ...]]] = [
        (Backlog(item(n) for n in start), tuple(item(n) for n in start))
    ]
    counter = 1000
    for which, op, a, b in script:
        backlog, model = versions[which % len(versions)]
        if op == "append":
            counter += 1
            new, expected = backlog.append(item(counter)), (*model, item(counter))
        elif op == "head":
            new, expected = backlog[a:], model[a:]
        elif op == "tail":
            new, expected = backlog[:a], model[:a]
        elif op == "slice":
            new, expected = backlog[a:b], model[a:b]
        else:
            step = (a % 3) + 2
            new, expected = backlog[::step], model[::step]
        versions.append((new, expected))
        # Nothing any version saw has changed, whatever was done to the others.
        for version, seen in versions:
            assert tuple(version) == seen and version == seen
            assert len(version) == len(seen) and bool(version) == bool(seen)
            if seen:
                assert version[0] == seen[0] and version[-1] == seen[-1]
                assert version[len(seen) // 2] == seen[len(seen) // 2]
            assert hash(version) == hash(seen)


def test_indexing_past_either_end_raises() -> None:
    backlog = Backlog([item(1), item(2)])
    for bad in (2, -3):
        try:
            backlog[bad]
        except IndexError:
            continue
        raise AssertionError(f"index {bad} did not raise")


def test_a_long_run_of_appends_and_head_removals_stays_small() -> None:
    backlog: Backlog[Item] = Backlog()
    for n in range(10_000):
        backlog = backlog.append(item(n))
        if n % 2:
            backlog = backlog[1:]
    assert list(backlog) == [item(n) for n in range(5_000, 10_000)]
    assert len(backlog._buf) < 2 * len(backlog) + Backlog._COMPACT_AT + 2  # no unbounded growth


def test_collect_arrivals_cost_does_not_grow_with_the_backlog() -> None:
    # A burst of collect messages waiting out a long quiet period: each arrival
    # must cost the same with 20,000 waiting as with 0 (it was O(n) per arrival).
    state, _ = handle(State.initial(Limits(debounce_s=600.0, cap=None, drop="old")), Resume(), 0.0)

    # CPU time of this thread, not wall time: a burst takes 2.5 ms, shorter than
    # the wait for a core at a load of 10 on 2 cores (a burst measured 22 ms then).
    def burst(first: int, n: int) -> float:
        nonlocal state
        t0 = time.thread_time()
        for k in range(first, first + n):
            state, _ = handle(state, Arrived(item(k)), 1.0)
        return time.thread_time() - t0

    early = min(burst(1 + 500 * r, 500) for r in range(3))
    burst(2_000, 20_000)
    late = min(burst(30_000 + 500 * r, 500) for r in range(3))
    assert len(state.backlog) == 1_500 + 20_000 + 1_500
    assert late < early * 5, f"arrivals slowed from {early:.4f}s to {late:.4f}s per 500"
