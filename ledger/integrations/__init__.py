"""Drop-in session stores for agent frameworks, on the ledger (ledger/api/).

Each module imports its framework, installed with the extra of its name
(`pip install agent-broker[openai-agents]`); the core install needs none.
"""

__all__ = [
    "adk",
    "openai_agents",
]
