"""A python engine for the cluster tests whose calls can be caught mid-way: every call
is recorded (the node's pid, start, progress, end or cancellation, the time) in a file
the nodes share, and a call is slow (`seconds`, in steps a pause stops) when it is a
compaction's summary or its input starts with "slow"; otherwise it echoes at once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ENGINE = """
import json, os, time

import anyio

from broker.engines import EngineResult


class Slow:
    name = "slow"
    accepts_steering = False

    def __init__(self, config):
        self.log = config["log"]
        self.seconds = float(config["seconds"])
        self.context_window = int(config.get("context_window", 8192))

    def _record(self, event, kind, said):
        line = {"pid": os.getpid(), "event": event, "kind": kind, "t": time.time(), "said": said}
        with open(self.log, "a") as f:
            f.write(json.dumps(line) + "\\n")

    async def run(self, request, io):
        said = " ".join(m.content for m in request.inputs)
        kind = "compaction" if "compact a conversation" in (request.system_prompt or "") else "turn"
        slow = kind == "compaction" or said.startswith("slow")
        self._record("start", kind, said[:60])
        try:
            for _ in range(round(self.seconds / 0.05) if slow else 0):
                await anyio.sleep(0.05)  # steps, not a deadline: a paused node makes none
                self._record("tick", kind, said[:60])
        except BaseException:
            self._record("cancelled", kind, said[:60])
            raise
        self._record("end", kind, said[:60])
        await io.delta(said)
        return EngineResult(text=said, model="slow")

    async def aclose(self):
        return None


def factory(config):
    return Slow(config)
"""


def install(work: Path, nodes: int, log: Path, seconds: float, **more: Any) -> dict[str, Any]:
    """Write the engine beside each node's config (`make_cluster`'s first cluster's
    folders) and return the `[engine]` table that runs it."""
    for n in range(nodes):
        folder = work / "c0" / f"n{n}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "slow_engine_mod.py").write_text(ENGINE)
    return {
        "kind": "python",
        "entry": "slow_engine_mod:factory",
        "log": str(log),
        "seconds": seconds,
        "timeout_s": 60,
        **more,
    }


def records(log: Path) -> list[dict[str, Any]]:
    """The calls' records so far, in the order written."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
