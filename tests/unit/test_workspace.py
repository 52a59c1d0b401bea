"""The git state of an engine's workspace (broker/workspace.py) on asyncio and trio, and
the parsing of `git status --porcelain=v1 -z` (core/snapshots.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from broker.config import Settings
from broker.mailbox.turn_parts import workspace
from broker.workspace import git_state
from core.snapshots import git_status_lists

pytestmark = pytest.mark.anyio


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)
    return done.stdout.decode().strip()


@pytest.fixture
def checkout(tmp_path: Path) -> tuple[Path, str]:
    """A checkout on branch `work` with a changed file and an untracked one; its HEAD."""
    git(tmp_path, "init", "-q", "-b", "work")
    (tmp_path / "a").write_text("1")
    git(tmp_path, "add", "a")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@e.org", "commit", "-qm", "one")
    (tmp_path / "a").write_text("2")
    (tmp_path / "new").write_text("n")
    return tmp_path, git(tmp_path, "rev-parse", "HEAD")


async def test_a_checkout_reports_head_branch_dirty_and_staged(
    checkout: tuple[Path, str],
) -> None:
    folder, head = checkout
    got = await git_state(str(folder))
    assert (got["git_head"], got["git_branch"]) == (head, "work")
    assert (sorted(got["git_dirty"]), got["git_staged"]) == (["a", "new"], [])


async def test_a_folder_that_is_no_checkout_gives_the_reason(tmp_path: Path) -> None:
    got = await git_state(str(tmp_path / "nowhere"))
    assert "git_head" not in got and got["git_error"]


def test_porcelain_lists_dirty_and_staged_paths_and_follows_renames() -> None:
    out = "M  staged.py\0 M dirty.py\0MM both.py\0?? new.py\0R  new name.py\0old name.py\0"
    assert git_status_lists(out) == (
        ["dirty.py", "both.py", "new.py"],
        ["staged.py", "both.py", "new name.py"],
    )


def test_the_workspace_comes_from_the_engine_or_its_settings() -> None:
    class Plain:
        name, accepts_steering, context_window = "p", False, 100

    class Reporting(Plain):
        workspace = "/srv/own"

    settings = Settings.model_validate({"engine": {"workspace": "/srv/configured"}})
    assert workspace(settings, None, Reporting()) == "/srv/own"  # type: ignore[arg-type]
    assert workspace(settings, None, Plain()) == "/srv/configured"  # type: ignore[arg-type]
    assert workspace(Settings(), None, Plain()) is None  # type: ignore[arg-type]
