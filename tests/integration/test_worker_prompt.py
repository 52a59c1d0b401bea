"""A worker's task-focused prompt (seed 002, "Context Assembly for WA"): a worker turn
begins with `[workers] system_prompt` (or its persona's) and its task as its input,
not the prompt of the session that dispatched it; the session row keeps the prompt it
ran with. On asyncio and trio."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from broker.config import WorkerSettings
from broker.mailbox.turn_parts import ARCHIVE_LINES
from tests.conftest import DaemonFactory
from tests.harness import DaemonProcess
from tests.integration.test_workers import dispatch, parent_session, until
from tests.integration.wire import op

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]

ENGINE = """
import json

from broker.engines import EngineResult


class Telling:
    name = "telling"
    accepts_steering = False
    context_window = 8192

    async def run(self, request, io):
        said = {"system": request.system_prompt, "inputs": [m.content for m in request.inputs]}
        return EngineResult(text=json.dumps(said), model="m")

    async def aclose(self):
        return None


engine = Telling()
"""


def daemon_with(
    make_daemon: DaemonFactory, short_tmp: Path, backend: str, **more: Any
) -> DaemonProcess:
    folder = short_tmp / "d"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "telling_engine.py").write_text(ENGINE)
    config = {
        "engine": {"kind": "python", "entry": "telling_engine:engine"},
        "personas": {"focused": {"system_prompt": "Do the task; say only the result."}},
        **more,
    }
    return make_daemon(config, backend=backend)


async def worker_turn(d: DaemonProcess, task: str) -> tuple[str, dict[str, Any]]:
    """A worker's label, and what its first turn was given (the engine tells)."""
    parent = await parent_session(d)
    [(asked,)] = await until(d, "SELECT output FROM turns WHERE session_label = ?", parent)
    assert json.loads(asked)["system"] == ARCHIVE_LINES  # the parent has no prompt of its own
    done = await dispatch(d, target={"kind": "new_session"}, task=task, parent_session=parent)
    worker = str(done["session"])
    [(output,)] = await until(
        d, "SELECT output FROM turns WHERE session_label = ? AND status = 'completed'", worker
    )
    return worker, json.loads(output)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
async def test_a_worker_runs_with_the_task_focused_prompt_and_its_task(
    make_daemon: DaemonFactory, short_tmp: Path, backend: str
) -> None:
    d = daemon_with(make_daemon, short_tmp, backend)
    worker, said = await worker_turn(d, "count the stars")
    default = WorkerSettings().system_prompt
    assert said["system"] == f"{default}\n\n{ARCHIVE_LINES}"
    assert "dispatched the task below to you" in default
    assert len(said["inputs"]) == 1 and "count the stars" in said["inputs"][0]
    shown = await op(d, "session.show", session=worker)
    assert (shown["kind"], shown["system_prompt"]) == ("worker", said["system"])


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
async def test_a_workers_persona_gives_its_prompt(
    make_daemon: DaemonFactory, short_tmp: Path, backend: str
) -> None:
    d = daemon_with(make_daemon, short_tmp, backend, workers={"persona": "focused"})
    worker, said = await worker_turn(d, "sum 2 and 2")
    assert said["system"] == f"Do the task; say only the result.\n\n{ARCHIVE_LINES}"
    assert "sum 2 and 2" in said["inputs"][0]
    assert (await op(d, "session.show", session=worker))["system_prompt"] == said["system"]
