"""File snapshots: what a `file` event may say, and how a content is shown. Pure.

A `file` event names its file by a relative POSIX path: not empty, not absolute, no
`..` segment, no backslash, no NUL. `file_event_problem` says in one sentence what is
wrong with an event, or None; a turn with a bad event fails with that sentence (the
actor asks), and the ledger never stores a bad event's content. One file has one
name: `normal_path` drops `.` and empty segments, so `./src//a.py` and `src/a.py` are
the same file. A content is bytes, and comes back as `content` (text) when it is
valid UTF-8, else as `content_b64`; a client knows which by the key present.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping
from typing import Any

FILE_OPS = ("write", "edit", "create", "delete")
MAX_PATH_BYTES = 4096  # PATH_MAX on Linux


def path_problem(path: object) -> str | None:
    """Why `path` is not a relative POSIX path naming a file, or None."""
    if not isinstance(path, str):
        return "a file event's path must be a string"
    if not path:
        return "a file event's path is empty"
    if "\x00" in path:
        return f"the file path {path!r} contains a NUL character"
    if "\\" in path:
        return f"the file path {path!r} contains a backslash; use '/' between segments"
    if path.startswith("/"):
        return f"the file path {path!r} is absolute; it must be relative to the workspace"
    if ".." in path.split("/"):
        return f"the file path {path!r} has a '..' segment; it must stay inside the workspace"
    if path.endswith("/"):
        return f"the file path {path!r} ends with '/', which names a directory, not a file"
    if len(path.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        return f"the file path is longer than {MAX_PATH_BYTES} bytes"
    if not normal_path(path):
        return f"the file path {path!r} names no file"
    return None


def normal_path(path: str) -> str:
    """`path` without `.` and empty segments: one file, one name."""
    return "/".join(part for part in path.split("/") if part not in ("", "."))


def file_event_problem(data: Mapping[str, Any] | object) -> str | None:
    """Why the data of a `file` event cannot be stored, in one sentence, or None.

    `{"path", "op": "write"|"edit"|"create"|"delete", "content"?: str,
    "content_b64"?: str}`: at most one of the contents, none for a delete.
    """
    if not isinstance(data, Mapping):
        return "a file event's data must be an object"
    problem = path_problem(data.get("path"))
    if problem is not None:
        return problem
    op = data.get("op")
    if op not in FILE_OPS:
        return f"a file event's op must be one of {', '.join(FILE_OPS)}, not {op!r}"
    text, b64 = data.get("content"), data.get("content_b64")
    if text is not None and b64 is not None:
        return "a file event carries both content and content_b64; send one of them"
    if op == "delete" and (text is not None or b64 is not None):
        return "a file event with op 'delete' carries no content"
    if text is not None and not isinstance(text, str):
        return "a file event's content must be a string of UTF-8 text"
    if isinstance(text, str):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return "a file event's content is not valid UTF-8 text; send it as content_b64"
    if b64 is not None:
        if not isinstance(b64, str):
            return "a file event's content_b64 must be a base64 string"
        try:
            base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError):
            return "a file event's content_b64 is not valid base64"
    return None


def bad_file_event(events: Iterable[tuple[str, Any]]) -> str | None:
    """The first problem among a turn's `file` events (`file_event_problem`), or None."""
    for kind, data in events:
        if kind == "file" and (problem := file_event_problem(data)) is not None:
            return problem
    return None


def event_content(data: Mapping[str, Any]) -> bytes | None:
    """The content a valid file event carries, as bytes; None when it has none."""
    text, b64 = data.get("content"), data.get("content_b64")
    if isinstance(text, str):
        return text.encode("utf-8")
    if isinstance(b64, str):
        return base64.b64decode(b64, validate=True)
    return None


def shown(content: bytes) -> dict[str, str]:
    """`{"content": text}` for UTF-8 text, else `{"content_b64": ...}`."""
    try:
        return {"content": content.decode("utf-8")}
    except UnicodeDecodeError:
        return {"content_b64": base64.b64encode(content).decode("ascii")}


def content_of(answer: Mapping[str, Any]) -> bytes | None:
    """The bytes of a `file.at` answer; None when it has no content."""
    if isinstance(text := answer.get("content"), str):
        return text.encode("utf-8")
    if isinstance(b64 := answer.get("content_b64"), str):
        return base64.b64decode(b64)
    return None


def unified_diff(
    path: str, before: bytes | None, after: bytes | None, before_name: str, after_name: str
) -> str:
    """A unified diff between two versions of a file (None: it did not exist)."""
    if b"\x00" in (before or b"") or b"\x00" in (after or b""):
        same = before == after
        return "" if same else f"Binary versions of {path} differ\n"
    old = (before or b"").decode("utf-8", "replace").splitlines(keepends=True)
    new = (after or b"").decode("utf-8", "replace").splitlines(keepends=True)
    import difflib  # only a diff needs it, and its import is a daemon start's cost

    lines = difflib.unified_diff(
        old, new, f"{path} ({before_name})", f"{path} ({after_name})", lineterm="\n"
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def git_status_lists(porcelain: str) -> tuple[list[str], list[str]]:
    """(dirty, staged) paths from `git status --porcelain=v1 -z` output: dirty are the
    paths changed in the work tree or untracked, staged those changed in the index. A
    rename's or copy's entry names its new path (its old path follows it, skipped)."""
    dirty: list[str] = []
    staged: list[str] = []
    entries = iter(porcelain.split("\0"))
    for entry in entries:
        if len(entry) < 4:
            continue
        index, tree, path = entry[0], entry[1], entry[3:]
        if index in "RC":
            next(entries, None)  # the old path
        if index not in " ?!":
            staged.append(path)
        if tree not in " !":
            dirty.append(path)
    return dirty, staged
