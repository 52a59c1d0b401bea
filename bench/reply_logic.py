"""One reply logic in two engines, for bench.engines: a `kind = "python"` engine
(`make`) and a `kind = "subprocess"` program (run as a script, stdlib only).

Both reply with the turn's inputs joined, in `chunks` deltas `chunk_ms` apart.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any


def pieces(text: str, chunks: int) -> list[str]:
    size = -(-len(text) // max(1, chunks)) or 1
    return [text[i : i + size] for i in range(0, len(text), size)]


class Reply:
    name = "reply"
    accepts_steering = False
    context_window = 8192

    def __init__(self, config: dict[str, Any]) -> None:
        self.chunks = int(config.get("reply_chunks", 8))
        self.delay_s = int(config.get("reply_chunk_ms", 4)) / 1000

    async def run(self, request: Any, io: Any) -> Any:
        import anyio

        from broker.engines import EngineResult

        text = "\n".join(m.content for m in request.inputs)
        for piece in pieces(text, self.chunks):
            await io.delta(piece)
            await anyio.sleep(self.delay_s)
        return EngineResult(text=text, model="reply")

    async def aclose(self) -> None:
        return None


def make(config: dict[str, Any]) -> Reply:
    return Reply(config)


def program(chunks: int, delay_s: float) -> None:
    """The same logic over the subprocess engine's JSON lines."""
    turn = json.loads(sys.stdin.readline())
    text = "\n".join(m["content"] for m in turn["inputs"])
    for piece in pieces(text, chunks):
        sys.stdout.write(json.dumps({"type": "delta", "text": piece}) + "\n")
        sys.stdout.flush()
        time.sleep(delay_s)
    sys.stdout.write(json.dumps({"type": "final", "text": text, "model": "reply"}) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    program(int(sys.argv[1]), int(sys.argv[2]) / 1000)
