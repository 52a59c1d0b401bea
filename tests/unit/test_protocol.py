"""Wire protocol v1, pure: framing, decoding and validation of every frame kind."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from wire.frames import (
    VERSION,
    ArgSpec,
    Inbound,
    Op,
    check_args,
    is_timestamp,
    parse_hello,
    parse_inbound,
    parse_model,
)
from wire.framing import MAX_REQ, FrameTooLarge, LineBuffer, ProtocolError, decode, encode

# -- framing ----------------------------------------------------------------


def test_line_split_across_chunks() -> None:
    buf = LineBuffer(100)
    assert buf.feed(b'{"type":') == []
    assert buf.pending == 8
    assert buf.feed(b'"x"}') == []
    assert buf.feed(b"\n") == [b'{"type":"x"}']
    assert buf.pending == 0


def test_many_lines_in_one_chunk_keep_the_tail() -> None:
    buf = LineBuffer(100)
    assert buf.feed(b"a\nbb\n\nccc\ndd") == [b"a", b"bb", b"", b"ccc"]
    assert buf.pending == 2
    assert buf.feed(b"d\n") == [b"ddd"]


def test_line_exactly_at_the_limit_passes() -> None:
    buf = LineBuffer(10)
    assert buf.feed(b"x" * 10 + b"\n") == [b"x" * 10]


def test_line_one_byte_over_the_limit_raises() -> None:
    buf = LineBuffer(10)
    with pytest.raises(FrameTooLarge) as info:
        buf.feed(b"x" * 11 + b"\n")
    assert info.value.code == "frame_too_large"
    assert info.value.closes
    assert "10" in info.value.message


def test_over_limit_line_after_good_lines_in_the_same_chunk_raises() -> None:
    buf = LineBuffer(4)
    with pytest.raises(FrameTooLarge):
        buf.feed(b"ok\n" + b"y" * 5 + b"\n")


def test_partial_line_at_the_limit_is_kept() -> None:
    buf = LineBuffer(10)
    assert buf.feed(b"x" * 10) == []
    assert buf.pending == 10
    assert buf.feed(b"\n") == [b"x" * 10]


def test_partial_line_over_the_limit_raises_without_a_newline() -> None:
    buf = LineBuffer(10)
    assert buf.feed(b"x" * 6) == []
    with pytest.raises(FrameTooLarge):
        buf.feed(b"x" * 5)  # 11 bytes pending, no newline in sight


def test_partial_tail_over_the_limit_after_complete_lines_raises() -> None:
    buf = LineBuffer(10)
    with pytest.raises(FrameTooLarge):
        buf.feed(b"short\n" + b"z" * 11)


@pytest.mark.parametrize("tail", [b"\n", b""], ids=["whole-line", "no-newline-yet"])
def test_an_oversize_frame_drops_what_was_buffered(tail: bytes) -> None:
    buf = LineBuffer(10)
    assert buf.feed(b"x" * 8) == []
    with pytest.raises(FrameTooLarge):
        buf.feed(b"x" * 8 + tail)
    assert buf.pending == 0  # the connection closes: no reason to hold its bytes


lines_strategy = st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=20)


@given(lines_strategy, st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), st.data())
def test_any_chunking_yields_the_same_lines(
    lines: list[bytes], tail: bytes, data: st.DataObject
) -> None:
    stream = b"".join(line + b"\n" for line in lines) + tail
    cuts = sorted(data.draw(st.sets(st.integers(0, len(stream)), max_size=30)))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    buf = LineBuffer(40)
    out: list[bytes] = []
    for chunk in chunks:
        out.extend(buf.feed(chunk))
    assert out == lines
    assert buf.pending == len(tail)


# -- decoding ---------------------------------------------------------------


@pytest.mark.parametrize("line", [b"", b"{", b"not json", b"\xff\xfe", b'{"a":1}}', b"{'a': 1}"])
def test_invalid_json_is_bad_json(line: bytes) -> None:
    with pytest.raises(ProtocolError) as info:
        decode(line)
    assert info.value.code == "bad_json"
    assert not info.value.closes


@pytest.mark.parametrize("line", [b"[]", b"1", b'"hello"', b"null", b"true", b'[{"type":"x"}]'])
def test_json_that_is_not_an_object_is_bad_json(line: bytes) -> None:
    with pytest.raises(ProtocolError) as info:
        decode(line)
    assert info.value.code == "bad_json"
    assert "object" in info.value.message


def test_decode_returns_the_object() -> None:
    frame = {"type": "ping", "req": "r1", "extra": [1, 2]}
    assert decode(encode(frame).rstrip(b"\n")) == frame


def test_encode_is_one_line() -> None:
    out = encode({"type": "x", "text": "a\nb"})
    assert out.endswith(b"\n")
    assert out.count(b"\n") == 1


@pytest.mark.parametrize("req", [5, 1.5, True, ["r"], {"r": 1}, "r" * (MAX_REQ + 1)])
def test_bad_req_is_invalid(req: Any) -> None:
    with pytest.raises(ProtocolError) as info:
        decode(encode({"type": "ping", "req": req}))
    assert info.value.code == "invalid"
    assert info.value.field == "req"
    assert info.value.req is None  # a bad req is never echoed


def test_req_at_the_limit_and_null_req_pass() -> None:
    assert decode(encode({"type": "ping", "req": "r" * MAX_REQ}))["req"] == "r" * MAX_REQ
    assert decode(encode({"type": "ping", "req": None}))["type"] == "ping"


@pytest.mark.parametrize(
    "frame", [{"req": "r7"}, {"req": "r7", "type": 3}, {"req": "r7", "type": None}]
)
def test_missing_or_non_string_type_is_invalid(frame: dict[str, Any]) -> None:
    with pytest.raises(ProtocolError) as info:
        decode(encode(frame))
    err = info.value
    assert (err.code, err.field, err.req) == ("invalid", "type", "r7")
    assert err.frame() == {
        "type": "error",
        "code": "invalid",
        "message": err.message,
        "req": "r7",
        "field": "type",
    }


def test_error_frame_omits_absent_req_and_field() -> None:
    assert ProtocolError("internal", "oops").frame() == {
        "type": "error",
        "code": "internal",
        "message": "oops",
    }


# -- hello ------------------------------------------------------------------


def hello(**fields: Any) -> dict[str, Any]:
    return {"type": "hello", "v": VERSION, "role": "adapter", "channel": "chat", **fields}


def test_good_hellos() -> None:
    adapter = parse_hello(hello(token="t"))
    assert (adapter.role, adapter.channel, adapter.token) == ("adapter", "chat", "t")
    operator = parse_hello({"type": "hello", "v": VERSION, "role": "operator"})
    assert operator.channel is None


@pytest.mark.parametrize(
    ("frame", "code", "field"),
    [
        ({"type": "inbound", "v": 1, "req": "r1"}, "bad_hello", None),
        ({"type": "hello", "role": "adapter", "channel": "chat"}, "bad_hello", "v"),
        (hello(v="1"), "bad_hello", "v"),  # strict: no coercion
        (hello(v=True), "bad_hello", "v"),
        (hello(role="admin"), "bad_hello", "role"),
        (hello(token="t" * 4097), "bad_hello", "token"),
        (hello(v=2), "unsupported_version", "v"),
        (hello(v=0), "unsupported_version", "v"),
        (hello(channel=None), "bad_hello", "channel"),
        (hello(channel=""), "bad_hello", "channel"),
        (hello(channel="Chat"), "bad_hello", "channel"),
        (hello(channel="_chat"), "bad_hello", "channel"),
        (hello(channel="chat room"), "bad_hello", "channel"),
        (hello(channel="a" * 33), "bad_hello", "channel"),
        (hello(channel="chat\n"), "bad_hello", "channel"),
    ],
)
def test_bad_hellos(frame: dict[str, Any], code: str, field: str | None) -> None:
    with pytest.raises(ProtocolError) as info:
        parse_hello(frame)
    assert info.value.code == code
    assert info.value.field == field
    assert info.value.closes  # every hello failure ends the connection


def test_hello_failure_carries_req() -> None:
    with pytest.raises(ProtocolError) as info:
        parse_hello(hello(v=9, req="r9"))
    assert info.value.req == "r9"
    assert "9" in info.value.message


@pytest.mark.parametrize("channel", ["a", "0", "a" * 32, "chat-bot_2", "9lives"])
def test_channel_names_that_pass(channel: str) -> None:
    assert parse_hello(hello(channel=channel)).channel == channel


# -- inbound ----------------------------------------------------------------


def inbound(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "type": "inbound",
        "msg_id": "m1",
        "sender_id": "u1",
        "peer_kind": "dm",
        "text": "hello",
    }
    base.update(fields)
    return {k: v for k, v in base.items() if v is not ...}


def refused(frame: dict[str, Any], max_text_bytes: int = 1000) -> ProtocolError:
    with pytest.raises(ProtocolError) as info:
        parse_inbound(frame, max_text_bytes)
    assert info.value.code == "invalid"
    assert not info.value.closes
    return info.value


def test_minimal_inbound() -> None:
    msg = parse_inbound(inbound(unknown_field=1), 1000)
    assert (msg.msg_id, msg.sender_id, msg.peer_kind, msg.text) == ("m1", "u1", "dm", "hello")
    assert (msg.peer_id, msg.thread_id, msg.ts, msg.queue_mode, msg.meta) == (None,) * 5


def test_full_inbound() -> None:
    msg = parse_inbound(
        inbound(
            peer_kind="group",
            peer_id="g1",
            thread_id="t1",
            sender_name="Ann",
            ts="2024-05-01T12:30:00.123+02:00",
            queue_mode="collect",
            meta={"k": [1]},
        ),
        1000,
    )
    assert (msg.peer_id, msg.thread_id, msg.queue_mode, msg.meta) == (
        "g1",
        "t1",
        "collect",
        {"k": [1]},
    )


@pytest.mark.parametrize(
    ("field", "limit", "minimum"),
    [
        ("msg_id", 128, 1),
        ("sender_id", 256, 1),
        ("sender_name", 256, 0),
        ("peer_id", 256, 1),
        ("thread_id", 256, 1),
    ],
)
def test_string_field_limits(field: str, limit: int, minimum: int) -> None:
    assert getattr(parse_inbound(inbound(**{field: "é" * limit}), 1000), field) == "é" * limit
    err = refused(inbound(**{field: "x" * (limit + 1)}, req="r2"))
    assert (err.field, err.req) == (field, "r2")
    if minimum:
        assert refused(inbound(**{field: ""})).field == field


@pytest.mark.parametrize("field", ["type", "msg_id", "sender_id", "peer_kind", "text"])
def test_required_fields(field: str) -> None:
    assert refused(inbound(**{field: ...})).field == field


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("msg_id", 5),
        ("sender_id", None),
        ("text", 5),
        ("text", None),
        ("peer_kind", "channel"),
        ("queue_mode", "later"),
        ("meta", [1]),
        ("meta", "{}"),
        ("type", "hello"),
    ],
)
def test_wrong_types_and_values(field: str, value: Any) -> None:
    assert refused(inbound(**{field: value})).field == field


def test_text_limit_in_ascii() -> None:
    assert parse_inbound(inbound(text="a" * 40), 40).text == "a" * 40
    assert refused(inbound(text="a" * 41), 40).field == "text"


def test_text_limit_counts_utf8_bytes_not_characters() -> None:
    assert parse_inbound(inbound(text="é" * 20), 40).text == "é" * 20  # 40 bytes
    err = refused(inbound(text="é" * 21), 40)  # 21 characters, 42 bytes
    assert err.field == "text"
    assert "40 bytes" in err.message
    # 11 characters (well under 40) but 44 bytes: refused
    refused(inbound(text="😀" * 11), 40)


@given(st.text(max_size=60), st.integers(16, 80))
def test_text_accepted_iff_utf8_fits(text: str, limit: int) -> None:
    if len(text.encode()) <= limit:
        assert parse_inbound(inbound(text=text), limit).text == text
    else:
        assert refused(inbound(text=text), limit).field == "text"


def test_group_needs_a_peer_id() -> None:
    err = refused(inbound(peer_kind="group", req="r3"))
    assert (err.field, err.req) == ("peer_id", "r3")
    assert parse_inbound(inbound(peer_kind="group", peer_id="g"), 1000).peer_id == "g"


_TS64 = "2024-01-02T03:04:05." + "0" * 43 + "Z"  # 64 characters


@pytest.mark.parametrize(
    "ts",
    [
        "2024-01-02T03:04:05Z",
        "2024-01-02T03:04:05",
        "2024-01-02T03:04:05.678901+05:30",
        "2024-01-02T03:04:05-0800",
        "2024-02-29T23:59:60Z",  # a leap day, and a leap second as RFC 3339 allows
        "2000-02-29T00:00:00+14:00",  # divisible by 400: a leap year
        "2024-12-31T23:59:59.999-23:59",
        "0001-01-01T00:00:00Z",
        _TS64,  # exactly 64 characters
    ],
)
def test_timestamps_that_pass(ts: str) -> None:
    assert parse_inbound(inbound(ts=ts), 1000).ts == ts
    assert Inbound.model_validate(inbound(ts=ts)).ts == ts


@pytest.mark.parametrize(
    "ts",
    [
        "",
        "2024-01-02",
        "2024-01-02 03:04:05",
        "yesterday",
        "1714550400",
        "2024-01-02T03:04:05+5",
        "2024-01-02T03:04:05Z junk",
        "2024-01-02T03:04Z",
        "2024-01-02T::Z",
        "2024-01-02T" + "0" * 52 + "Z",
        _TS64[:-1] + "0Z",  # 65 characters
    ],
)
def test_timestamps_that_fail(ts: str) -> None:
    assert refused(inbound(ts=ts)).field == "ts"


@pytest.mark.parametrize(
    "ts",
    [
        "2026-13-45T99:99:99Z",  # issue 25
        "2026-00-10T10:00:00Z",
        "2026-01-00T10:00:00Z",
        "2026-02-29T10:00:00Z",  # 2026 is no leap year
        "1900-02-29T10:00:00Z",  # nor is 1900
        "2024-02-30T10:00:00Z",
        "2026-04-31T10:00:00Z",
        "2026-01-32T10:00:00Z",
        "2026-01-01T24:00:00Z",
        "2026-01-01T23:60:00Z",
        "2026-01-01T23:59:61Z",
        "2026-01-01T23:59:59+24:00",
        "2026-01-01T23:59:59-05:60",
    ],
)
def test_impossible_timestamps_are_refused_on_both_paths(ts: str) -> None:
    frame = inbound(ts=ts)
    with pytest.raises(ValidationError) as info:
        Inbound.model_validate(frame)
    assert [e["loc"] for e in info.value.errors()] == [("ts",)]
    err = refused(frame)
    assert (err.field, err.code) == ("ts", "invalid")


two_digits = st.integers(0, 99)


@given(st.integers(0, 9999), two_digits, two_digits, two_digits, two_digits, two_digits)
def test_a_timestamp_passes_iff_its_date_and_time_exist(
    year: int, month: int, day: int, hour: int, minute: int, second: int
) -> None:
    ts = f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}Z"
    try:  # datetime knows no year 0 (RFC 3339 does) nor leap seconds
        datetime(year or 2000, month, day, hour, minute, min(second, 59))
    except ValueError:
        exists = False
    else:
        exists = second <= 60
    assert is_timestamp(ts) == exists, ts


def test_timestamp_digits_are_ascii() -> None:
    assert refused(inbound(ts="٢٠٢٤-٠١-٠٢T٠٣:٠٤")).field == "ts"


# -- other frames and op arguments ------------------------------------------


def test_parse_model_op() -> None:
    op = parse_model(Op, {"type": "op", "op": "health"})
    assert isinstance(op, Op)
    assert op.args == {}
    with pytest.raises(ProtocolError) as info:
        parse_model(Op, {"type": "op", "op": "o" * 65, "req": "r4"})
    assert (info.value.code, info.value.field, info.value.req) == ("invalid", "op", "r4")


SPECS = (
    ArgSpec("session", str, max_len=8),
    ArgSpec("limit", int, required=False, minimum=1, maximum=100),
    ArgSpec("flag", bool, required=False),
)


def test_check_args_returns_only_known_arguments() -> None:
    assert check_args({"session": "s1", "limit": 5, "other": "x"}, SPECS, None) == {
        "session": "s1",
        "limit": 5,
    }
    assert check_args({"session": "s" * 8, "limit": 1, "flag": False}, SPECS, None) == {
        "session": "s" * 8,
        "limit": 1,
        "flag": False,
    }


@pytest.mark.parametrize(
    ("args", "field", "words"),
    [
        ({}, "session", "missing"),
        ({"session": None}, "session", "missing"),
        ({"session": 3}, "session", "must be a str"),
        ({"session": ""}, "session", "1..8"),
        ({"session": "s" * 9}, "session", "1..8"),
        ({"session": "s", "limit": "5"}, "limit", "integer"),
        ({"session": "s", "limit": True}, "limit", "integer"),
        ({"session": "s", "limit": 2.0}, "limit", "integer"),
        ({"session": "s", "limit": 0}, "limit", "1..100"),
        ({"session": "s", "limit": 101}, "limit", "1..100"),
        ({"session": "s", "flag": "yes"}, "flag", "must be a bool"),
    ],
)
def test_check_args_refusals(args: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(ProtocolError) as info:
        check_args(args, SPECS, "r5")
    assert (info.value.code, info.value.field, info.value.req) == ("invalid", field, "r5")
    assert words in info.value.message
