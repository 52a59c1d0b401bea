"""Our ULIDs, checked against python-ulid: format, time, order and uniqueness."""

from __future__ import annotations

import itertools
import threading
import time

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from ulid import ULID

from core.ids import UlidSequence
from plumbing import ids
from plumbing.ids import new_entity_id, new_id, now_ms

RANDOM_BITS = (1 << 80) - 1


def test_new_id_is_a_ulid_that_round_trips() -> None:
    value = new_id()
    parsed = ULID.from_str(value)
    assert len(value) == 26
    assert str(parsed) == value


def test_new_id_timestamp_is_now() -> None:
    before = time.time()
    parsed = ULID.from_str(new_id())
    after = time.time()
    assert before - 1 <= parsed.timestamp <= after + 1
    assert abs(parsed.milliseconds - now_ms()) < 1000


def test_ten_thousand_ids_are_unique_and_strictly_increasing() -> None:
    made = [new_id() for _ in range(10_000)]
    assert len(set(made)) == len(made)
    assert all(a < b for a, b in itertools.pairwise(made))
    # Many share a millisecond, so monotonicity within one millisecond is exercised.
    millis = [ULID.from_str(x).milliseconds for x in made]
    assert len(set(millis)) < len(made)
    assert millis == sorted(millis)


def never() -> int:
    raise AssertionError("fresh randomness asked for within one millisecond")


def test_same_millisecond_increments_the_random_part() -> None:
    # A previous id from the future: the clock seems to have stepped back.
    seq = UlidSequence(last_ms=60_000, last_random=12345)
    first, second = ULID.from_str(seq.next(1_000, never)), ULID.from_str(seq.next(60_000, never))
    assert first.milliseconds == second.milliseconds == 60_000
    assert int(first) & RANDOM_BITS == 12346
    assert int(second) & RANDOM_BITS == 12347


def test_a_carry_into_the_high_random_bits_changes_the_cached_prefix() -> None:
    # The sequence encodes the time and the high 40 random bits once per change; an
    # increment that carries past bit 40 must make it encode them again.
    seq = UlidSequence(last_ms=60_000, last_random=(1 << 40) - 2)
    made = [seq.next(60_000, never) for _ in range(3)]
    expected = [(60_000 << 80) | r for r in ((1 << 40) - 1, 1 << 40, (1 << 40) + 1)]
    assert made == [str(ULID.from_int(v)) for v in expected]


def test_random_overflow_borrows_the_next_millisecond() -> None:
    seq = UlidSequence(last_ms=60_000, last_random=RANDOM_BITS)
    before = ULID.from_int((60_000 << 80) | RANDOM_BITS)
    after = ULID.from_str(seq.next(60_000, never))
    assert after.milliseconds == 60_001
    assert int(after) & RANDOM_BITS == 0
    assert str(before) < str(after)


def test_a_new_millisecond_takes_fresh_randomness() -> None:
    seq = UlidSequence()
    assert seq.next(5, lambda: 77) == str(ULID.from_int((5 << 80) | 77))
    assert seq.next(6, lambda: 3) == str(ULID.from_int((6 << 80) | 3))


def test_fresh_millisecond_leaves_room_to_increment(monkeypatch: pytest.MonkeyPatch) -> None:
    for _ in range(50):
        monkeypatch.setattr(ids, "_sequence", UlidSequence())
        value = ULID.from_str(new_id())
        assert int(value) & RANDOM_BITS < 1 << 79  # top random bit cleared


def test_entity_ids() -> None:
    a, b = new_entity_id(), new_entity_id()
    assert a.startswith("ent_")
    assert str(ULID.from_str(a[4:])) == a[4:]
    assert a < b


MILLIS = st.integers(1, (1 << 48) - 1)
RANDOM = st.integers(0, RANDOM_BITS)


@given(MILLIS, RANDOM)
@example(1, 0)
@example((1 << 48) - 1, RANDOM_BITS)
@example(1, 1 << 40)
@example(1 << 47, RANDOM_BITS)
def test_encoding_agrees_with_python_ulid(ms: int, random: int) -> None:
    assert UlidSequence().next(ms, lambda: random) == str(ULID.from_int((ms << 80) | random))


@given(MILLIS, RANDOM, MILLIS, RANDOM)
def test_encoding_preserves_order(ms_a: int, r_a: int, ms_b: int, r_b: int) -> None:
    a = UlidSequence().next(ms_a, lambda: r_a)
    b = UlidSequence().next(ms_b, lambda: r_b)
    assert ((ms_a, r_a) < (ms_b, r_b)) == (a < b)


def test_ids_from_many_threads_are_unique() -> None:
    per_thread, threads = 2_000, 8
    results: list[list[str]] = [[] for _ in range(threads)]
    start = threading.Barrier(threads)

    def work(out: list[str]) -> None:
        start.wait()
        out.extend(new_id() for _ in range(per_thread))

    workers = [threading.Thread(target=work, args=(out,)) for out in results]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=20)
    assert not any(w.is_alive() for w in workers)
    everything = [x for out in results for x in out]
    assert len(everything) == per_thread * threads
    assert len(set(everything)) == len(everything)
    for out in results:  # each thread sees its own ids increase
        assert all(a < b for a, b in itertools.pairwise(out))
