"""What stopping before each step costs the `langgraph` engine: CPU per turn of the
engine (broker/engines/langgraph_engine.py, a turn-scoped checkpointer, the graph
paused before every step so steered messages can join) against the same graph run
in one `astream` with no checkpointer, in process, on the graph of
tests/integration/lg_agent.py (LangChain's fake chat model answering at once).

    .venv/bin/python -m bench.langgraph_steps [--turns 200] [--rounds 3]

Two kinds of turn: a plain reply (one step) and a tool round (model, tool, model).
Rounds alternate the two ways, so a drift of the machine's speed hits both alike.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).parents[1]
FILES = [
    HERE / "tests" / "integration" / "lg_agent.py",
    HERE / "tests" / "integration" / "agent_rules.py",
    HERE / "examples" / "agent_langgraph.py",
]


class QuietIO:
    async def delta(self, text: str) -> None:
        return None

    def take_steer(self) -> list[Any]:
        return []

    async def call_tool(
        self, name: str, arguments: dict[str, Any], call_id: str | None = None
    ) -> str:
        return ""

    def event(self, kind: str, data: dict[str, Any]) -> None:
        return None


async def measure(args: argparse.Namespace) -> None:
    import lg_agent  # type: ignore[import-not-found]

    from broker.engines.langgraph_engine import LangGraphEngine, lc_messages
    from core.engine_types import ChatMessage, TurnRequest

    engine, io = LangGraphEngine(lg_agent.graph, 8192), QuietIO()

    def request(text: str, n: int) -> TurnRequest:
        return TurnRequest("dm:b", f"t{n}", None, (), (ChatMessage("user", text),))

    async def stepped(text: str, n: int) -> None:
        await engine.run(request(text, n), io)

    async def direct(text: str, n: int) -> None:
        config: Any = {"configurable": {"broker_tools": [], "thread_id": f"t{n}"}}
        messages = {"messages": lc_messages(request(text, n))}
        async for _ in lg_agent.graph.astream(
            messages, config, stream_mode=["messages", "updates"]
        ):
            pass

    ways: list[tuple[str, Callable[[str, int], Awaitable[None]]]] = [
        ("one astream, no checkpointer", direct),
        ("the engine, stepped", stepped),
    ]
    for text in ("hello", "what is the weather"):
        for _, way in ways:
            for n in range(20):  # warm
                await way(text, n)
        cpu: dict[str, list[float]] = {}
        for _ in range(args.rounds):
            for name, way in ways:
                began = time.process_time()
                for n in range(args.turns):
                    await way(text, n)
                cpu.setdefault(name, []).append((time.process_time() - began) / args.turns * 1e6)
        kind = "plain reply" if text == "hello" else "tool round"
        for name, per_round in cpu.items():
            shown = ", ".join(f"{x:,.0f}" for x in per_round)
            print(f"  {kind:11}  {name:28}  {shown} µs CPU per turn")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lgs-", dir="/tmp") as tmp:
        for path in FILES:
            shutil.copy(path, Path(tmp) / path.name)
        sys.path.insert(0, tmp)
        asyncio.run(measure(args))


if __name__ == "__main__":
    main()
