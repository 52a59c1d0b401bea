"""The git state of an engine's workspace, for a turn's start `snapshot` event.

A workspace is a folder an engine reports (`[engine] workspace`, or the engine's own
`workspace` attribute). Its state is asked of git at a turn's start, bounded by
`GIT_TIMEOUT_S` for all its questions together; a folder that is not a checkout, a
missing git or a git that does not answer in time gives the reason instead
(`git_error`), and the turn goes on: the snapshot records what could be known.
"""

from __future__ import annotations

import subprocess
from typing import Any

import anyio

from core.snapshots import git_status_lists

GIT_TIMEOUT_S = 5.0


async def git_state(path: str) -> dict[str, Any]:
    """`git_head`, `git_branch`, `git_dirty`, `git_staged` of the checkout at `path`, or
    `git_error` saying why not."""
    out: dict[str, Any] = {"workspace": path}
    with anyio.move_on_after(GIT_TIMEOUT_S) as scope:
        try:
            head = await _git(path, "rev-parse", "HEAD")
            branch = await _git(path, "rev-parse", "--abbrev-ref", "HEAD")
            status = await _git(path, "status", "--porcelain=v1", "-z", strip=False)
        except (OSError, subprocess.CalledProcessError) as exc:
            return {**out, "git_error": _why(exc)}
        dirty, staged = git_status_lists(status)
        return {
            **out,
            "git_head": head,
            "git_branch": None if branch == "HEAD" else branch,  # detached: no branch
            "git_dirty": dirty,
            "git_staged": staged,
        }
    assert scope.cancelled_caught
    return {**out, "git_error": f"git did not answer within {GIT_TIMEOUT_S:g} s"}


async def _git(path: str, *args: str, strip: bool = True) -> str:
    done = await anyio.run_process(["git", "-C", path, *args], check=True)
    text = done.stdout.decode("utf-8", "replace")
    return text.strip() if strip else text


def _why(exc: OSError | subprocess.CalledProcessError) -> str:
    if isinstance(exc, subprocess.CalledProcessError):
        said = (exc.stderr or b"").decode("utf-8", "replace").strip().splitlines()
        return said[0] if said else f"git exited with status {exc.returncode}"
    return f"git could not be run: {exc.strerror or exc}"
