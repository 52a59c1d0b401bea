"""The last N items (reads.py) against the whole thread, over threads of
every shape: turns of zero to three items, pops, clears, compactions, and turns a
daemon wrote (plain messages; empty turns) between the library's."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.api import SyncStore
from tests.library.daemon_turns import daemon_turn

Step = tuple[str, int]
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 3)),
        st.tuples(st.sampled_from(["pop", "clear", "compact"]), st.just(0)),
        st.tuples(st.just("daemon"), st.integers(0, 3)),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=STEPS)
def test_the_last_n_items_are_the_threads_last_n(steps: list[Step]) -> None:
    with tempfile.TemporaryDirectory(prefix="reads-") as folder:
        path = Path(folder) / "ledger.db"
        with SyncStore.open(path) as store:
            store.create("s")
            for number, (op, size) in enumerate(steps):
                if op == "append":
                    store.append("s", [{"n": number, "k": k} for k in range(size)])
                elif op == "pop":
                    store.pop("s")
                elif op == "clear":
                    store.clear("s")
                elif op == "compact":
                    store.compact("s", lambda items: [f"summary of {len(items)}"])
                else:
                    daemon_turn(path, "s", [f"said {number}.{k}" for k in range(size)], 1)
            whole = store.items("s")
            for n in (1, 2, 3, 5, 30):
                assert store.last("s", n) == whole[-n:], n
            assert store.last("s", 0) == []


def test_a_thread_that_ends_in_empty_turns_reads_past_them(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with SyncStore.open(path) as store:
        for n in range(5):
            store.append("s", [n, n])
        for _ in range(4):  # deeper than the first walk's bound for 4 items
            store.append("s", [])
        assert store.last("s", 4) == [3, 3, 4, 4]
        daemon_turn(path, "s", ["plain"], 1)
        assert store.last("s", 3) == [4, 4, {"role": "user", "content": "plain"}]


def test_a_pop_of_a_daemon_turn_keeps_the_rest_of_it_readable(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with SyncStore.open(path) as store:
        store.append("s", ["mine"])
        daemon_turn(path, "s", ["asked", "answered"], 1)
        assert store.pop("s") == {"role": "assistant", "content": "answered"}
        asked = {"role": "user", "content": "asked"}
        assert store.items("s") == ["mine", asked]
        assert store.last("s", 1) == [asked]
