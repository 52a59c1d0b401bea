"""The built-in echo engine: deterministic, for the demo and for tests.

The reply is the texts of the turn's inputs joined with newlines, streamed in
`chunks` deltas with `delay_ms` between them. Steered messages are taken at
chunk boundaries and join the reply. An abort stops it at once (the sleeps and
deltas are cancellation points).
"""

from __future__ import annotations

from functools import lru_cache

import anyio

from broker.engines.base import TurnIO
from core.engine_types import EngineResult, TurnRequest


@lru_cache(maxsize=8192)
def word_count(text: str) -> int:
    """Words in `text`, the echo engine's token count. Cached: a session's history
    goes into every turn's prompt, so the same texts are counted turn after turn."""
    return len(text.split())


def split_chunks(text: str, chunks: int) -> list[str]:
    """`text` cut into at most `chunks` non-empty pieces that join back to it."""
    if not text:
        return []
    size = -(-len(text) // max(1, chunks))
    return [text[i : i + size] for i in range(0, len(text), size)]


class EchoEngine:
    name = "echo"
    accepts_steering = True
    summarizes = False  # it repeats its input: a closing summary is made without it

    def __init__(self, chunks: int = 3, delay_ms: int = 0, context_window: int = 8192) -> None:
        self.chunks = chunks
        self.delay_s = delay_ms / 1000
        self.context_window = context_window

    async def run(self, request: TurnRequest, io: TurnIO) -> EngineResult:
        reply = "\n".join(m.content for m in request.inputs)
        sent: list[str] = []
        pending = split_chunks(reply, self.chunks)
        while pending:
            piece = pending.pop(0)
            await io.delta(piece)
            sent.append(piece)
            if self.delay_s:
                await anyio.sleep(self.delay_s)
            elif pending:
                # A chance for a steer or an abort to arrive before the next chunk;
                # after the last one it would only cost the turn a trip through the loop.
                await anyio.lowlevel.checkpoint()
            for steered in io.take_steer():
                pending.extend(split_chunks("\n" + steered.content, 1))
        text = "".join(sent)
        tokens = len(text.split())
        prompt = sum(map(word_count, [m.content for m in (*request.history, *request.inputs)]))
        return EngineResult(text=text, prompt_tokens=prompt, completion_tokens=tokens, model="echo")

    async def aclose(self) -> None:
        return None
