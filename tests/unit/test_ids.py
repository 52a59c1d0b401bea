"""Our ULIDs, checked against python-ulid: format, time, order and uniqueness."""

from __future__ import annotations

import itertools
import threading
import time

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from ulid import ULID

from broker import ids
from broker.ids import encode_ulid, new_entity_id, new_id, now_ms

RANDOM_BITS = (1 << 80) - 1


def test_new_id_is_a_ulid_that_round_trips() -> None:
    value = new_id()
    parsed = ULID.from_str(value)
    assert len(value) == 26
    assert str(parsed) == value
    assert encode_ulid(int(parsed)) == value


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


def test_same_millisecond_increments_the_random_part(monkeypatch: pytest.MonkeyPatch) -> None:
    # A previous id from the future: the clock seems to have stepped back.
    future = now_ms() + 60_000
    monkeypatch.setattr(ids, "_last_ms", future)
    monkeypatch.setattr(ids, "_last_random", 12345)
    first, second = ULID.from_str(new_id()), ULID.from_str(new_id())
    assert first.milliseconds == second.milliseconds == future
    assert int(first) & RANDOM_BITS == 12346
    assert int(second) & RANDOM_BITS == 12347


def test_a_carry_into_the_high_random_bits_changes_the_cached_prefix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # new_id encodes the time and the high 40 random bits once per change; an
    # increment that carries past bit 40 must make it encode them again.
    future = now_ms() + 60_000
    monkeypatch.setattr(ids, "_last_ms", future)
    monkeypatch.setattr(ids, "_last_random", (1 << 40) - 2)
    made = [new_id() for _ in range(3)]
    expected = [(future << 80) | r for r in ((1 << 40) - 1, 1 << 40, (1 << 40) + 1)]
    assert made == [encode_ulid(v) for v in expected]
    assert made == [str(ULID.from_int(v)) for v in expected]


def test_random_overflow_borrows_the_next_millisecond(monkeypatch: pytest.MonkeyPatch) -> None:
    future = now_ms() + 60_000
    monkeypatch.setattr(ids, "_last_ms", future)
    monkeypatch.setattr(ids, "_last_random", RANDOM_BITS)
    before = ULID.from_int((future << 80) | RANDOM_BITS)
    after = ULID.from_str(new_id())
    assert after.milliseconds == future + 1
    assert int(after) & RANDOM_BITS == 0
    assert str(before) < str(after)


def test_fresh_millisecond_leaves_room_to_increment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ids, "_last_ms", 0)
    value = ULID.from_str(new_id())
    assert int(value) & RANDOM_BITS < 1 << 79  # top random bit cleared


def test_entity_ids() -> None:
    a, b = new_entity_id(), new_entity_id()
    assert a.startswith("ent_")
    assert str(ULID.from_str(a[4:])) == a[4:]
    assert a < b


@given(st.integers(min_value=0, max_value=(1 << 128) - 1))
@example(0)
@example((1 << 128) - 1)
@example(1 << 80)
@example(RANDOM_BITS)
def test_encode_ulid_agrees_with_python_ulid(value: int) -> None:
    assert encode_ulid(value) == str(ULID.from_int(value))


@given(st.integers(0, (1 << 128) - 1), st.integers(0, (1 << 128) - 1))
def test_encoding_preserves_order(a: int, b: int) -> None:
    assert (a < b) == (encode_ulid(a) < encode_ulid(b))


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
