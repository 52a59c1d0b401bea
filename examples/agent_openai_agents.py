"""An OpenAI Agents SDK agent behind the broker (docs/agents-sdk.md).

    [engine]
    kind = "openai-agents"
    agent = "agent_openai_agents:agent"   # this file, beside the config file or on sys.path

It uses the Agents SDK's default model (OPENAI_API_KEY in the daemon's environment),
or set `OPENAI_BASE_URL` for a compatible server. The broker adds its own tools
(agent_send, conversation_recall, scratchpad_*, schedule, session_compact) beside
`word_count` below, and keeps the conversation in its ledger: no SDK session.

Run it without the broker, on a fake model:  python examples/agent_openai_agents.py
"""

from __future__ import annotations

from agents import Agent, function_tool


@function_tool
def word_count(text: str) -> int:
    """How many words `text` has."""
    return len(text.split())


agent = Agent(
    name="assistant",
    instructions=(
        "You are a concise assistant. Use word_count when asked to count words, and "
        "agent_send to hand a long task to a worker."
    ),
    tools=[word_count],
)


if __name__ == "__main__":
    import asyncio

    from agents import Runner
    from agents.testing import ScriptedModel, assistant_message, function_call

    async def main() -> None:
        fake = ScriptedModel(
            [
                [function_call("word_count", {"text": "one two three"}, call_id="c1")],
                [assistant_message("That is 3 words.")],
            ]
        )
        result = await Runner.run(agent.clone(model=fake), "How many words: one two three?")
        print(result.final_output)

    asyncio.run(main())
