"""A Google ADK agent behind the broker (docs/adk.md).

    [engine]
    kind = "adk"
    agent = "agent_adk:root_agent"   # this file, beside the config file or on sys.path

It uses Gemini (GOOGLE_API_KEY in the daemon's environment). The broker adds its own
tools (agent_send, conversation_recall, scratchpad_*, schedule, session_compact) beside
`word_count`, and builds the ADK session for each turn from its ledger.
"""

from __future__ import annotations

from google.adk.agents import LlmAgent


def word_count(text: str) -> int:
    """How many words `text` has."""
    return len(text.split())


root_agent = LlmAgent(
    name="assistant",
    model="gemini-2.5-flash",
    instruction=(
        "You are a concise assistant. Use word_count when asked to count words, and "
        "agent_send to hand a long task to a worker."
    ),
    tools=[word_count],
)
