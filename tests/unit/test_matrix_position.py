"""adapters.matrix_position: the /sync token stored is the latest one acked whole."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from adapters.matrix_position import AckedTokens


def test_a_sync_without_messages_is_safe_at_once() -> None:
    tokens = AckedTokens()
    tokens.open()
    assert tokens.close("t1") == "t1"


def test_a_token_waits_for_its_acks_and_for_the_syncs_before_it() -> None:
    tokens = AckedTokens()
    tokens.open()
    tokens.sent()
    tokens.sent()
    assert tokens.close("t1") is None
    tokens.open()
    tokens.sent()
    assert tokens.close("t2") is None
    assert tokens.acked() is None  # t1 still has one waiting
    assert tokens.acked() == "t1"
    tokens.open()
    assert tokens.close("t3") is None  # empty, but t2 before it still waits
    assert tokens.acked() == "t3"  # both settle at once: the latest is stored


def test_under_a_steady_stream_the_token_still_moves() -> None:
    tokens = AckedTokens()
    stored = []
    for n in range(5):
        tokens.open()
        tokens.sent()
        assert tokens.close(f"t{n}") is None
        if n:  # the previous sync's message is acked while this one waits
            stored.append(tokens.acked())
    assert stored == ["t0", "t1", "t2", "t3"]


@given(st.lists(st.integers(min_value=0, max_value=3), min_size=1, max_size=8), st.data())
def test_a_stored_token_never_passes_a_message_not_acked(
    sizes: list[int], data: st.DataObject
) -> None:
    tokens = AckedTokens()
    sent = acked = 0
    ends: dict[str, int] = {}  # token -> messages sent up to and with its sync
    latest = None
    for n, size in enumerate(sizes):
        tokens.open()
        for _ in range(size):
            tokens.sent()
            sent += 1
        ends[f"t{n}"] = sent
        latest = tokens.close(f"t{n}") or latest
        for _ in range(data.draw(st.integers(min_value=0, max_value=sent - acked))):
            acked += 1
            latest = tokens.acked() or latest
        if latest is not None:
            assert ends[latest] <= acked
    while acked < sent:
        acked += 1
        latest = tokens.acked() or latest
    assert latest == f"t{len(sizes) - 1}"
