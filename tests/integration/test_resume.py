"""`person.sessions` and `brokerctl resume`: a person's sessions and threads, to pick
one to resume (ledger/resume.py), on a real daemon, asyncio and trio."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.conftest import DaemonFactory
from tests.ctl import in_process
from tests.harness import DaemonProcess
from tests.integration.test_session_close import QUIET, ctl, say
from tests.integration.wire import Adapter, op

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]


def wide_ctl(d: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    # No terminal: rich would fold at 80 columns.
    return in_process("--config", str(d.config_path), *args, env={"COLUMNS": "250"})


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
async def test_a_person_lists_their_sessions_old_and_new_to_resume_one(
    make_daemon: DaemonFactory, backend: str
) -> None:
    d = make_daemon(QUIET, backend=backend)
    async with await Adapter.connect(d, "sms") as a:
        first, _ = await say(a, "+1", "Plan the trip to Lisbon")
        old = first["session"]
        await op(d, "session.close", session=old)
        again, _ = await say(a, "+1", "I am back")
        await say(a, "+2", "someone else")
    entity = (await op(d, "session.show", session=old))["person"]["entity"]
    listed = await op(d, "person.sessions", entity=entity)
    assert [s["label"] for s in listed["sessions"]] == [again["session"], old]  # newest first
    newer, older = listed["sessions"]
    assert (newer["extends"], newer["ended_at"], newer["title"]) == (old, None, "I am back")
    assert older["ended_at"] is not None and older["closing_summary"]
    assert [t["turns"] for t in older["threads"]] == [1]
    shown = wide_ctl(d, "resume", entity)
    assert shown.returncode == 0, shown.stderr
    assert old in shown.stdout and again["session"] in shown.stdout and "closed" in shown.stdout
    as_json = json.loads(ctl(d, "--json", "resume", entity).stdout)
    assert as_json["sessions"] == listed["sessions"]
    missing = ctl(d, "resume", "ent_nobody")
    assert missing.returncode == 1 and "not_found" in missing.stderr
