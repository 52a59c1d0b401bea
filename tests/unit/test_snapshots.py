"""File snapshots: the pure check of a `file` event, and the ledger's blobs and walks."""

from __future__ import annotations

import base64
import hashlib
import sqlite3
import zlib
from pathlib import Path

import orjson
import pytest

from core.snapshots import (
    content_of,
    file_event_problem,
    normal_path,
    shown,
    unified_diff,
)
from ledger import snapshots
from ledger.db import connect, load_migrations, migrate, schema_version
from ledger.port.errors import NotFound
from ledger.port.records import TurnRecord
from ledger.sessions import fork
from ledger.turns import commit_turn

BAD_PATHS = {
    "": "empty",
    "/etc/passwd": "absolute",
    "a/../../b": "'..'",
    "..": "'..'",
    "a\\b": "backslash",
    "a\x00b": "NUL",
    "src/": "directory",
    "./.": "names no file",
}


@pytest.mark.parametrize(("path", "word"), BAD_PATHS.items())
def test_a_path_that_is_not_relative_posix_is_a_problem(path: str, word: str) -> None:
    problem = file_event_problem({"path": path, "op": "write", "content": "x"})
    assert problem is not None and word in problem


def test_good_events_have_no_problem_and_paths_have_one_name() -> None:
    assert file_event_problem({"path": "src/a.py", "op": "edit", "content": ""}) is None
    assert file_event_problem({"path": "a.bin", "op": "create", "content_b64": "AAE="}) is None
    assert file_event_problem({"path": "gone.txt", "op": "delete"}) is None
    assert file_event_problem({"path": "no/content.txt", "op": "write"}) is None
    assert normal_path("./src//a.py") == "src/a.py"


@pytest.mark.parametrize(
    ("data", "word"),
    [
        ({"path": "a", "op": "write", "content": "x", "content_b64": "eA=="}, "both"),
        ({"path": "a", "op": "move", "content": "x"}, "op must be one of"),
        ({"path": "a", "op": "delete", "content": "x"}, "no content"),
        ({"path": "a", "op": "write", "content": 3}, "string"),
        ({"path": "a", "op": "write", "content_b64": "not base64!"}, "base64"),
        ({"path": 7, "op": "write"}, "string"),
        ("a.py", "object"),
    ],
)
def test_bad_file_event_data_is_a_problem(data: object, word: str) -> None:
    problem = file_event_problem(data)
    assert problem is not None and word in problem


def test_text_comes_back_as_content_and_bytes_as_content_b64() -> None:
    assert shown("héllo".encode()) == {"content": "héllo"}
    binary = b"\xff\x00\x01"
    assert shown(binary) == {"content_b64": base64.b64encode(binary).decode()}
    assert content_of(shown(binary)) == binary and content_of(shown(b"x")) == b"x"


def test_unified_diff_between_two_versions() -> None:
    diff = unified_diff("a.txt", b"one\ntwo\n", b"one\nthree\n", "t1", "t2")
    assert "--- a.txt (t1)" in diff and "-two\n" in diff and "+three\n" in diff
    assert unified_diff("a.txt", b"same\n", b"same\n", "t1", "t2") == ""
    assert "+new\n" in unified_diff("a.txt", None, b"new\n", "t0", "t1")


# -- the ledger side --------------------------------------------------------------

_now = iter(range(1_000, 10_000_000, 10))


def session(conn: sqlite3.Connection, label: str = "s") -> str:
    conn.execute(
        "INSERT INTO sessions (label, kind, origin, created_at, updated_at)"
        " VALUES (?, 'dm', 'inbound', 0, 0)",
        (label,),
    )
    return label


def turn(
    conn: sqlite3.Connection,
    label: str,
    parent: str | None,
    turn_id: str,
    *files: dict[str, object],
    max_bytes: int = snapshots.DEFAULT_MAX_BYTES,
) -> str:
    now = next(_now)
    rec = TurnRecord(
        turn_id=turn_id,
        session=label,
        parent_id=parent,
        type="turn",
        status="completed",
        reason=None,
        error=None,
        output="ok",
        engine="echo",
        model=None,
        started_at=now,
        completed_at=now + 1,
        prompt_tokens=None,
        completion_tokens=None,
        inputs=[],
        item_status="done",
        events=[("intent", {"text": "go"}), *(("file", dict(f)) for f in files)],
    )
    conn.execute("BEGIN")
    commit_turn(conn, rec, max_bytes)
    conn.execute("COMMIT")
    return turn_id


def w(path: str, content: str, op: str = "write") -> dict[str, object]:
    return {"path": path, "op": op, "content": content}


def sha(text: str | bytes) -> str:
    data = text.encode() if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()


def test_each_distinct_content_is_stored_once_compressed(conn: sqlite3.Connection) -> None:
    label = session(conn)
    big = "line of text\n" * 5000
    t1 = turn(conn, label, None, "t1", w("a.txt", big), w("b.txt", big))
    turn(conn, label, t1, "t2", w("a.txt", big))
    [(digest, size, stored)] = conn.execute(
        "SELECT sha256, bytes, length(data) FROM blobs"
    ).fetchall()
    assert digest == sha(big) and size == len(big) and stored < len(big) // 20
    payloads = [r[0] for r in conn.execute("SELECT payload FROM turn_events WHERE type = 'file'")]
    assert len(payloads) == 3 and not any("line of text" in p for p in payloads)
    assert zlib.decompress(conn.execute("SELECT data FROM blobs").fetchone()[0]) == big.encode()


def test_before_hash_chain_and_delete(conn: sqlite3.Connection) -> None:
    label = session(conn)
    t1 = turn(conn, label, None, "t1", w("a.txt", "v1", "create"))
    t2 = turn(conn, label, t1, "t2")  # touches nothing
    t3 = turn(conn, label, t2, "t3", w("./a.txt", "v2", "edit"), w("a.txt", "v3", "edit"))
    t4 = turn(conn, label, t3, "t4", {"path": "a.txt", "op": "delete"})
    turn(conn, label, t4, "t5", w("a.txt", "v5", "create"))
    changes = snapshots.history(conn, label, "a.txt")
    assert [(c["turn"], c["op"], c["before"], c["sha256"]) for c in changes] == [
        ("t1", "create", None, sha("v1")),
        ("t3", "edit", sha("v1"), sha("v2")),
        ("t3", "edit", sha("v2"), sha("v3")),
        ("t4", "delete", sha("v3"), None),
        ("t5", "create", None, sha("v5")),
    ]
    assert snapshots.at(conn, label, "a.txt", "t2")["content"] == "v1"
    assert snapshots.at(conn, label, "a.txt", "t3")["content"] == "v3"
    assert snapshots.at(conn, label, "a.txt", None)["content"] == "v5"
    with pytest.raises(NotFound, match="deleted by turn t4"):
        snapshots.at(conn, label, "a.txt", "t4")
    with pytest.raises(NotFound, match="never existed"):
        snapshots.at(conn, label, "b.txt", None)
    with pytest.raises(NotFound):
        snapshots.history(conn, label, "b.txt")
    with pytest.raises(NotFound):
        snapshots.at(conn, "nobody", "a.txt", None)
    with pytest.raises(NotFound):
        snapshots.at(conn, label, "a.txt", "no-such-turn")


def test_a_fork_inherits_its_ancestors_snapshots(conn: sqlite3.Connection) -> None:
    label = session(conn)
    chain: list[str] = []
    parent = None
    for n in range(5):
        parent = turn(conn, label, parent, f"o{n}", w("f.txt", f"original {n}"))
        chain.append(parent)
    conn.execute("BEGIN")
    forked = fork(conn, chain[2], "fork:x", 0)
    conn.execute("COMMIT")
    mine = turn(conn, forked, chain[2], "f3", w("f.txt", "fork 3"))
    for t in chain[:3]:
        assert snapshots.at(conn, forked, "f.txt", t) == snapshots.at(conn, label, "f.txt", t)
    assert snapshots.at(conn, forked, "f.txt", None)["content"] == "fork 3"
    assert [c["turn"] for c in snapshots.history(conn, forked, "f.txt")] == [*chain[:3], mine]
    assert snapshots.history(conn, forked, "f.txt")[-1]["before"] == sha("original 2")
    assert snapshots.at(conn, label, "f.txt", None)["content"] == "original 4"
    conn.execute("BEGIN")
    again = fork(conn, mine, "fork:of-fork", 0)  # its thread runs through three sessions
    conn.execute("COMMIT")
    turn(conn, again, mine, "g4", w("g.txt", "only here"))
    assert snapshots.at(conn, again, "f.txt", None)["content"] == "fork 3"
    assert snapshots.at(conn, again, "f.txt", chain[0])["content"] == "original 0"
    with pytest.raises(NotFound):  # another session's file is not this thread's
        snapshots.at(conn, forked, "g.txt", None)


def test_a_content_over_max_bytes_is_kept_by_hash_and_size(conn: sqlite3.Connection) -> None:
    label = session(conn)
    turn(conn, label, None, "t1", w("big.txt", "x" * 100), max_bytes=50)
    answer = snapshots.at(conn, label, "big.txt", None)
    assert answer["sha256"] == sha("x" * 100) and answer["bytes"] == 100
    assert answer["stored"] is False and "snapshots.max_bytes (50)" in answer["note"]
    assert "content" not in answer
    assert conn.execute("SELECT count(*) FROM blobs").fetchone()[0] == 0
    [payload] = [r[0] for r in conn.execute("SELECT payload FROM turn_events WHERE type='file'")]
    assert '"stored":false' in payload and "max_bytes" in payload


def test_binary_content_and_no_content(conn: sqlite3.Connection) -> None:
    label = session(conn)
    data = bytes(range(256))
    b64 = base64.b64encode(data).decode()
    t1 = turn(conn, label, None, "t1", {"path": "x.bin", "op": "write", "content_b64": b64})
    turn(conn, label, t1, "t2", {"path": "y.txt", "op": "write"})
    assert content_of(snapshots.at(conn, label, "x.bin", None)) == data
    unknown = snapshots.at(conn, label, "y.txt", None)
    assert unknown["sha256"] is None and unknown["stored"] is False and unknown["note"]


def test_a_bad_event_stores_no_content_and_keeps_its_problem(conn: sqlite3.Connection) -> None:
    label = session(conn)
    turn(conn, label, None, "t1", w("/etc/passwd", "secret"), w("ok.txt", "fine"))
    [bad, good] = [r[0] for r in conn.execute("SELECT payload FROM turn_events WHERE type='file'")]
    assert "absolute" in bad and "secret" not in bad
    assert conn.execute("SELECT count(*) FROM blobs").fetchone()[0] == 1
    assert [f["path"] for f in snapshots.files(conn, label)] == ["ok.txt"]
    assert "fine" not in good


def test_gc_removes_only_blobs_no_snapshot_names(conn: sqlite3.Connection) -> None:
    label = session(conn)
    t1 = turn(conn, label, None, "t1", w("a.txt", "kept"))
    conn.execute("BEGIN")
    forked = fork(conn, t1, "fork:y", 0)
    conn.execute("COMMIT")
    other = session(conn, "other")
    turn(conn, other, None, "u1", w("b.txt", "kept"))  # the same content, shared
    turn(conn, forked, t1, "f1", w("a.txt", "fork's"))
    conn.execute("BEGIN")
    snapshots.put_blob(conn, b"nobody names me", 0)
    conn.execute("COMMIT")
    conn.execute("BEGIN")
    removed = snapshots.gc(conn)
    conn.execute("COMMIT")
    assert removed["blobs"] == 1 and removed["bytes"] > 0
    left = {r[0] for r in conn.execute("SELECT sha256 FROM blobs")}
    assert left == {sha("kept"), sha("fork's")}
    assert snapshots.gc(conn) == {"blobs": 0, "bytes": 0}


def test_0008_applies_after_a_0007_that_makes_a_timers_table(tmp_path: Path) -> None:
    # The timers branch owns 0007; whatever it holds, 0008 must apply on top of it.
    c = connect(tmp_path / "l.db")
    try:
        for m in load_migrations()[:6]:
            c.executescript(f"BEGIN;\n{m.sql}\nPRAGMA user_version = {m.version};\nCOMMIT;")
        c.executescript(
            "BEGIN; CREATE TABLE timers (id TEXT PRIMARY KEY, session_label TEXT NOT NULL"
            " REFERENCES sessions(label), text TEXT NOT NULL) WITHOUT ROWID;"
            " PRAGMA user_version = 7; COMMIT;"
        )
        applied = migrate(c)  # 0008, then whatever later migrations there are
        assert applied[0] == "0008_snapshots"
        assert schema_version(c) == len(load_migrations()) == 6 + 1 + len(applied)
        tables = {r[0] for r in c.execute("SELECT name FROM sqlite_schema WHERE type='table'")}
        assert {"timers", "blobs", "file_snapshots"} <= tables
    finally:
        c.close()


def test_export_carries_each_blob_once_and_import_restores_file_at(
    conn: sqlite3.Connection, tmp_path: Path
) -> None:
    from ledger.sessions import ImportError_, export_lines, import_lines

    label = session(conn)
    t1 = turn(conn, label, None, "t1", w("a.txt", "same"), w("b.txt", "same"))
    t2 = turn(conn, label, t1, "t2", w("a.txt", "new"), {"path": "b.txt", "op": "delete"})
    turn(conn, label, t2, "t3", w("big", "y" * 100), max_bytes=10)
    lines = list(export_lines(conn, label, 0))
    assert [line["type"] for line in lines] == ["header", "blob", "turn", "blob", "turn", "turn"]
    raw = [orjson.dumps(line) for line in lines]
    conn.execute("BEGIN")
    copy, count = import_lines(conn, raw, "import:c", 0)
    conn.execute("COMMIT")
    assert count == 3
    copied = [t["turn"] for t in snapshots.history(conn, copy, "a.txt")]
    for mine, theirs in zip(copied, ["t1", "t2"], strict=True):
        a, b = snapshots.at(conn, copy, "a.txt", mine), snapshots.at(conn, label, "a.txt", theirs)
        assert {**a, "turn": 0, "changed_in": 0} == {**b, "turn": 0, "changed_in": 0}
    assert snapshots.at(conn, copy, "big", None)["stored"] is False
    assert [f["path"] for f in snapshots.files(conn, copy)] == ["a.txt", "b.txt", "big"]
    conn.execute("BEGIN")
    assert snapshots.gc(conn) == {"blobs": 0, "bytes": 0}  # the copy names the same blobs
    conn.execute("COMMIT")
    tampered = [raw[0], raw[1].replace(b'"sha256":"', b'"sha256":"0'), *raw[2:]]
    missing = [raw[0], *raw[2:]]
    elsewhere = connect(tmp_path / "elsewhere.db")  # a ledger without these blobs
    migrate(elsewhere)
    try:
        for bad, why in ((tampered, "does not match"), (missing, "not given")):
            elsewhere.execute("BEGIN")
            with pytest.raises(ImportError_, match=why):
                import_lines(elsewhere, bad, None, 0)
            elsewhere.execute("ROLLBACK")
        elsewhere.execute("BEGIN")
        import_lines(elsewhere, raw, "import:there", 0)
        elsewhere.execute("COMMIT")
        there = snapshots.at(elsewhere, "import:there", "a.txt", None)
        assert there["content"] == "new"
    finally:
        elsewhere.close()
