"""The pure parts of the chat-server adapters: IRC lines, retry, rate, positions."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.irc_text import MalformedLine, is_channel, mentions, message_id, parse, split_text
from adapters.position import PositionStore, Spool
from adapters.retry import RetryClock, TokenBucket
from adapters.sdk import Backoff
from adapters.settings import SettingsError, read_secret

words = st.text(
    st.characters(blacklist_categories=["Cs"], blacklist_characters="\r\n "), max_size=40
)


@given(st.lists(words, max_size=60), st.integers(min_value=4, max_value=120))
def test_split_lines_fit_and_lose_no_word(parts: list[str], max_bytes: int) -> None:
    text = " ".join(parts)
    lines = split_text(text, max_bytes)
    assert all(len(line.encode()) <= max_bytes for line in lines)
    assert "".join(lines).replace(" ", "") == text.replace(" ", "")


def test_split_prefers_word_boundaries_and_keeps_line_breaks() -> None:
    assert split_text("the quick brown fox", 10) == ["the quick", "brown fox"]
    assert split_text("one\ntwo\r\n\nthree", 100) == ["one", "two", "three"]
    assert split_text("ééééé", 4) == ["éé", "éé", "é"]  # never inside a character
    assert split_text("", 10) == [""]
    with pytest.raises(ValueError, match="max_bytes"):
        split_text("x", 3)


def test_parse_reads_tags_source_and_trailing_parameter() -> None:
    line = parse("@time=2026-11-24T08:00:00.000Z :ann!~a@host PRIVMSG #room :hi there")
    assert (line.command, line.params, line.nick) == ("PRIVMSG", ["#room", "hi there"], "ann")
    assert line.tags == {"time": "2026-11-24T08:00:00.000Z"}
    assert parse("PING :x").source is None and parse("001 bot :Welcome").command == "001"
    for broken in ("", ":prefix-only", ":a!b@c 12 x", "PRIV-MSG x", "\ufffd\ufffd x"):
        with pytest.raises(MalformedLine):
            parse(broken)


def test_message_ids_are_stable_and_tell_messages_apart() -> None:
    one = message_id("t1", "ann", "#Room", "hi")
    assert one == message_id("t1", "ann", "#room", "hi") and one.startswith("irc-")
    assert (
        len({one, message_id("t2", "ann", "#room", "hi"), message_id("t1", "bob", "#room", "hi")})
        == 3
    )


def test_mentions_and_channels() -> None:
    assert mentions("bot: hi", "bot") and mentions("hi @Bot!", "bot") and mentions("hey bot", "bot")
    assert not mentions("robot", "bot") and not mentions("bot_2 hi", "bot")
    assert is_channel("#x") and is_channel("&x") and not is_channel("ann") and not is_channel("")


def test_retry_backs_off_then_gives_up_and_a_success_resets() -> None:
    clock = RetryClock(give_up_s=10, backoff=Backoff(initial=1, factor=2, maximum=4, jitter=0))
    assert [clock.failed(now, 0.0) for now in (0, 1, 3, 7)] == [1, 2, 4, 3]
    assert clock.failed(10, 0.0) is None
    clock.succeeded()
    assert clock.failed(100, 0.0) == 1


def test_token_bucket_allows_a_burst_then_paces() -> None:
    bucket = TokenBucket(rate=2, burst=3)
    assert [bucket.take(0.0) for _ in range(3)] == [0, 0, 0]
    assert bucket.take(0.0) == pytest.approx(0.5)
    assert bucket.take(10.0) == 0


def test_positions_survive_a_reopen_once_flushed_and_the_spool_keeps_order(
    tmp_path: Path,
) -> None:
    store = PositionStore(tmp_path / "pos.json")
    store.put("mam", "abc")
    assert PositionStore(tmp_path / "pos.json").get("mam") is None  # not flushed yet
    store.flush()
    assert PositionStore(tmp_path / "pos.json").get("mam") == "abc"
    spool = Spool(tmp_path / "spool")
    first, second = spool.add({"n": 1}), spool.add({"n": 2})
    spool.remove(first)
    spool.close()
    with (tmp_path / "spool" / "spool.jsonl").open("ab") as journal:
        journal.write(b'{"n": 3, "rec')  # a line a crash cut short
    again = Spool(tmp_path / "spool")
    assert [record for _, record in again.pending()] == [{"n": 2}]
    assert again.add({"n": 3}) > second
    again.close()
    third = Spool(tmp_path / "spool")
    assert [r for _, r in third.pending()] == [{"n": 2}, {"n": 3}]
    third.close()


def test_secrets_come_from_a_file_or_the_credentials_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pw").write_text("s3cret\n")
    assert read_secret("irc-password", tmp_path / "pw") == "s3cret"
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path))
    (tmp_path / "irc-password").write_text("from-systemd")
    assert read_secret("irc-password", None) == "from-systemd"
    assert read_secret("absent", None, required=False) is None
    with pytest.raises(SettingsError, match="absent"):
        read_secret("absent", None)
